"""`pagoda generate`: the batching engine end to end on SmolLM2 through its offline CLI.

The reference for every request is `pagoda run`, the single-sequence path with no
scheduler, block manager or batching: greedy tokens must be identical, request by request,
whether the engine batched, chunked, prefix-cached or preempted them.
"""
import json
import os
import random

import pytest

from pagoda_util import SHARED, model_path, run_pagoda

SMOL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
CORPUS = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")


def generate(tmp_path, model, reqs, *flags, check=True):
    inp, out, st = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "stats.json"
    inp.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    proc = run_pagoda("generate", "-m", model, "--input", inp, "--output", out, "--stats-json", st,
                      "--threads", 2, *flags, check=check)
    outs = [json.loads(l) for l in out.read_text().splitlines()] if out.exists() else []
    stats = json.loads(st.read_text()) if st.exists() else None
    return proc, outs, stats


def mixed_requests(n=64, seed=3):
    rng = random.Random(seed)
    text = open(CORPUS, encoding="utf-8").read()
    shared = text[1000:1600]  # a prefix several requests share
    reqs = []
    for i in range(n):
        start = rng.randrange(0, len(text) - 2000)
        body = text[start:start + rng.randint(10, 900)]
        prompt = shared + body if i % 4 == 0 else body
        reqs.append({"id": f"q{i}", "prompt": prompt, "max_tokens": rng.randint(1, 32),
                     "temperature": 0})
    return reqs


@pytest.fixture(scope="module")
def alone():
    """Greedy tokens of each mixed request run alone through `pagoda run`."""
    m = model_path(SMOL)
    ref = {}
    for r in mixed_requests():
        out = json.loads(run_pagoda("run", "-m", m, "-p", r["prompt"], "-n", r["max_tokens"],
                                    "--temperature", 0, "--threads", 2, "--json").stdout)
        ref[r["id"]] = out
    return ref


@pytest.mark.parametrize("flags", [
    ["--max-num-seqs", 16, "--max-num-batched-tokens", 128],  # chunked prefill mixed in
    ["--max-num-seqs", 64, "--max-num-batched-tokens", 2048, "--no-enable-prefix-caching"],
    # 48 blocks of 16 tokens: far too few for 64 requests, so some are preempted.
    ["--max-num-seqs", 64, "--kv-cache-memory", str(48 * 16 * 23040), "--max-model-len", 768],
    # Pipelined steps: each queued before the previous step's tokens are handled.
    ["--max-num-seqs", 16, "--max-num-batched-tokens", 128, "--async-scheduling"],
    ["--max-num-seqs", 64, "--kv-cache-memory", str(48 * 16 * 23040), "--max-model-len", 768,
     "--async-scheduling"],
], ids=["chunked", "no-prefix-cache", "preempting", "chunked-async", "preempting-async"])
def test_batched_greedy_equals_each_request_alone(tmp_path, alone, flags):
    m = model_path(SMOL)
    reqs = mixed_requests()
    _, outs, stats = generate(tmp_path, m, reqs, *flags)
    assert [o["id"] for o in outs] == [r["id"] for r in reqs]  # input order
    for o in outs:
        ref = alone[o["id"]]
        assert o["token_ids"] == ref["tokens"], o["id"]
        assert o["finish_reason"] == ref["finish_reason"], o["id"]
        assert o["text"] == ref["text"], o["id"]
    assert stats["requests"] == 64 and stats["failed"] == 0
    if "--no-enable-prefix-caching" in flags:
        assert stats["prefix_cache_hits"] == 0
    else:
        assert stats["prefix_cache_hits"] > 0
    if "--kv-cache-memory" in flags:
        assert stats["preemptions"] > 0
    if "--async-scheduling" in flags:
        assert stats["pipelined_steps"] == stats["steps"] > 0
    else:
        assert stats["pipelined_steps"] == 0


