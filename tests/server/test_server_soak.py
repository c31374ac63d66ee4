"""Soak: minutes of normal streams mixed with clients that leave mid-stream, slow
clients and malformed requests. Bounded in time (PAGODA_SOAK_SECONDS, default 120, after
a 20 s warm-up) and count; only 127.0.0.1 is contacted. It ends with no KV block leaked,
nothing running, and resident memory within 10% of its value after the warm-up."""
import json
import os
import random
import socket
import threading
import time

import openai

from server_util import ServerProcess
from test_server_hardening import connect, response_of, rss_mib

SOAK_SECONDS = float(os.environ.get("PAGODA_SOAK_SECONDS", "120"))
WARMUP_SECONDS = 20


def post(path, body, extra=b""):
    body = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%s"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), extra, len(body), body))


def normal_stream(s, rng, stats):
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)
    n = rng.randint(2, 24)
    reason, got = None, 0
    for chunk in c.completions.create(model="smollm2", prompt=f"Tale {rng.random()}:",
                                      max_tokens=n, stream=True, temperature=0.7,
                                      stream_options={"include_usage": True},
                                      extra_body={"ignore_eos": True}):
        if chunk.choices:
            reason = chunk.choices[0].finish_reason or reason
        if chunk.usage:
            got = chunk.usage.completion_tokens
    assert reason == "length" and got == n, (reason, got, n)
    stats["streams"] += 1


def normal_chat(s, rng, stats):
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0, timeout=120)
    r = c.chat.completions.create(model="smollm2", max_tokens=rng.randint(1, 12),
                                  messages=[{"role": "user",
                                             "content": [{"type": "text", "text": "Hi"}]}])
    assert r.choices[0].finish_reason in ("length", "stop")
    stats["chats"] += 1


def leave_mid_stream(s, rng, stats):
    with connect(s.port, 60) as c:
        c.sendall(post("/v1/completions", {"model": "smollm2", "prompt": "Go on", "stream": True,
                                           "max_tokens": 400, "ignore_eos": True}))
        c.recv(rng.choice([1, 200, 2000]))
    stats["left"] += 1


def leave_while_waiting(s, rng, stats):
    with connect(s.port, 60) as c:
        c.sendall(post("/v1/chat/completions", {
            "model": "smollm2", "max_tokens": 300, "ignore_eos": True,
            "messages": [{"role": "user", "content": "Write at length."}]}))
        time.sleep(rng.uniform(0, 0.5))
    stats["left"] += 1


def slow_client(s, rng, stats):
    with connect(s.port, 30) as c:
        req = post("/tokenize", {"prompt": "slowly"})
        try:
            for i in range(0, len(req), 7):
                c.sendall(req[i:i + 7])
                time.sleep(rng.uniform(0.05, 0.4))
            st, _, _ = response_of(c)
            assert st in (200, 408)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered 408 and closed while we still wrote
    stats["slow"] += 1


MALFORMED = [
    b"\x00\xff garbage\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",
    post("/v1/completions", b"{not json"),
    post("/v1/completions", b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}"),
    post("/v1/chat/completions", {"model": "smollm2", "messages": "nope"}),
    post("/v1/completions", {"model": "smollm2", "prompt": "Hi", "temperature": "hot"}),
    post("/v1/completions", {"model": "smollm2", "prompt": "Hi", "stop_token_ids": [-5]}),
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 400 + b"\r\n",
]


def malformed(s, rng, stats):
    data = rng.choice(MALFORMED)
    with connect(s.port, 30) as c:
        try:
            c.sendall(data)
            st, _, _ = response_of(c)
            assert 400 <= st < 600, st
        except (BrokenPipeError, ConnectionResetError):
            pass
    stats["malformed"] += 1


MIX = [normal_stream, normal_stream, normal_chat, leave_mid_stream, leave_while_waiting,
       slow_client, malformed, malformed]


def run_mix(s, seconds, workers=12):
    stats = {k: 0 for k in ("streams", "chats", "left", "slow", "malformed")}
    errors = []
    deadline = time.time() + seconds

    def worker(seed):
        rng = random.Random(seed)
        for _ in range(100000):  # bounded even if each action were instant
            if time.time() > deadline or len(errors) > 5:
                return
            try:
                rng.choice(MIX)(s, rng, stats)
            except Exception as e:  # noqa: BLE001 - collected and reported below
                errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    worst_health = 0.0
    while any(t.is_alive() for t in threads):
        t0 = time.time()
        st, _, _ = s.request("GET", "/health")
        assert st == 200
        worst_health = max(worst_health, time.time() - t0)
        time.sleep(0.5)
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    return stats, worst_health


def test_soak():
    s = ServerProcess("--max-request-body", "1MiB", "--header-timeout", "2", "--body-timeout", "3",
                      "--max-num-seqs", "16")
    try:
        run_mix(s, WARMUP_SECONDS)
        s.wait_idle(timeout=60)
        rss0 = rss_mib(s.proc)
        stats, worst = run_mix(s, SOAK_SECONDS)
        m = s.wait_idle(timeout=60)
        rss1 = rss_mib(s.proc)
        print(f"soak {SOAK_SECONDS:.0f} s: {stats}; /health worst {worst * 1000:.0f} ms; "
              f"RSS {rss0:.1f} -> {rss1:.1f} MiB")
        assert stats["streams"] > 10 and stats["left"] > 5 and stats["malformed"] > 10
        assert m[("pagoda:kv_cache_usage_perc", ())] == 0
        assert m[("pagoda:num_requests_running", ())] == 0
        assert rss1 <= rss0 * 1.10, (rss0, rss1)
        assert worst < 2.0
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
