"""Issue 39: the server against hostile and unlucky clients. Each test makes the attack,
then checks the server's state: alive (/health answers), resident memory within a bound,
the KV pool empty, and on shutdown the exit status and time."""
import http.client
import json
import os
import random
import select
import signal
import string
import socket
import subprocess
import threading
import time

import pytest

from server_util import PAGODA, SMOLLM2, ServerProcess, free_port

LIMIT_FLAGS = ("--max-request-body", "1MiB", "--max-header-bytes", "32KiB", "--max-headers", "64",
               "--header-timeout", "2", "--body-timeout", "3", "--keep-alive-timeout", "3")


@pytest.fixture(scope="module")
def hard():
    s = ServerProcess(*LIMIT_FLAGS)
    yield s
    assert s.stop() == 0


def rss_mib(proc):
    with open(f"/proc/{proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class _Unclosable:
    """One buffered reader shared by successive responses of a connection (http.client
    closes its reader after each body, and a fresh reader per response would lose what
    the previous one read ahead)."""

    def __init__(self, f):
        self._f = f

    def __getattr__(self, name):
        return getattr(self._f, name)

    def close(self):
        pass


class Conn:
    def __init__(self, sock):
        self._f = _Unclosable(sock.makefile("rb"))

    def makefile(self, *args, **kwargs):
        return self._f


def response_of(sock):
    """(status, headers dict with lower-case names, body bytes) of the next response.
    Pass a Conn(sock) to read several responses of one connection."""
    r = http.client.HTTPResponse(sock)
    r.begin()
    body = r.read()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def raw(port, data, timeout=30):
    """Sends raw bytes, returns the response; tolerates the server closing while sending."""
    with connect(port, timeout) as s:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return response_of(s)


def chunked_post(port, path, chunks, headers=b""):
    with connect(port, 60) as s:
        try:
            s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
                      headers + b"\r\n")
            for c in chunks:
                s.sendall(b"%x\r\n%s\r\n" % (len(c), c))
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        return response_of(s)


def health_time(server):
    t0 = time.time()
    st, _, _ = server.request("GET", "/health")
    assert st == 200
    return time.time() - t0


def assert_alive_and_idle(server):
    assert health_time(server) < 2
    m = server.wait_idle(timeout=30)
    assert m[("pagoda:kv_cache_usage_perc", ())] == 0


# 1. A body nesting 100,000 arrays crashed the process (recursive copy of the JSON value).
@pytest.mark.parametrize("path", ["/detokenize", "/tokenize", "/v1/completions",
                                  "/v1/chat/completions"])
def test_deep_json_is_400_not_a_crash(hard, path):
    deep = b'{"tokens": ' + b"[" * 100000 + b"]" * 100000 + b', "x": 1}'
    st, _, body = chunked_post(hard.port, path, [deep[i:i + 65536]
                                                 for i in range(0, len(deep), 65536)])
    assert st == 400
    assert "deep" in json.loads(body)["error"]["message"]
    assert hard.proc.poll() is None
    assert_alive_and_idle(hard)


# 2. --max-request-body held for Content-Length bodies only; chunked ones were read whole.
def test_chunked_body_over_limit_is_413_and_costs_no_memory(hard):
    rss0 = rss_mib(hard.proc)
    chunk = b"x" * (1 << 20)
    for _ in range(3):
        st, _, body = chunked_post(hard.port, "/v1/completions", [chunk] * 200)  # 200 MiB
        assert st == 413
        assert "1048576 bytes" in json.loads(body)["error"]["message"]
    assert rss_mib(hard.proc) - rss0 < 32
    # Under the limit, chunked works.
    st, _, body = chunked_post(hard.port, "/tokenize", [b'{"prompt": ', b'"Hello"}'])
    assert st == 200 and json.loads(body)["count"] > 0
    assert_alive_and_idle(hard)


# 3. No limit on header count or size: 5 million headers were accepted (545 MB kept).
def test_header_count_and_size_are_431(hard):
    rss0 = rss_mib(hard.proc)
    many = b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 65 + b"\r\n"
    assert raw(hard.port, many)[0] == 431
    huge = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * (40 << 10) + b"\r\n\r\n"
    assert raw(hard.port, huge)[0] == 431
    # A flood of headers is cut off at the size limit, never stored.
    with connect(hard.port) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(200):
                s.sendall(b"X-Flood: y\r\n" * 5000)  # 60 MB in all, if it were read
        except (BrokenPipeError, ConnectionResetError):
            pass
    assert rss_mib(hard.proc) - rss0 < 32
    assert_alive_and_idle(hard)


