"""Errors arrive as OpenAI errors with the right status and openai exception class, and
/metrics (parsed by prometheus_client) counts what was sent."""
import openai
import pytest

from server_util import ServerProcess


@pytest.mark.parametrize("kw,param", [
    ({"temperature": 5}, "temperature"),
    ({"max_tokens": -1}, "max_tokens"),
    ({"top_p": 0}, "top_p"),
    ({"n": 0}, "n"),
    ({"extra_body": {"stop": 3}}, "stop"),
    ({"extra_body": {"top_k": "x"}}, "top_k"),
    ({"max_tokens": 5000}, None),  # prompt + max_tokens over max_model_len
])
def test_bad_parameters_are_400(client, model, kw, param):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=model, prompt="Hi", **kw)
    assert e.value.status_code == 400
    body = e.value.body
    assert body["type"] == "BadRequestError" and body["message"]
    if param:
        assert body["param"] == param


def test_prompt_too_long_is_400(client, model):
    with pytest.raises(openai.BadRequestError, match="context"):
        client.completions.create(model=model, prompt="hello " * 3000, max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt=[10**9], max_tokens=4)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=[], max_tokens=4)


def test_ten_megabyte_prompt_is_refused_quickly(server):
    """A prompt far over the context is refused once its tokens pass the context, not after
    all 10 MB are tokenized (which took seconds)."""
    import time
    text = "The quick brown fox jumps over the lazy dog. " * (10_000_000 // 45)
    for path, body in (
            ("/v1/completions", {"model": "smollm2", "prompt": text, "max_tokens": 4}),
            ("/v1/chat/completions", {"model": "smollm2", "max_tokens": 4,
                                      "messages": [{"role": "user", "content": text}]})):
        t0 = time.monotonic()
        st, _, payload = server.request("POST", path, body)
        elapsed = time.monotonic() - t0
        assert st == 400, payload
        assert "context" in payload["error"]["message"]
        assert elapsed < 2.0, (path, elapsed)  # about 0.2 s; generous for a busy 2-core CI


def test_unknown_model_and_route_are_404(server, client):
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="no-such-model", prompt="Hi", max_tokens=2)
    assert e.value.status_code == 404 and e.value.body["param"] == "model"
    st, _, body = server.request("GET", "/v1/nothing")
    assert st == 404 and body["error"]["code"] == 404


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", "", "\"text\"", "{\"prompt\": null}"])
def test_malformed_bodies_are_400(server, raw):
    st, _, body = server.request("POST", "/v1/completions", raw=raw)
    assert st == 400 and body["error"]["type"] == "BadRequestError"
    st, _, body = server.request("POST", "/v1/chat/completions", raw=raw)
    assert st == 400


def test_metrics_count_requests(server, client, model):
    before = server.wait_idle()
    sent = []
    for i in range(3):
        r = client.completions.create(model=model, prompt=f"Count {i}:", max_tokens=5 + i,
                                      temperature=0, extra_body={"ignore_eos": True})
        sent.append(r.usage)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="Hi", temperature=-1)
    after = server.wait_idle()

    def delta(name, labels=()):
        return after.get((name, labels), 0) - before.get((name, labels), 0)

    assert delta("pagoda:generation_tokens_total") == sum(u.completion_tokens for u in sent)
    assert delta("pagoda:prompt_tokens_total") == sum(u.prompt_tokens for u in sent)
    assert delta("pagoda:request_success_total", (("finished_reason", "length"),)) == 3
    assert delta("pagoda:request_errors_total", (("code", "400"),)) == 1
    for h in ("time_to_first_token_seconds", "e2e_request_latency_seconds",
              "request_queue_time_seconds"):
        assert delta(f"pagoda:{h}_count") == 3
        assert delta(f"pagoda:{h}_bucket", (("le", "+Inf"),)) == 3
    assert delta("pagoda:inter_token_latency_seconds_count") == sum(
        u.completion_tokens - 1 for u in sent)
    assert ("pagoda:prefix_cache_queries_total", ()) in after
    assert ("pagoda:num_preemptions_total", ()) in after
    assert after[("pagoda:kv_cache_usage_perc", ())] == 0
    assert any(k[0] == "pagoda:build_info" for k in after)


