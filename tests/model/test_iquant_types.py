"""The 4-bit non-linear GGUF types (IQ4_NL, IQ4_XS, MXFP4) on the CPU backend, against
independent references:

- Dequantization: a GGUF whose matrices are random valid blocks of each type, written
  with gguf-py; `pagoda quantize ... F32` dequantizes every matrix with Pagoda's
  reference (dequantize_row) and the result must equal gguf-py's `dequantize` exactly.
  `pagoda quantize ... CUDA` converts them as the CUDA loader does (to Q8_0): exact for
  IQ4_NL and MXFP4, IQ4_XS within 2^-11 of each value (its per-32 step rounded to f16).
- SmolLM2 quantized by llama.cpp to IQ4_NL and IQ4_XS (its 576-wide rows make llama.cpp
  fall back to IQ4_NL for IQ4_XS matrices it cannot split in 256s): logits at every
  prompt position agree with llama.cpp's on the same file, as the fixture tests require.
- MXFP4, which llama.cpp's quantizer writes only for MoE experts: a random Llama whose
  matrices gguf-py quantized to MXFP4, logits against llama.cpp on the same file as a
  share of what the quantization cost (as test_cpu_weight_types does for Q2_K..Q5_1).
- GGUF files holding a grid i-quant are refused with the type's name.
"""
import ctypes

import pytest

from pagoda_util import model_path, run_pagoda
from test_cpu_weight_types import (agrees_with_llama_cpp, dense, llama_logits, llama_tokens,
                                   matrix_types, nmse, our_logits)

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

Q = gguf.GGMLQuantizationType
FTYPES = {"IQ4_NL": 25, "IQ4_XS": 30}  # llama.h's LLAMA_FTYPE_MOSTLY_*
TYPES = (Q.IQ4_NL, Q.IQ4_XS, Q.MXFP4)


def copy_gguf(src, dst, tensor):
    """Writes src to dst with every tensor replaced by tensor(reader_tensor) -> (array,
    raw_dtype or None)."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(str(dst), arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vtype, sub)
    for t in r.tensors:
        data, raw = tensor(t)
        if raw is None:
            w.add_tensor(t.name, data)
        else:
            w.add_tensor(t.name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dst


def f32_of(t):
    """A reader tensor's values as f32, [rows][cols]."""
    if t.tensor_type in (Q.F32, Q.F16):
        return np.asarray(t.data, dtype=np.float32).reshape(-1, int(t.shape[0]))
    return gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)