# 4. Each connection held an HTTP thread with no deadline: 300 slow clients starved /health.
def test_slow_clients_do_not_starve_health_and_get_408(hard):
    socks = []
    for i in range(300):
        s = connect(hard.port)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # and then a byte a second
        socks.append(s)
    slow_bodies = []
    for i in range(20):  # headers whole, the body never comes
        s = connect(hard.port)
        s.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        slow_bodies.append(s)
    t_end = time.time() + 2.5
    worst = 0
    while time.time() < t_end:
        for s in socks[:50]:
            try:
                s.send(b"X")
            except OSError:
                pass
        worst = max(worst, health_time(hard))
        time.sleep(0.2)
    assert worst < 1.0
    # The header deadline (2 s) answers 408 and closes; the body deadline (3 s) likewise.
    for s in socks[:5] + slow_bodies[:5]:
        s.settimeout(10)
        st, h, _ = response_of(s)
        assert st == 408 and h.get("connection") == "close"
    for s in socks + slow_bodies:
        s.close()
    assert_alive_and_idle(hard)


def test_many_streams_do_not_starve_health():
    """Streams hold no thread: 400 at once (no --max-waiting-requests), most of them
    waiting for one of 2 sequence slots, and /health stays quick; then every client leaves
    and the pool empties."""
    s = ServerProcess("--max-num-seqs", "2")
    try:
        req = json.dumps({"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 200,
                          "ignore_eos": True, "stream": True}).encode()
        socks = []
        for i in range(400):  # more than cpp-httplib's 256 threads held
            c = connect(s.port, 120)
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(req), req))
            socks.append(c)
        deadline = time.time() + 30
        while s.metrics()[("pagoda:num_requests_waiting", ())] < 350:
            assert time.time() < deadline
            time.sleep(0.1)
        worst = 0
        for _ in range(10):
            worst = max(worst, health_time(s))
            time.sleep(0.1)
        assert worst < 1.0
        # Streams are served meanwhile: some connection gets its 200 and first events.
        ready, _, _ = select.select(socks, [], [], 60)
        assert ready and ready[0].recv(64).startswith(b"HTTP/1.1 200 ")
        for c in socks:
            c.close()
        assert_alive_and_idle(s)
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


# 5. SIGTERM during start-up left the process answering 503 forever, deaf to signals.
def test_sigterm_at_any_moment_of_start_up_exits_0():
    for i in range(12):
        port = free_port()
        p = subprocess.Popen([str(PAGODA), "serve", "-m", str(SMOLLM2), "--port", str(port),
                              "--threads", "2", "--max-model-len", "2048",
                              "--kv-cache-memory", "64MiB", "--shutdown-grace", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.02 + 0.03 * i)  # 0.02 .. 0.35 s: load, bind, listen
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        try:
            assert p.wait(timeout=2.5) == 0
        finally:
            if p.poll() is None:
                p.kill()
        assert time.time() - t0 < 2.5


# 6. Slow clients held shutdown past --shutdown-grace (exit at 43 s with grace 2 s).
def test_shutdown_within_grace_with_slow_clients():
    s = ServerProcess("--shutdown-grace", "2")
    try:
        slow = [connect(s.port) for _ in range(50)]
        for c in slow:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        # A stream nobody reads: its socket buffers fill, its writes stall.
        deaf = socket.socket()
        deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        deaf.connect(("127.0.0.1", s.port))
        req = json.dumps({"model": "smollm2", "prompt": "Go on.", "max_tokens": 1900,
                          "ignore_eos": True, "stream": True, "logprobs": 5}).encode()
        deaf.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(req), req))
        # A stream that is read: it ends with finish_reason abort.
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({
            "model": "smollm2", "prompt": "Go on forever.", "max_tokens": 1900,
            "ignore_eos": True, "stream": True}), headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.readline()
        time.sleep(1)
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        body = r.read().decode()
        assert '"finish_reason":"abort"' in body and body.rstrip().endswith("data: [DONE]")
        assert s.proc.wait(timeout=10) == 0
        assert time.time() - t0 < 2 + 1
        for c in slow + [deaf]:
            c.close()
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