@pytest.mark.parametrize("flags", [[], ["--async-scheduling"]], ids=["plain", "async"])
def test_stop_strings_cut_the_text(tmp_path, flags):
    m = model_path(SMOL)
    base = {"id": "a", "prompt": "The three primary colors are", "max_tokens": 40,
            "temperature": 0}
    _, full, _ = generate(tmp_path, m, [base])
    text = full[0]["text"]
    stop = text[12:17]
    assert stop and text.find(stop) == 12
    # With a second request running on, so pipelined steps queue past the stop.
    other = {"id": "b", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}
    _, cut, _ = generate(tmp_path, m, [dict(base, stop=[stop, "unlikely-zzz"]), other], *flags)
    assert cut[0]["text"] == text[:12]
    assert cut[0]["finish_reason"] == "stop"
    assert len(cut[1]["token_ids"]) == 40
    _, kept, _ = generate(tmp_path, m, [dict(base, stop=stop, include_stop_str_in_output=True)],
                          *flags)
    assert kept[0]["text"] == text[:17]


def test_n_completions_and_seeds(tmp_path):
    m = model_path(SMOL)
    req = {"id": "s", "prompt": "Once upon a time", "max_tokens": 16, "temperature": 1.0,
           "seed": 11, "n": 3}
    _, a, _ = generate(tmp_path, m, [req])
    _, b, _ = generate(tmp_path, m, [req])
    assert [o["index"] for o in a] == [0, 1, 2]
    assert [o["token_ids"] for o in a] == [o["token_ids"] for o in b]  # reproducible
    assert len({tuple(o["token_ids"]) for o in a}) > 1  # completions differ
    # Completion i is the request with seed 11 + i on its own.
    for i in range(3):
        _, one, _ = generate(tmp_path, m, [dict(req, n=1, seed=11 + i)])
        assert one[0]["token_ids"] == a[i]["token_ids"]


def test_logprobs_are_normalised_and_ranked(tmp_path):
    m = model_path(SMOL)
    _, outs, _ = generate(tmp_path, m, [{"id": 1, "prompt": "Hello", "max_tokens": 4,
                                         "temperature": 0, "logprobs": 3}])
    lps = outs[0]["logprobs"]
    assert len(lps) == 4
    for lp, tok in zip(lps, outs[0]["token_ids"]):
        assert lp["token"] == tok
        top = [t["logprob"] for t in lp["top"]]
        assert len(top) == 3 and top == sorted(top, reverse=True)
        assert lp["top"][0]["token"] == tok  # greedy picks the most likely
        assert abs(lp["logprob"] - top[0]) < 1e-6 and top[0] <= 0


def test_bad_input_is_a_clear_error(tmp_path):
    m = model_path(SMOL)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1, "prompt": "ok"}\n{"id": 2, "prompt": \n')
    proc = run_pagoda("generate", "-m", m, "--input", bad, check=False)
    assert proc.returncode != 0 and "line 2" in proc.stderr
    bad.write_text('{"id": 1, "prompt": "ok", "temprature": 0}\n')
    proc = run_pagoda("generate", "-m", m, "--input", bad, check=False)
    assert proc.returncode != 0 and "temprature" in proc.stderr
    proc = run_pagoda("generate", "-m", m, check=False)
    assert proc.returncode != 0 and "--input" in proc.stderr
    # One request that can never fit fails alone; the others complete.
    reqs = [{"id": "big", "prompt": "x " * 50, "max_tokens": 5000},
            {"id": "fine", "prompt": "Hello", "max_tokens": 3, "temperature": 0}]
    proc, outs, _ = generate(tmp_path, m, reqs, "--max-model-len", 1024, check=False)
    assert proc.returncode == 1
    assert outs[0]["finish_reason"] == "error" and "max_model_len" in outs[0]["error"]
    assert outs[1]["finish_reason"] == "length" and len(outs[1]["token_ids"]) == 3
