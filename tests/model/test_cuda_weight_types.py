"""Files with types the CUDA backend's kernels do not multiply as they are, made by
llama.cpp's own quantizer: SmolLM2 in LLAMA_FTYPE_MOSTLY_Q4_K_M (rows of 576 are not
whole 256-blocks, so llama.cpp falls back to Q5_0 and Q8_0 for most matrices: Q4_K, Q6_K,
Q5_0 and Q8_0 in one file). The kernels take Q4_K and Q6_K in the file's own bits; Q5_0
is converted to Q8_0 at load. `pagoda quantize IN OUT CUDA` writes what the CUDA loader
stores, through the same conversion; here the result is checked with independent
readers: gguf-py for types and values, llama.cpp for the logits of both files, and the
memory ledger's GPU plan against the bytes gguf-py counts."""
import ctypes

import pytest

from pagoda_util import model_path, pagoda_json, run_pagoda
from test_llamacpp_fixtures import check_position, read_fixture, tolerance

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from gguf.quants import dequantize  # noqa: E402

Q4_K_M = 15  # llama.cpp's ftype number
MULTIPLIED = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"}
# The CUDA README's device layout of the K types, bytes per 256 weights: 16 quant bytes,
# the high bits (Q5_K 4, Q6_K 8) and a 2-byte scale word per 32; d and dmin per 256.
K_DEVICE_BYTES = {"Q4_K": 8 * 18 + 4, "Q5_K": 8 * 22 + 4, "Q6_K": 8 * 26 + 4}
EXACT_TO_Q8_0 = {"Q4_0", "Q5_0", "Q8_1"}  # the values are Q8_0 bytes under the same d


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("kquant")
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    q4km = d / "q4_k_m.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = Q4_K_M
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(f16).encode(), str(q4km).encode(),
                                          ctypes.byref(params)) == 0
    cuda = d / "cuda.gguf"
    run_pagoda("quantize", q4km, cuda, "CUDA")
    return f16, q4km, cuda


def stack_of(name):
    parts = name.split(".")
    if parts[0] == "blk" and parts[2] in ("attn_q", "attn_k", "attn_v"):
        return f"blk.{parts[1]}.qkv"
    if parts[0] == "blk" and parts[2] in ("ffn_gate", "ffn_up"):
        return f"blk.{parts[1]}.gate_up"
    return name


def expected_types(tensors):
    """The rule as the CUDA README states it, written again here."""
    def storage(t):
        return t if t in MULTIPLIED else "Q8_0"
    stacks = {}
    for t in tensors.values():
        if len(t.shape) >= 2:
            stacks.setdefault(stack_of(t.name), []).append(t.tensor_type.name)
    out = {}
    for name, t in tensors.items():
        if len(t.shape) < 2:
            out[name] = t.tensor_type.name
            continue
        kinds = {storage(k) for k in stacks[stack_of(name)]}
        out[name] = kinds.pop() if len(kinds) == 1 else "Q8_0"
    return out


def test_the_file_mixes_types_the_kernels_do_not_take(files):
    _, q4km, _ = files
    types = {t.tensor_type.name for t in gguf.GGUFReader(str(q4km)).tensors if len(t.shape) >= 2}
    assert {"Q4_K", "Q6_K", "Q5_0"} <= types, types


def test_converted_types_and_values(files):
    _, q4km, cuda = files
    src = {t.name: t for t in gguf.GGUFReader(str(q4km)).tensors}
    out = {t.name: t for t in gguf.GGUFReader(str(cuda)).tensors}
    assert set(src) == set(out)
    want = expected_types(src)
    kinds = set()
    for name, t in src.items():
        u = out[name]
        assert u.tensor_type.name == want[name], name
        if u.tensor_type == t.tensor_type:
            assert np.array_equal(np.asarray(u.data).view(np.uint8),
                                  np.asarray(t.data).view(np.uint8)), name
            continue
        a = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1, 32)
        b = dequantize(u.data, u.tensor_type).astype(np.float64).reshape(-1, 32)
        amax = np.abs(a).max(axis=1)
        err = np.abs(a - b).max(axis=1)
        kind = (t.tensor_type.name, u.tensor_type.name)
        kinds.add(kind)
        if t.tensor_type.name in EXACT_TO_Q8_0:
            assert np.array_equal(a, b), name
        else:
            # Requantized to Q8_0: half a step plus the step's fp16 rounding.
            assert (err <= (1 / 254 + 1 / 2048) * amax + 1e-7).all(), (name, (err / amax).max())
    assert ("Q5_0", "Q8_0") in kinds, kinds
    # ffn_down (1536-wide rows) is Q4_K or Q6_K by layer, kept as it is.
    kept = {t.tensor_type.name for n, t in src.items() if want[n] == t.tensor_type.name}
    assert {"Q4_K", "Q6_K"} <= kept, kept
    # Labelled "mostly X" in llama.cpp's numbering, X the type most weights are in now.
    elements = {}
    for u in out.values():
        if len(u.shape) >= 2:
            elements[u.tensor_type.name] = elements.get(u.tensor_type.name, 0) + int(u.n_elements)
    field = gguf.GGUFReader(str(cuda)).fields["general.file_type"]
    file_types = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7}
    assert int(field.parts[field.data[0]][0]) == file_types[max(elements, key=elements.get)]


