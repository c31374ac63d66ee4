"""The CPU's 8-bit KV cache (--kv-cache-dtype q8_0 / int8: llama.cpp's q8_0 cache rule).

What it costs is measured the way llama.cpp's users measure it, KL divergence from the
16-bit cache over the same chunks (`pagoda perplexity --kl-base`), and held to what
llama.cpp's own q8_0 cache costs against its f16 cache on the same text (llama-cpp-python,
flash attention on, which llama.cpp needs for a quantized V cache). Then the engine runs
with it, sized by the ledger: 1.88x the tokens of the 16-bit pool."""
import json
import os

import pytest

from pagoda_util import SHARED, model_path, pagoda_json, run_pagoda

llama_cpp = pytest.importorskip("llama_cpp")
np = pytest.importorskip("numpy")
from llama_ref import chunk_log_probs, kld  # noqa: E402

TEXT = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")
SMOL = "models/SmolLM2-135M-Instruct.Q8_0.gguf"
N_CTX, CHUNKS = 256, 4


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("kvq8") / "text.txt"
    with open(TEXT, "rb") as f:
        path.write_bytes(f.read()[-30000:])
    return path


def llama_kld(path, text, **quantized):
    """Mean KL divergence of llama.cpp with the given cache types from its f16 cache."""
    fa = getattr(llama_cpp, "LLAMA_FLASH_ATTN_TYPE_ENABLED", True)
    m = llama_cpp.Llama(str(path), n_ctx=N_CTX, vocab_only=True, verbose=False)
    toks = m.tokenize(text.read_bytes(), add_bos=True, special=False)
    m.close()
    chunks = [toks[c * N_CTX:(c + 1) * N_CTX] for c in range(CHUNKS)]
    base = chunk_log_probs(path, chunks, N_CTX // 2, flash_attn=fa)
    q = chunk_log_probs(path, chunks, N_CTX // 2, flash_attn=fa, **quantized)
    return float(kld(base, q).mean())


def test_q8_cache_costs_what_llama_cpps_does(text):
    path = model_path(SMOL)
    ours = pagoda_json("perplexity", "-m", path, "-f", text, "-c", N_CTX, "--chunks", CHUNKS,
                       "--kv-cache-dtype", "q8_0", "--kl-base", path, "-t", 2, "--json")
    theirs = llama_kld(path, text, type_k=8, type_v=8)  # GGML_TYPE_Q8_0
    # It does round (a divergence above zero) and about as much as llama.cpp's: measured
    # 0.0039 against 0.0035 over 8 chunks of 512.
    assert ours["kld"]["mean"] > 1e-4
    assert ours["kld"]["mean"] < 2 * theirs, (ours["kld"]["mean"], theirs)
    assert ours["same_top"] > 0.9
    assert abs(np.log(ours["ppl"] / ours["base_ppl"])) < 0.01


def test_the_engine_runs_on_a_q8_cache_of_the_planned_size(tmp_path):
    path = model_path(SMOL)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": str(i), "prompt": p, "max_tokens": 24,
                                       "temperature": 0}) + "\n"
                           for i, p in enumerate(["The capital of France is",
                                                  "def fibonacci(n):", "Once upon a time"])))
    outs = {}
    for kv in ("fp16", "q8_0"):
        out = tmp_path / f"{kv}.jsonl"
        proc = run_pagoda("generate", "-m", path, "--input", inp, "--output", out, "--quiet",
                          "--kv-cache-memory", "64MiB", "--max-model-len", 512, "--kv-cache-dtype", kv,
                          "-t", 2,
                          "--stats-json", tmp_path / f"{kv}.stats.json")
        assert proc.returncode == 0, proc.stderr
        outs[kv] = [json.loads(line) for line in out.read_text().splitlines()]
        assert all(len(o["token_ids"]) == 24 for o in outs[kv])
    # Greedy text from the two caches: the same start (a near tie later may part them).
    for a, b in zip(outs["fp16"], outs["q8_0"]):
        assert a["token_ids"][:4] == b["token_ids"][:4], (a, b)
    # The engine's pool in the same 64 MiB: 1.88x the blocks (34 bytes per 32 values
    # against 64), as the ledger plans it.
    stats = {kv: json.loads((tmp_path / f"{kv}.stats.json").read_text()) for kv in outs}
    assert stats["q8_0"]["kv_pool_bytes"] <= 64 << 20
    blocks = stats["q8_0"]["kv_blocks"] / stats["fp16"]["kv_blocks"]
    assert blocks == pytest.approx(64 / 34, rel=0.01), stats
    plans = {kv: pagoda_json("plan", path, "--device", "cpu", "--kv-cache-dtype", kv,
                             "--kv-cache-memory", "64MiB", "--json")
             for kv in ("fp16", "int8")}
    ratio = plans["fp16"]["kv_bytes_per_token"] / plans["int8"]["kv_bytes_per_token"]
    assert ratio == pytest.approx(64 / 34, rel=1e-3)


def test_a_head_size_the_q8_cache_cannot_take_is_refused(text):
    stories = os.path.join(SHARED, "models", "stories260K.gguf")  # head size 8
    proc = run_pagoda("perplexity", "-m", stories, "-f", text, "--kv-cache-dtype", "q8_0",
                      check=False)
    assert proc.returncode != 0
    assert "multiple of 32" in proc.stderr, proc.stderr


def test_bench_runs_at_depth_on_either_cache():
    # `pagoda bench --depth` (llama-bench -d): each test starts from that much context,
    # so a decode step reads the cache at depth + G/2 on average; the two caches' reads
    # differ by the plan's bytes per token at that depth.
    path = model_path(SMOL)
    depth, gen = 96, 16
    runs = {kv: pagoda_json("bench", "-m", path, "-p", 32, "-n", gen, "--depth", depth, "-r", 1, "-t", 2,
                            "--kv-cache-dtype", kv, "--json")
            for kv in ("auto", "q8_0")}
    assert runs["auto"]["kv_cache"] == "f16" and runs["q8_0"]["kv_cache"] == "q8_0"
    for r in runs.values():
        assert r["depth"] == depth and r["decode_tok_s"] > 0 and r["prefill_tok_s"] > 0
    plans = {kv: pagoda_json("plan", path, "--device", "cpu", "--kv-cache-dtype", kv,
                             "--kv-cache-memory", "64MiB", "--json")["kv_bytes_per_token"]
             for kv in ("fp16", "int8")}
    read = runs["auto"]["decode_bytes_per_token"] - runs["q8_0"]["decode_bytes_per_token"]
    assert read == pytest.approx((depth + gen / 2) * (plans["fp16"] - plans["int8"]), rel=1e-6)
    stories = os.path.join(SHARED, "models", "stories260K.gguf")
    proc = run_pagoda("bench", "-m", stories, "--kv-cache-dtype", "q8_0", "-p", 8, "-n", 8,
                      check=False)
    assert proc.returncode != 0 and "multiple of 32" in proc.stderr, proc.stderr
    proc = run_pagoda("bench", "-m", path, "--depth", 8190, "-p", 8, "-n", 8, check=False)
    assert proc.returncode != 0 and "exceed the model's context" in proc.stderr, proc.stderr