def random_blocks(rng, qtype, rows, cols):
    """Random bytes for rows x cols of qtype, with scales a trained model could hold
    (f16 d in 1e-4..2e-2 of either sign; an MXFP4 exponent of 2^-12..2^-4)."""
    elems, size = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(rows * cols // elems, size), dtype=np.uint8)
    if qtype == Q.MXFP4:
        blocks[:, 0] = rng.integers(116, 129, size=blocks.shape[0])
    else:
        d = (rng.uniform(1e-4, 2e-2, blocks.shape[0]) * rng.choice([-1, 1], blocks.shape[0]))
        blocks[:, 0:2] = d.astype(np.float16).view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


def is_matrix(t):
    return len(t.shape) == 2 and t.name != "token_embd.weight"


@pytest.fixture(scope="module")
def rnd(tmp_path_factory):
    """A random Llama 512 wide (whole 256-blocks everywhere) in F16."""
    d = tmp_path_factory.mktemp("iquant")
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    out = d / "random512.gguf"
    run_pagoda("mkmodel", "--vocab", f16, "--dim", 512, "--layers", 2, "--heads", 8,
               "--kv-heads", 4, "--ffn", 1536, "--type", "F16", "--embd-std", 0.5, "-o", out)
    return {"dir": d, "f16": out}


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_dequantization_matches_gguf_py(rnd, qtype):
    rng = np.random.default_rng(int(qtype))
    src = rnd["dir"] / f"random_bits_{qtype.name}.gguf"

    def replace(t):
        if not is_matrix(t):
            return np.asarray(t.data), None
        cols, rows = int(t.shape[0]), int(t.shape[1])
        return random_blocks(rng, qtype, rows, cols), qtype

    copy_gguf(rnd["f16"], src, replace)
    want = {t.name: t for t in gguf.GGUFReader(str(src)).tensors if is_matrix(t)}
    assert {t.tensor_type for t in want.values()} == {qtype}

    f32 = rnd["dir"] / f"random_bits_{qtype.name}.f32.gguf"
    run_pagoda("quantize", src, f32, "F32")
    got = {t.name: t for t in gguf.GGUFReader(str(f32)).tensors}
    for name, t in want.items():
        assert got[name].tensor_type == Q.F32, name
        np.testing.assert_array_equal(f32_of(got[name]), f32_of(t), err_msg=name)

    # As the CUDA loader stores them: Q8_0.
    cuda = rnd["dir"] / f"random_bits_{qtype.name}.cuda.gguf"
    run_pagoda("quantize", src, cuda, "CUDA")
    got = {t.name: t for t in gguf.GGUFReader(str(cuda)).tensors}
    for name, t in want.items():
        assert got[name].tensor_type == Q.Q8_0, name
        a, b = f32_of(t), f32_of(got[name])
        if qtype == Q.IQ4_XS:
            assert np.all(np.abs(a - b) <= np.abs(a) * 2.0 ** -11), name
        else:
            np.testing.assert_array_equal(b, a, err_msg=name)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    d = tmp_path_factory.mktemp("iquant_smollm2")
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    out = {}
    for name, ftype in FTYPES.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.nthread = 2
        path = d / f"smollm2_{name}.gguf"
        assert llama_cpp.llama_model_quantize(str(f16).encode(), str(path).encode(),
                                              ctypes.byref(params)) == 0
        out[name] = path
    return out


PROMPTS = [
    "The capital of France is a city of",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
]


@pytest.mark.parametrize("name", list(FTYPES))
def test_smollm2_logits_agree_with_llama_cpp(smollm2, name):
    """llama.cpp's top 20 within the Q8_0 fixture tolerance of ours at every position, and
    the same top-1 wherever llama.cpp's margin exceeds it."""
    path = smollm2[name]
    assert name in matrix_types(path)
    agrees_with_llama_cpp(path, name, PROMPTS)


def test_mxfp4_logits_agree_with_llama_cpp(rnd):
    """gguf-py's MXFP4 quantizer on the random Llama's matrices; both engines multiply the
    file's values, so what differs is rounding, bounded at 0.02 of the quantization cost."""
    path = rnd["dir"] / "random512_MXFP4.gguf"

    def replace(t):
        if not is_matrix(t):
            return np.asarray(t.data), None
        return gguf.quants.quantize(f32_of(t), Q.MXFP4), Q.MXFP4

    copy_gguf(rnd["f16"], path, replace)
    assert "MXFP4" in matrix_types(path)
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 2030, 2634, 28, 2821, 253, 1345, 10990, 30, 198]
    f16 = llama_logits(rnd["f16"], tokens)
    theirs = llama_logits(path, tokens)
    ours = dense(our_logits(path, tokens, f16.shape[1]), f16.shape[1])
    cost = nmse(theirs, f16)
    assert cost > 1e-4, "the file barely differs from F16: nothing measured"
    assert nmse(ours, theirs) <= 0.02 * cost, nmse(ours, theirs) / cost


@pytest.mark.parametrize("qtype", [Q.IQ2_XXS, Q.IQ3_S, Q.IQ1_M], ids=lambda q: q.name)
def test_grid_iquants_are_refused_by_name(rnd, qtype):
    path = rnd["dir"] / f"grid_{qtype.name}.gguf"
    elems, size = gguf.GGML_QUANT_SIZES[qtype]

    def replace(t):
        if not is_matrix(t):
            return np.asarray(t.data), None
        cols, rows = int(t.shape[0]), int(t.shape[1])
        return np.zeros((rows, cols // elems * size), dtype=np.uint8), qtype

    copy_gguf(rnd["f16"], path, replace)
    proc = run_pagoda("run", "-m", path, "-p", "Once", "-n", 1, "-t", 2, check=False)
    assert proc.returncode != 0
    assert f"{qtype.name} weights are not supported yet" in proc.stderr, proc.stderr