# 7. A chat template doubling a list allocated 4.2 GB.
def test_template_allocation_is_bounded(tmp_path):
    t = tmp_path / "doubling.jinja"
    t.write_text("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}"
                 "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}")
    s = ServerProcess("--chat-template", t)
    try:
        rss0 = rss_mib(s.proc)
        t0 = time.time()
        st, _, body = s.request("POST", "/v1/chat/completions", {
            "model": "smollm2", "messages": [{"role": "user", "content": "Hi"}]})
        assert st == 400 and "alloc" in body["error"]["message"]
        assert time.time() - t0 < 5
        assert rss_mib(s.proc) - rss0 < 600
        assert_alive_and_idle(s)
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


# 9. The smaller items.
def test_wrong_method_is_405_with_allow(hard):
    st, h, body = raw(hard.port, b"DELETE /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n")
    assert st == 405 and h["allow"] == "POST" and body
    st, h, _ = raw(hard.port, b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
    assert st == 405 and h["allow"] == "GET"
    assert raw(hard.port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 404


@pytest.mark.parametrize("ids", [[-1], [2 ** 32], [2 ** 32 + 2], [49152]])
def test_stop_token_ids_out_of_vocabulary_are_400(hard, ids):
    st, _, body = hard.request("POST", "/v1/completions", {
        "model": "smollm2", "prompt": "Hi", "max_tokens": 2, "stop_token_ids": ids})
    assert st == 400 and body["error"]["param"] == "stop_token_ids"


def test_seed_takes_the_whole_64_bit_range(hard):
    def sample(seed):
        st, _, body = hard.request("POST", "/v1/completions", {
            "model": "smollm2", "prompt": "The colour of the sky", "max_tokens": 12,
            "temperature": 1.5, "seed": seed})
        assert st == 200
        return body["choices"][0]["text"]
    # Seeds above 2^63 are distinct seeds, not all clamped to one.
    texts = {sample(2 ** 63 + k) for k in range(4)}
    assert len(texts) > 1
    assert sample(2 ** 64 - 1) == sample(2 ** 64 - 1)
    st, _, body = hard.request("POST", "/v1/completions", {
        "model": "smollm2", "prompt": "Hi", "max_tokens": 2, "seed": 2 ** 64})
    assert st == 400 and body["error"]["param"] == "seed"


@pytest.mark.parametrize("cl,status", [(b"-1", 400), (b"5, 5", 400), (b"0x10", 400),
                                        (b"99999999999999999999999", 400)])
def test_bad_content_length_is_400(hard, cl, status):
    st, h, _ = raw(hard.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: " + cl +
                   b"\r\n\r\n{}")
    assert st == status and h.get("connection") == "close"


def test_duplicate_framing_headers_are_refused(hard):
    body = b'{"prompt": "Hi"}'
    dup = b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
    assert raw(hard.port, dup % (len(body), len(body), body))[0] == 400
    both = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert raw(hard.port, both)[0] == 400
    for te in [b"chunked, identity", b"xchunked", b"gzip", b"identity"]:
        st, _, _ = raw(hard.port, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " +
                       te + b"\r\n\r\n0\r\n\r\n")
        assert st == 501, te
    assert_alive_and_idle(hard)


def test_pipelined_requests_are_all_answered(hard):
    body = b'{"prompt": "Hello"}'
    one = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" %
           (len(body), body))
    with connect(hard.port) as s:
        s.sendall(one + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + one +
                  b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        c = Conn(s)
        got = [response_of(c)[0] for _ in range(4)]
    assert got == [200, 200, 200, 200]


def test_http_1_0_stream_is_not_chunked(hard):
    req = json.dumps({"model": "smollm2", "prompt": "Hi", "max_tokens": 4, "stream": True})
    with connect(hard.port) as s:
        s.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" %
                  (len(req), req.encode()))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert b"transfer-encoding" not in head.lower()
    assert body.startswith(b"data: ") and body.rstrip().endswith(b"data: [DONE]")


@pytest.mark.parametrize("ctype", [b"", b"Content-Type: application/x-www-form-urlencoded\r\n"])
def test_json_without_json_content_type_is_read_whole(hard, ctype):
    """No Content-Type, or curl -d's form type: a JSON body is read whole, and the 413
    beyond the limit states the limit in force."""
    body = json.dumps({"prompt": "word " * 20000}).encode()  # 100 KB
    head = b"POST /tokenize HTTP/1.1\r\nHost: x\r\n" + ctype + b"Content-Length: %d\r\n\r\n"
    st, _, out = raw(hard.port, head % len(body) + body)
    assert st == 200 and json.loads(out)["count"] >= 20000
    big = b"x" * ((1 << 20) + 1)
    st, _, out = raw(hard.port, head % len(big) + big)
    assert st == 413 and "1048576 bytes" in json.loads(out)["error"]["message"]


def test_unknown_model_name_is_not_echoed_whole(hard):
    st, _, body = hard.request("POST", "/v1/completions",
                               {"model": "m" * (512 << 10), "prompt": "Hi"})
    assert st == 404 and len(json.dumps(body)) < 2048


def test_ten_megabyte_prompt_is_refused_quickly():
    """A 10 MB prompt is refused once its tokens pass the context, not after tokenizing
    all of it (5.5 s of CPU before)."""
    rng = random.Random(0)
    words = ["".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(2, 11)))
             for _ in range(20000)]
    words = " ".join(rng.choice(words) for _ in range(1_500_000))[:10_000_000]
    s = ServerProcess("--max-request-body", "32MiB")
    try:
        # One word of 10 million letters is a single piece for BPE: the slow case.
        for path, body, param in [
                ("/v1/completions", {"model": "smollm2", "prompt": "a" * 10_000_000}, "prompt"),
                ("/v1/completions", {"model": "smollm2", "prompt": words}, "prompt"),
                ("/v1/chat/completions", {"model": "smollm2", "messages": [
                    {"role": "user", "content": words}]}, "messages")]:
            t0 = time.time()
            st, _, out = s.request("POST", path, body)
            assert st == 400 and out["error"]["param"] == param
            assert time.time() - t0 < 2.0, path
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