@pytest.fixture(scope="module")
def guarded():
    s = ServerProcess("--max-num-seqs", "1", "--max-waiting-requests", "1",
                      "--max-request-body", "4KiB", env={"PAGODA_API_KEY": "sekret"},
                      probe_headers={"Authorization": "Bearer sekret"})
    yield s
    assert s.stop() == 0


def test_api_key_is_401(guarded):
    bad = openai.OpenAI(base_url=guarded.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        bad.models.list()
    assert e.value.status_code == 401
    st, _, _ = guarded.request("GET", "/v1/models")
    assert st == 401
    good = openai.OpenAI(base_url=guarded.url + "/v1", api_key="sekret", max_retries=0)
    assert good.models.list().data[0].id == "smollm2"
    st, _, _ = guarded.request("GET", "/health")  # behind the key (--open-health-metrics opens it)
    assert st == 401
    assert guarded.request("GET", "/health", headers={"Authorization": "Bearer sekret"})[0] == 200


def test_body_over_limit_is_413(guarded):
    st, _, body = guarded.request("POST", "/v1/completions",
                                  {"model": "smollm2", "prompt": "x" * 8192},
                                  headers={"Authorization": "Bearer sekret"})
    assert st == 413 and body["error"]["code"] == 413


def test_waiting_queue_full_is_503_with_retry_after(guarded):
    c = openai.OpenAI(base_url=guarded.url + "/v1", api_key="sekret", max_retries=0)
    kw = dict(model="smollm2", prompt="Tell a story.", max_tokens=400, stream=True,
              extra_body={"ignore_eos": True})
    running = c.completions.create(**kw)
    next(iter(running))  # running now
    waiting = c.completions.create(**kw)  # the one waiting slot
    import time
    deadline = time.time() + 10
    while guarded.metrics()[("pagoda:num_requests_waiting", ())] < 1:
        assert time.time() < deadline
        time.sleep(0.05)
    with pytest.raises(openai.APIStatusError) as e:
        c.completions.create(model="smollm2", prompt="Hi", max_tokens=2)
    assert e.value.status_code == 503
    assert e.value.response.headers["retry-after"] == "1"
    running.close()
    waiting.close()
    guarded.wait_idle()


WRONG = [None, True, -1, 1e300, "x", [], {}, [1, "a"], [[]], 2**70]
FIELDS = ["prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p",
          "top_k", "min_p", "n", "stop", "seed", "presence_penalty", "frequency_penalty",
          "repetition_penalty", "logprobs", "top_logprobs", "echo", "ignore_eos", "user",
          "priority", "stream", "stream_options", "stop_token_ids", "model"]


def test_wrong_types_never_500(server):
    """Every field with every wrong-ish value: a 2xx or a 4xx, never a 5xx or a crash."""
    # Both limits set, so a null one leaves the other (chat's default is the whole context).
    limits = {"max_tokens": 1, "max_completion_tokens": 1}
    for path, base in (("/v1/completions", {"prompt": "Hi", **limits}),
                       ("/v1/chat/completions",
                        {"messages": [{"role": "user", "content": "Hi"}], **limits})):
        for field in FIELDS:
            for value in WRONG:
                body = {**base, field: value}
                if field == "stream" and value is True:
                    continue  # a valid stream; covered elsewhere
                st, _, payload = server.request("POST", path, body)
                assert st < 500, (path, field, value, payload)
                if st >= 400:
                    assert payload["error"]["code"] == st
    for path in ("/tokenize", "/detokenize"):
        for value in WRONG:
            st, _, _ = server.request("POST", path, {"prompt": value, "tokens": value,
                                                     "messages": value})
            assert st < 500, (path, value)
    st, _, _ = server.request("GET", "/health")
    assert st == 200
