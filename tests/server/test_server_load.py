"""Many clients at once, clients that leave mid-stream, and SIGTERM under load."""
import http.client
import json
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

from server_util import ServerProcess


def stream_one(url, i, max_tokens, on_first_chunk=None):
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    text, reason, usage = "", None, None
    for chunk in c.completions.create(model="smollm2", prompt=f"Request {i}: the sea is",
                                      max_tokens=max_tokens, temperature=0.8, seed=i,
                                      stream=True, stream_options={"include_usage": True},
                                      extra_body={"ignore_eos": True}):
        if on_first_chunk is not None:
            on_first_chunk()
            on_first_chunk = None
        if chunk.choices:
            text += chunk.choices[0].text
            reason = chunk.choices[0].finish_reason or reason
        if chunk.usage:
            usage = chunk.usage
    return text, reason, usage


def test_64_concurrent_streams(server):
    before = server.wait_idle()
    with ThreadPoolExecutor(64) as pool:
        results = list(pool.map(lambda i: stream_one(server.url, i, 12), range(64)))
    after = server.wait_idle()
    assert all(r[1] == "length" for r in results)
    assert all(r[2].completion_tokens == 12 for r in results)
    gen = after[("pagoda:generation_tokens_total", ())] - before[(
        "pagoda:generation_tokens_total", ())]
    prompt = after[("pagoda:prompt_tokens_total", ())] - before[("pagoda:prompt_tokens_total", ())]
    assert gen == 64 * 12
    assert prompt == sum(r[2].prompt_tokens for r in results)
    key = ("pagoda:request_success_total", (("finished_reason", "length"),))
    assert after[key] - before[key] == 64
    assert after[("pagoda:kv_cache_usage_perc", ())] == 0


ABORT = ("pagoda:request_success_total", (("finished_reason", "abort"),))
LENGTH = ("pagoda:request_success_total", (("finished_reason", "length"),))


def open_long_stream(port, chunks=3):
    """A streaming request for 1,800 tokens, read until `chunks` data chunks arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps({
        "model": "smollm2", "prompt": "Write a long essay.", "max_tokens": 1800,
        "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    assert r.status == 200
    got = 0
    while got < chunks:
        if r.readline().startswith(b"data: {"):
            got += 1
    return conn


def test_disconnect_mid_stream_aborts(server):
    before = server.wait_idle()
    conn = open_long_stream(server.port)
    assert server.metrics()[("pagoda:num_requests_running", ())] == 1
    conn.sock.close()
    conn.close()
    t0 = time.time()
    m = server.wait_idle(timeout=20)  # 1800 tokens would take far longer
    assert time.time() - t0 < 20
    assert m[("pagoda:kv_cache_usage_perc", ())] == 0
    # Counted as vLLM counts it: finished with reason abort, not as a success by length.
    assert m[ABORT] - before[ABORT] == 1
    assert m[LENGTH] - before[LENGTH] == 0


def test_disconnect_while_waiting_for_a_non_streaming_response_aborts(server):
    """A non-streaming request writes nothing until it is done; a client that closes its
    socket meanwhile still aborts it and frees its blocks, well before it would finish."""
    before = server.wait_idle()
    body = json.dumps({"model": "smollm2", "prompt": "Write a long essay.",
                       "max_tokens": 1800, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\n" +
                 f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.time() + 30
    while server.metrics()[("pagoda:num_requests_running", ())] < 1:
        assert time.time() < deadline
        time.sleep(0.02)
    time.sleep(0.5)
    m = server.metrics()
    assert m[("pagoda:num_requests_running", ())] == 1 and m[("pagoda:kv_cache_usage_perc", ())] > 0
    sock.close()
    t0 = time.time()
    m = server.wait_idle(timeout=5)  # the 1800 tokens would take far longer
    assert time.time() - t0 < 5
    assert m[("pagoda:kv_cache_usage_perc", ())] == 0
    assert m[ABORT] - before[ABORT] == 1
    assert m[LENGTH] - before[LENGTH] == 0
    assert m[("pagoda:generation_tokens_total", ())] - before[(
        "pagoda:generation_tokens_total", ())] < 1800


def test_sigterm_under_load_finishes_in_flight_and_exits_0():
    s = ServerProcess("--shutdown-grace", "60")
    try:
        results, errors = [], []
        # Every request must be in flight (its stream has begun) before SIGTERM: a token
        # count alone can be reached by the first requests while a slow-starting client
        # thread has not yet connected, and that request is rightly refused with 503.
        streaming = [threading.Event() for _ in range(8)]

        def worker(i):
            try:
                results.append(stream_one(s.url, i, 24, streaming[i].set))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                streaming[i].set()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.time() + 30
        for ev in streaming:
            assert ev.wait(timeout=max(0.0, deadline - time.time()))
        assert not errors, errors
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        # New work is refused while draining.
        try:
            st, headers, _ = s.request("POST", "/v1/completions",
                                       {"model": "smollm2", "prompt": "Hi", "max_tokens": 2})
            assert st == 503
        except (ConnectionError, OSError):
            pass  # or the listener is already closed
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        assert len(results) == 8 and all(r[1] == "length" and r[2].completion_tokens == 24
                                         for r in results)
        assert s.proc.wait(timeout=60) == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_sigterm_grace_expiry_aborts_and_exits_0():
    s = ServerProcess("--shutdown-grace", "1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "model": "smollm2", "prompt": "Go on forever.", "max_tokens": 1800,
            "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.readline()
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        body = r.read().decode()  # the stream ends (finish_reason abort), not hangs
        assert body.rstrip().endswith("data: [DONE]")
        assert '"finish_reason":"abort"' in body
        assert s.proc.wait(timeout=30) == 0
        assert time.time() - t0 < 20
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def greedy_stream(url, i, max_tokens):
    c = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=300)
    text, toks = "", 0
    for chunk in c.completions.create(model="smollm2", prompt=f"Story {i}: the river",
                                      max_tokens=max_tokens, temperature=0, stream=True,
                                      stream_options={"include_usage": True},
                                      extra_body={"ignore_eos": True}):
        if chunk.choices:
            text += chunk.choices[0].text
        if chunk.usage:
            toks = chunk.usage.completion_tokens
    return text, toks


def test_async_scheduling_streams_what_plain_steps_stream(server):
    """`--async-scheduling` (each step queued before the previous step's tokens are
    handled): 16 concurrent greedy streams, one client leaving mid-stream, and the texts
    equal the plain server's; the pool is whole afterwards."""
    s = ServerProcess("--async-scheduling")
    try:
        lengths = [1 + (7 * i) % 23 for i in range(16)]
        with ThreadPoolExecutor(16) as pool:
            plain = list(pool.map(lambda i: greedy_stream(server.url, i, lengths[i]), range(16)))
            before = s.wait_idle()
            conn = open_long_stream(s.port)
            piped = list(pool.map(lambda i: greedy_stream(s.url, i, lengths[i]), range(16)))
            conn.sock.close()
            conn.close()
        assert piped == plain
        assert [t for _, t in piped] == lengths
        m = s.wait_idle(timeout=30)
        assert m[("pagoda:kv_cache_usage_perc", ())] == 0
        assert m[ABORT] - before[ABORT] == 1
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