# Authentication: every route behind --api-key, probes opened by a flag.
def test_api_key_guards_every_route_and_accepts_any_case_of_bearer():
    s = ServerProcess("--api-key", "sekret")
    o = ServerProcess("--api-key", "sekret", "--open-health-metrics")
    try:
        for path, body in [("/tokenize", {"prompt": "Hi"}), ("/detokenize", {"tokens": [1]}),
                           ("/v1/completions", {"prompt": "Hi", "max_tokens": 1})]:
            st, h, _ = s.request("POST", path, body)
            assert st == 401 and h.get("WWW-Authenticate") == "Bearer"
            for scheme in ["Bearer", "bearer", "BEARER"]:
                st, _, _ = s.request("POST", path, body,
                                     headers={"Authorization": scheme + " sekret"})
                assert st == 200, (path, scheme)
            st, _, _ = s.request("POST", path, body, headers={"Authorization": "Bearer sekreT"})
            assert st == 401
        for path in ["/health", "/metrics"]:
            assert s.request("GET", path)[0] == 401
            assert s.request("GET", path, headers={"Authorization": "Bearer sekret"})[0] == 200
            assert o.request("GET", path)[0] == 200
        assert o.request("POST", "/tokenize", {"prompt": "Hi"})[0] == 401
        assert s.stop() == 0 and o.stop() == 0
    finally:
        for p in (s, o):
            if p.proc.poll() is None:
                p.proc.kill()


def test_connections_over_the_limit_get_503():
    s = ServerProcess("--max-connections", "20", "--keep-alive-timeout", "30")
    try:
        held = [connect(s.port) for _ in range(20)]
        time.sleep(0.2)
        with connect(s.port) as c:
            c.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            st, h, _ = response_of(c)
        assert st == 503 and h.get("retry-after") == "1"
        for c in held:
            c.close()
        time.sleep(0.3)
        assert health_time(s) < 1
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()


def test_many_large_bodies_at_once_are_bounded():
    """Bodies being read count against --max-body-memory over all connections: past it a
    connection gets 503, so many large bodies at once cannot exhaust memory."""
    s = ServerProcess("--max-request-body", "1MiB", "--max-body-memory", "4MiB")
    try:
        rss0 = rss_mib(s.proc)
        part = b"x" * (900 << 10)
        socks, refused = [], 0
        for _ in range(8):
            c = connect(s.port)
            c.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % (1 << 20) + part)
            socks.append(c)
            time.sleep(0.1)
        for c in socks[4:]:
            st, _, body = response_of(c)
            refused += st == 503
        assert refused == 4
        assert rss_mib(s.proc) - rss0 < 64
        assert health_time(s) < 1
        for c in socks:
            c.close()
        assert s.stop() == 0
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
