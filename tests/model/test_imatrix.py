"""`pagoda imatrix` and `pagoda quantize --imatrix`.

The file is read back with gguf-py (llama.cpp's format: <name>.in_sum2 / <name>.counts),
and its first layer's sums are recomputed here in numpy from the model's own tensors
(layer 0's q/k/v input is the RMS-normed embedding: no attention needed), over the tokens
and chunks llama.cpp's tokenizer gives. Then what it is for: quantized with it, a model
stays closer to the F16 model on held-out text, as llama.cpp itself measures the files."""
import os

import pytest

from pagoda_util import SHARED, model_path, run_pagoda

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from llama_ref import chunk_log_probs, kld  # noqa: E402

TEXT = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
NAMES = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    d = tmp_path_factory.mktemp("imatrix")
    with open(TEXT, "rb") as f:
        data = f.read()
    calib, held = d / "calib.txt", d / "held.txt"
    calib.write_bytes(data[:60000])
    held.write_bytes(data[-40000:])  # text the importance matrix never saw
    return calib, held


def tensors(path):
    return {t.name: np.array(t.data, dtype=np.float64).reshape(-1)
            for t in gguf.GGUFReader(str(path)).tensors}


def test_sums_are_the_inputs_squared(texts, tmp_path):
    calib, _ = texts
    n_ctx, chunks = 64, 3
    out = tmp_path / "stories.imatrix.gguf"
    run_pagoda("imatrix", "-m", STORIES, "-f", calib, "-o", out, "-c", n_ctx, "--chunks", chunks,
               "-t", 2)
    r = gguf.GGUFReader(str(out))
    field = r.fields["general.type"]
    assert bytes(field.parts[field.data[0]]).decode() == "imatrix"
    for key, want in (("imatrix.chunk_count", chunks), ("imatrix.chunk_size", n_ctx)):
        assert int(r.fields[key].parts[r.fields[key].data[0]][0]) == want
    got = tensors(out)
    model = tensors(STORIES)
    n_layers = sum(1 for n in model if n.endswith("attn_norm.weight"))
    assert len(got) == 2 * len(NAMES) * n_layers
    for layer in range(n_layers):
        for name in NAMES:
            key = f"blk.{layer}.{name}.weight"
            cols = model[key].size // {  # rows of the matrix: its output width
                "attn_q": 64, "attn_k": 32, "attn_v": 32, "attn_output": 64,
                "ffn_gate": 172, "ffn_up": 172, "ffn_down": 64}[name]
            assert got[key + ".in_sum2"].shape == (cols,), key
            assert got[key + ".counts"].tolist() == [chunks * n_ctx], key
            assert (got[key + ".in_sum2"] > 0).all(), key
        # q, k and v take one input, as do gate and up.
        p = f"blk.{layer}."
        assert np.array_equal(got[p + "attn_q.weight.in_sum2"], got[p + "attn_v.weight.in_sum2"])
        assert np.array_equal(got[p + "ffn_gate.weight.in_sum2"], got[p + "ffn_up.weight.in_sum2"])

    # Layer 0's q/k/v input: rms_norm(embedding) * attn_norm, over llama.cpp's tokens, each
    # chunk's first token BOS (this vocabulary adds one).
    m = llama_cpp.Llama(STORIES, n_ctx=n_ctx, verbose=False)
    toks = m.tokenize(calib.read_bytes(), add_bos=True, special=False)
    bos = m.token_bos()
    m.close()
    ids = []
    for c in range(chunks):
        chunk = list(toks[c * n_ctx:(c + 1) * n_ctx])
        chunk[0] = bos
        ids += chunk
    emb = model["token_embd.weight"].reshape(-1, 64)[ids]
    xn = emb / np.sqrt((emb ** 2).mean(axis=1, keepdims=True) + 1e-5) * model["blk.0.attn_norm.weight"]
    want = (xn ** 2).sum(axis=0)
    np.testing.assert_allclose(got["blk.0.attn_q.weight.in_sum2"], want, rtol=1e-4)


def llama_log_probs(path, tokens, n_ctx):
    chunks = [tokens[c * n_ctx:(c + 1) * n_ctx] for c in range(len(tokens) // n_ctx)]
    return chunk_log_probs(path, chunks, n_ctx // 2)


@pytest.mark.parametrize("mix", ["Q4_0", "Q3_K_M"])
def test_an_importance_matrix_brings_the_quantized_model_closer(texts, tmp_path, mix):
    """llama.cpp evaluates the files: KL divergence from the F16 model on held-out text."""
    calib, held = texts
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    im = tmp_path / "smol.imatrix.gguf"
    run_pagoda("imatrix", "-m", f16, "-f", calib, "-o", im, "-c", 256, "--chunks", 8, "-t", 2)
    plain, weighted = tmp_path / "plain.gguf", tmp_path / "weighted.gguf"
    run_pagoda("quantize", f16, plain, mix, "-t", 2)
    run_pagoda("quantize", f16, weighted, mix, "--imatrix", im, "-t", 2)
    r = gguf.GGUFReader(str(weighted))
    assert "quantize.imatrix.file" in r.fields
    m = llama_cpp.Llama(str(f16), n_ctx=256, verbose=False)
    tokens = m.tokenize(held.read_bytes(), add_bos=False, special=False)[:3 * 256]
    m.close()
    base = llama_log_probs(f16, tokens, 256)

    def divergence(path):
        return float(kld(base, llama_log_probs(path, tokens, 256)).mean())
    k_plain, k_weighted = divergence(plain), divergence(weighted)
    # Measured here 0.59x (Q4_0) and 0.67x (Q3_K_M). Of that, the weighted search alone (a
    # flat importance matrix) gave 0.91x and 0.85x over 12 chunks of 512 (bench/RESULTS.md).
    assert k_weighted < 0.8 * k_plain, (k_weighted, k_plain)


def test_bad_importance_matrices_are_refused(texts, tmp_path):
    calib, _ = texts
    smol = model_path("models/SmolLM2-135M-Instruct.Q8_0.gguf")
    im = tmp_path / "stories.imatrix.gguf"
    run_pagoda("imatrix", "-m", STORIES, "-f", calib, "-o", im, "-c", 64, "--chunks", 2, "-t", 2)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(im.read_bytes()[:1000])
    out = tmp_path / "out.gguf"
    cases = [
        (["quantize", smol, out, "Q4_0", "--imatrix", im], "another model"),
        (["quantize", smol, out, "Q4_0", "--imatrix", smol], "not an importance matrix"),
        (["quantize", smol, out, "Q4_0", "--imatrix", truncated], "importance matrix"),
        (["quantize", smol, out, "CUDA", "--imatrix", im], "--imatrix"),
        (["imatrix", "-m", smol, "-f", tmp_path / "missing.txt"], "cannot read"),
    ]
    for args, words in cases:
        proc = run_pagoda(*args, check=False)
        assert proc.returncode != 0, args
        assert "error" in proc.stderr and words in proc.stderr, (args, proc.stderr)
        assert not out.exists(), args  # nothing half-written
