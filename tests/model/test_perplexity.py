"""`pagoda perplexity` against llama.cpp: the same text, tokens, chunks and scored
positions as llama-perplexity uses (chunks of n_ctx from an empty cache, the first token
replaced by BOS where the vocabulary adds one, the second half of each chunk scored), the
reference computed here in numpy from llama.cpp's logits (llama-cpp-python). Then the KL
divergence from a base model, the same way, and the errors on bad input."""
import os

import pytest

from pagoda_util import SHARED, model_path, pagoda_json, run_pagoda

llama_cpp = pytest.importorskip("llama_cpp")
np = pytest.importorskip("numpy")
from llama_ref import chunk_log_probs, kld  # noqa: E402

TEXT = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("ppl") / "text.txt"
    with open(TEXT, "rb") as f:
        path.write_bytes(f.read(40000))
    return path


def reference(path, text, n_ctx, chunks, base=None):
    """llama-perplexity's procedure over llama.cpp's logits: tokens, -ln p of each scored
    token, and with a base model KL(base || model) and same-top flags per position."""
    m = llama_cpp.Llama(str(path), n_ctx=n_ctx, vocab_only=True, verbose=False)
    with open(text, "rb") as f:
        toks = m.tokenize(f.read(), add_bos=True, special=False)
    add_bos = m.metadata.get("tokenizer.ggml.add_bos_token", "true") == "true"
    bos = m.token_bos()
    m.close()
    first = n_ctx // 2
    batch = []
    for c in range(min(chunks, len(toks) // n_ctx)):
        chunk = list(toks[c * n_ctx:(c + 1) * n_ctx])
        if add_bos:
            chunk[0] = bos
        batch.append(chunk)
    lm = chunk_log_probs(path, batch, first)
    nxt = np.concatenate([toks[c * n_ctx + first + 1:(c + 1) * n_ctx] for c in range(len(batch))])
    nll = -lm[np.arange(len(nxt)), nxt]
    if not base:
        return len(toks), nll, np.array([]), np.array([])
    lb = chunk_log_probs(base, batch, first)
    return len(toks), nll, kld(lb, lm), lb.argmax(axis=1) == lm.argmax(axis=1)


@pytest.mark.parametrize("rel,n_ctx,chunks,rtol", [
    # F32 weights, a vocabulary that adds BOS (each chunk's first token replaced)
    (STORIES, 64, 20, 1e-3),
    # 8-bit weights, no BOS; llama.cpp and Pagoda round the activations differently
    ("models/SmolLM2-135M-Instruct.Q8_0.gguf", 128, 4, 1e-2),
])
def test_perplexity_matches_llama_cpp(text, rel, n_ctx, chunks, rtol):
    path = rel if os.path.isabs(rel) else model_path(rel)
    n_tokens, nll, _, _ = reference(path, text, n_ctx, chunks)
    ours = pagoda_json("perplexity", "-m", path, "-f", text, "-c", n_ctx, "--chunks", chunks,
                       "-t", 2, "--json")
    assert ours["tokens"] == n_tokens
    assert ours["chunks"] == chunks
    assert ours["scored"] == len(nll) == chunks * (n_ctx - 1 - n_ctx // 2)
    ppl = float(np.exp(nll.mean()))
    assert ours["ppl"] == pytest.approx(ppl, rel=rtol), (ours["ppl"], ppl)
    # The error bar: the standard error of the mean -ln p, scaled by the perplexity.
    err = float(nll.std() / np.sqrt(len(nll) - 1)) * ppl
    assert ours["ppl_error"] == pytest.approx(err, rel=0.05), (ours["ppl_error"], err)


def test_kl_divergence_matches_llama_cpp(text, tmp_path):
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    q = tmp_path / "q4_k_m.gguf"
    run_pagoda("quantize", f16, q, "Q4_K_M")
    n_ctx, chunks = 128, 3
    _, nll, kld, same = reference(q, text, n_ctx, chunks, base=f16)
    _, base_nll, _, _ = reference(f16, text, n_ctx, chunks)
    ours = pagoda_json("perplexity", "-m", q, "-f", text, "-c", n_ctx, "--chunks", chunks,
                       "--kl-base", f16, "-t", 2, "--json")
    assert ours["ppl"] == pytest.approx(float(np.exp(nll.mean())), rel=1e-2)
    assert ours["base_ppl"] == pytest.approx(float(np.exp(base_nll.mean())), rel=1e-2)
    # A 4-bit file's divergence is far above the two engines' rounding differences.
    assert kld.mean() > 0.01
    assert ours["kld"]["mean"] == pytest.approx(float(kld.mean()), rel=0.05)
    assert ours["kld"]["max"] == pytest.approx(float(kld.max()), rel=0.2)
    assert ours["kld"]["median"] == pytest.approx(float(np.median(kld)), rel=0.1)
    assert abs(ours["same_top"] - float(same.mean())) <= 0.03


def test_the_model_against_itself_diverges_by_nothing(text):
    path = model_path("models/SmolLM2-135M-Instruct.Q8_0.gguf")
    ours = pagoda_json("perplexity", "-m", path, "-f", text, "-c", 64, "--chunks", 2,
                       "--kl-base", path, "-t", 2, "--json")
    assert ours["ppl"] == ours["base_ppl"]
    assert ours["kld"]["max"] < 1e-9
    assert ours["same_top"] == 1.0


def test_bad_input_gets_a_clear_error(text, tmp_path):
    smol = model_path("models/SmolLM2-135M-Instruct.Q8_0.gguf")
    short = tmp_path / "short.txt"
    short.write_text("Too short to make two chunks of 512 tokens.")
    cases = [
        (["-m", smol, "-f", short], "needs at least 1024"),
        (["-m", smol, "-f", tmp_path / "missing.txt"], "cannot read"),
        (["-m", smol, "-f", text, "--kl-base", STORIES], "vocabulary"),
        (["-m", STORIES, "-f", text, "-c", 1024], "context of 512"),
        (["-m", smol, "-f", text, "--kv-cache-dtype", "fp8"], "fp8"),
        (["-f", text], "missing -m"),
    ]
    for args, words in cases:
        proc = run_pagoda("perplexity", *args, check=False)
        assert proc.returncode != 0, args
        assert "error" in proc.stderr and words in proc.stderr, (args, proc.stderr)
