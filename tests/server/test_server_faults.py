"""Engine errors reach the client as errors, never as a hang: PAGODA_FAULT_INJECT makes
forward passes fail (src/engine/fault_injection.h)."""
import openai
import pytest

from server_util import ServerProcess

ERRORS_500 = ("pagoda:request_errors_total", (("code", "500"),))


@pytest.fixture(scope="module")
def faulty():
    # Passes 1-5 run, 6 and 7 fail, later ones run again.
    s = ServerProcess(env={"PAGODA_FAULT_INJECT": "forward_fail_after=5,forward_fail_count=2"})
    yield s
    assert s.stop() == 0


def test_engine_errors_reach_streaming_and_non_streaming_clients(faulty):
    c = openai.OpenAI(base_url=faulty.url + "/v1", api_key="x", max_retries=0, timeout=60)
    before = faulty.metrics()
    st, _, _ = faulty.request("GET", "/health")
    assert st == 200

    # Streaming: the prefill and 4 decode steps run, the next fails mid-stream.
    text = ""
    with pytest.raises(openai.APIError, match="injected fault"):
        for chunk in c.completions.create(model="smollm2", prompt="Tell a story.",
                                          max_tokens=50, temperature=0, stream=True,
                                          extra_body={"ignore_eos": True}):
            if chunk.choices:
                text += chunk.choices[0].text
    assert text  # some tokens came before the error

    # The engine's latest step failed: /health says so.
    st, _, body = faulty.request("GET", "/health")
    assert st == 500 and "failed" in body["error"]["message"]

    # Non-streaming: an OpenAI error with a 5xx status, not a hang or a 200.
    with pytest.raises(openai.InternalServerError, match="injected fault") as e:
        c.completions.create(model="smollm2", prompt="Tell a story.", max_tokens=50,
                             temperature=0, extra_body={"ignore_eos": True})
    assert e.value.status_code == 500 and e.value.body["type"] == "InternalServerError"
    chat = ("/v1/chat/completions", {"model": "smollm2", "max_tokens": 4,
                                     "messages": [{"role": "user", "content": "Hi"}]})

    m = faulty.wait_idle()
    assert m[ERRORS_500] - before.get(ERRORS_500, 0) == 2
    for reason in ("stop", "length", "abort"):  # errors are not successes (nor aborts)
        key = ("pagoda:request_success_total", (("finished_reason", reason),))
        assert m[key] == before[key]

    # The fault has passed: requests run again and /health recovers.
    st, _, body = faulty.request("POST", *chat)
    assert st == 200 and body["choices"][0]["message"]["content"] is not None
    st, _, _ = faulty.request("GET", "/health")
    assert st == 200


def test_a_bad_fault_spec_stops_the_server():
    with pytest.raises(AssertionError, match="PAGODA_FAULT_INJECT"):
        ServerProcess(env={"PAGODA_FAULT_INJECT": "forward_fail_after=soon"})