def test_gpu_plan_counts_the_bytes_the_device_holds(files):
    _, q4km, cuda = files
    def device(t):
        name = t.tensor_type.name
        if name in K_DEVICE_BYTES:
            return int(t.n_elements) // 256 * K_DEVICE_BYTES[name]
        return int(t.n_bytes)
    device_bytes = sum(device(t) for t in gguf.GGUFReader(str(cuda)).tensors)
    file_bytes = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(q4km)).tensors)
    plan = pagoda_json("plan", q4km, "--json", "--device", "cuda", "--device-memory", "4GiB")
    assert plan["weight_bytes"] == device_bytes
    assert plan["weight_bytes"] > file_bytes
    assert any("converts at load" in n for n in plan["notes"]), plan["notes"]
    # Already in the device's types: nothing to restate.
    again = pagoda_json("plan", cuda, "--json", "--device", "cuda", "--device-memory", "4GiB")
    assert again["weight_bytes"] == device_bytes
    assert not any("converts at load" in n for n in again["notes"])
    # The K types' scales, repacked into the device layout: stated.
    assert any("CUDA backend repacks" in n for n in again["notes"]), again["notes"]
    # The CPU multiplies every type the file holds (test_cpu_weight_types.py): the file's
    # bytes, plus the K types' repacked scales (a few percent of those tensors).
    cpu = pagoda_json("plan", q4km, "--json", "--device", "cpu", "--device-memory", "4GiB")
    assert file_bytes < cpu["weight_bytes"] < 1.01 * file_bytes
    assert not any("converts at load" in n for n in cpu["notes"]), cpu["notes"]


PROMPTS = [
    "The capital of France is a city of",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village nestled between two mountains, there lived",
]


def llama_logits(path, text):
    m = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    toks = m.tokenize(text.encode(), add_bos=False)
    m.eval(toks)
    out = np.array(m.scores[:len(toks)], dtype=np.float64)
    m.close()
    return out


def test_conversion_error_is_small_against_the_files_own_quantization(files):
    """llama.cpp evaluates all three files: what converting costs (Q4_K_M file against its
    conversion) must stay well under what quantizing cost (Q4_K_M file against F16)."""
    f16, q4km, cuda = files
    def nmse(a, b):
        return float(((a - b) ** 2).sum(-1).mean() / (b ** 2).sum(-1).mean())
    for text in PROMPTS:
        f, q, c = llama_logits(f16, text), llama_logits(q4km, text), llama_logits(cuda, text)
        assert nmse(c, q) < 0.5 * nmse(q, f), text
        assert (q.argmax(-1) == c.argmax(-1)).mean() >= 0.7, text


def test_pagoda_runs_the_converted_file_as_llama_cpp_does(files):
    """Pagoda's CPU backend on the converted file (the numbers the GPU multiplies) against
    llama.cpp on the same file at the end of each prompt, by the fixture tests' rule:
    llama.cpp's top 20 within the tolerance of ours, the same top-1 wherever llama.cpp's
    margin exceeds it (the K types' 8-bit activations differ in rounding between the two,
    and SmolLM2's first prompt ends in a near tie)."""
    _, _, cuda = files
    tol = tolerance(read_fixture("SmolLM2-Q8_0"))
    for text in PROMPTS:
        ours = pagoda_json("logits", "-m", cuda, "-p", text, "--top", "40", "--json", "-t", "2")
        row = llama_logits(cuda, text)[-1]
        ids = np.argsort(-row)[:20]
        ref = {"ids": [int(i) for i in ids], "values": [float(row[i]) for i in ids]}
        check_position(ours["logits"][-1], ref, tol, f"{text[:20]!r}")
