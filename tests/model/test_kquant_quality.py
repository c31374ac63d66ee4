"""`pagoda quantize` to the K types (Q2_K .. Q6_K) against llama.cpp's quantizer, by how
much each loses, measured with independent tools: gguf-py dequantizes both files'
tensors, and llama.cpp (llama-cpp-python) runs both files for the logits.

The K quantizers are Pagoda's own search (src/backend/cpu/quant_kquants.cpp), so their
bits differ from llama.cpp's; what is held is that they lose no more:

- SmolLM2 (a real model) in llama.cpp's Q3_K_S, Q4_K_S, Q5_K_S and Q6_K mixes. Pagoda
  writes each tensor in the type llama.cpp's file has it in (`--tensor-type` per tensor),
  so the two files differ only in the quantizers. Only ffn_down's 1,536-wide rows are
  whole 256-blocks; the rest fall back to 32-element types whose quantizers are
  byte-identical to llama.cpp's (test_quantize_vs_llamacpp.py).
  - Weight error: the squared error of the dequantized K-type tensors against F16, summed
    and normalised, at most llama.cpp's (measured 0.47-0.92x of it).
  - Model error: the KL divergence of the next-token distribution from F16's over 768
    tokens of tinyshakespeare (3 windows of 256), at most 1.05x llama.cpp's (measured
    0.92-0.97x; 0.92-0.96x over 1,536 tokens; the margin is for the noise of one small
    model).
- Q2_K and Q3_K on a random Llama 512 wide (`pagoda mkmodel`), where llama.cpp's Q2_K
  and Q3_K_S files hold whole matrices of those types: weight error at most llama.cpp's.
"""
import ctypes
import os

import pytest

from pagoda_util import SHARED, model_path, pagoda_json, run_pagoda
from test_cpu_weight_types import llama_logits

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from gguf.quants import dequantize  # noqa: E402

FTYPES = {"Q2_K": 10, "Q3_K_S": 11, "Q4_K_S": 14, "Q5_K_S": 16, "Q6_K": 18}  # llama.h
K_TYPES = {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


def llama_quantize(src, out, ftype):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.nthread = 2
    params.allow_requantize = True
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(),
                                          ctypes.byref(params)) == 0
    return out


def tensors(path):
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors}


def matrix_types(path):
    return {name: t.tensor_type.name for name, t in tensors(path).items()
            if len(t.shape) >= 2 and name.endswith(".weight")}


def ours_like(src, theirs, out):
    """Pagoda's quantization of src with every matrix in the type `theirs` holds it in."""
    types = matrix_types(theirs)
    spec = ",".join(f"{name}={t}" for name, t in types.items())
    run_pagoda("quantize", src, out, "Q8_0", "--tensor-type", spec)
    assert matrix_types(out) == types
    return out


def weight_errors(src, a_path, b_path, every=1):
    """{K type: (error of a, error of b)}: squared error against src over that type's
    tensors in the layers (every `every`-th layer: gguf-py's K dequantizers are slow),
    normalised by their squared norm."""
    f, a, b = tensors(src), tensors(a_path), tensors(b_path)
    sums = {}
    for name, t in a.items():
        kind = t.tensor_type.name
        if kind not in K_TYPES or not name.startswith("blk.") or int(name.split(".")[1]) % every:
            continue
        assert b[name].tensor_type.name == kind
        x = dequantize(np.asarray(f[name].data), f[name].tensor_type).astype(np.float64).ravel()
        ea = ((dequantize(np.asarray(t.data), t.tensor_type).ravel() - x) ** 2).sum()
        eb = ((dequantize(np.asarray(b[name].data), b[name].tensor_type).ravel() - x) ** 2).sum()
        s = sums.setdefault(kind, [0.0, 0.0, 0.0])
        s[0] += ea
        s[1] += eb
        s[2] += (x ** 2).sum()
    return {k: (s[0] / s[2], s[1] / s[2]) for k, s in sums.items()}


def log_probs(path, windows):
    m = llama_cpp.Llama(str(path), n_ctx=512, logits_all=True, verbose=False, n_threads=2)
    out = []
    for w in windows:
        m.reset()
        m.eval(w)
        z = np.array(m.scores[:len(w)], dtype=np.float64)
        z -= z.max(axis=1, keepdims=True)
        out.append(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))
    return np.concatenate(out)


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    d = tmp_path_factory.mktemp("kquant_quality")
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    text = open(os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt"), encoding="utf-8").read()
    vocab = llama_cpp.Llama(str(f16), vocab_only=True, verbose=False)
    windows = [vocab.tokenize(text[o:o + 2000].encode())[:256] for o in (0, 500_000, 900_000)]
    assert all(len(w) == 256 for w in windows)
    ref = log_probs(f16, windows)
    return {"dir": d, "f16": f16, "windows": windows, "ref": ref}


def kld(ref, other):
    return float((np.exp(ref) * (ref - other)).sum(axis=1).mean())


@pytest.mark.parametrize("ftype", ["Q3_K_S", "Q4_K_S", "Q5_K_S", "Q6_K"])
def test_smollm2_loses_no_more_than_llama_cpp(smol, ftype):
    d = smol["dir"]
    theirs = llama_quantize(smol["f16"], d / f"theirs_{ftype}.gguf", ftype)
    ours = ours_like(smol["f16"], theirs, d / f"ours_{ftype}.gguf")
    errors = weight_errors(smol["f16"], ours, theirs, every=3)
    assert errors, "no K-type tensor: nothing compared"
    for kind, (e_ours, e_theirs) in errors.items():
        assert e_theirs > 0
        assert e_ours <= e_theirs, (kind, e_ours, e_theirs)
    k_ours = kld(smol["ref"], log_probs(ours, smol["windows"]))
    k_theirs = kld(smol["ref"], log_probs(theirs, smol["windows"]))
    assert k_theirs > 1e-3, "the quantization barely changed the model: nothing measured"
    assert k_ours <= 1.05 * k_theirs, (ftype, k_ours, k_theirs)


@pytest.fixture(scope="module")
def rnd(tmp_path_factory):
    """A random Llama 512 wide with an FFN of 1536: whole 256-blocks throughout. The
    embedding std makes logits spread like a trained model's."""
    path = tmp_path_factory.mktemp("kquant_random") / "random512.gguf"
    run_pagoda("mkmodel", "--vocab", model_path("models/SmolLM2-135M-Instruct.F16.gguf"),
               "--dim", 512, "--layers", 2, "--heads", 8, "--kv-heads", 4, "--ffn", 1536,
               "--type", "F16", "--embd-std", 0.5, "-o", path)
    return path


@pytest.mark.parametrize("ftype,kind", [("Q2_K", "Q2_K"), ("Q3_K_S", "Q3_K")])
def test_random_model_weights_lose_no_more_than_llama_cpp(rnd, tmp_path, ftype, kind):
    theirs = llama_quantize(rnd, tmp_path / "theirs.gguf", ftype)
    assert sum(t == kind for t in matrix_types(theirs).values()) >= 8
    ours = ours_like(rnd, theirs, tmp_path / "ours.gguf")
    errors = weight_errors(rnd, ours, theirs)
    assert kind in errors
    for k, (e_ours, e_theirs) in errors.items():
        assert e_ours <= e_theirs, (k, e_ours, e_theirs)


def nmse(a, b):
    return float(((a - b) ** 2).sum() / (b ** 2).sum())


def test_every_k_type_written_runs_alike_in_both_engines(rnd, tmp_path):
    """Each K type as the file's one type: llama.cpp reads Pagoda's file (an independent
    check of the bit layout) and its logits agree with Pagoda's CPU backend on the same
    file within 2% of what quantizing cost (as test_cpu_weight_types.py holds llama.cpp's
    own files)."""
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 2030, 2634, 28, 2821, 253]
    ref = llama_logits(rnd, tokens)
    for kind in sorted(K_TYPES):
        out = tmp_path / f"{kind}.gguf"
        run_pagoda("quantize", rnd, out, kind)
        assert kind in set(matrix_types(out).values()), kind
        theirs = llama_logits(out, tokens)
        got = pagoda_json("logits", "-m", out, "--tokens", " ".join(map(str, tokens)), "--all",
                          "--top", ref.shape[1], "--json", "--threads", "2")
        ours = np.zeros_like(ref)
        for i, p in enumerate(got["logits"]):
            ours[i, p["ids"]] = p["values"]
        cost = nmse(theirs, ref)
        assert cost > 1e-5, (kind, "the file barely differs from F16: nothing measured")
        assert nmse(ours, theirs) <= 0.02 * cost, (kind, nmse(ours, theirs) / cost)
