"""llama.cpp's own K-quant files on Pagoda's CPU backend: block types its kernels take
(Q2_K and Q3_K are the newest) and ones the loader converts to Q8_0 (Q5_0, Q5_1;
model/weight_types.h), checked against independent references:

- SmolLM2 (a real model) in llama.cpp's Q3_K_M and Q4_K_M: its 576-wide rows make
  llama.cpp fall back to Q4_0 / Q5_0 / Q5_1. Logits at every prompt position must agree
  with llama.cpp's on the same file as closely as the Q8_0 fixture tests require (1.5x
  llama.cpp's own noise band on SmolLM2 Q8_0).
- A random Llama 512 wide (`pagoda mkmodel`, F16), where llama.cpp's Q2_K, Q3_K_S and
  Q5_1 files hold whole Q2_K / Q3_K / Q5_1 matrices (SmolLM2's 576 columns hold none). Random logits have no meaningful
  top-1, so the measure is the normalised squared difference from llama.cpp on the same
  file, as a share of what quantizing cost (llama.cpp on the file against the F16 one).
- `pagoda quantize IN OUT CPU` writes what the loader stores; gguf-py reads its types and
  values, and the memory ledger's CPU plan must count exactly its bytes.
"""
import ctypes

import pytest

from pagoda_util import model_path, pagoda_json, run_pagoda
from test_llamacpp_fixtures import check_position, read_fixture, tolerance

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")
from gguf.quants import dequantize  # noqa: E402

FTYPES = {"Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q4_K_M": 15}  # llama.cpp's
FILE_TYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q4_K": 14, "Q5_K": 16, "Q6_K": 18}
KERNELS = {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}


def cpu_storage(t):
    """The rule as model/weight_types.h states it, written again here."""
    return t if t in KERNELS else "Q8_0"


def quantize(src, out, name):
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[name]
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(),
                                          ctypes.byref(params)) == 0
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cpu_kquant")
    f16 = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    out = {"f16": f16}
    for name in ("Q3_K_M", "Q4_K_M"):
        out[name] = quantize(f16, d / f"smollm2_{name}.gguf", name)
    # 512 wide and an FFN of 1536: whole 256-blocks, so llama.cpp keeps its K types. The
    # embedding std makes logits spread like a trained model's (std ~11).
    rnd = d / "random512.gguf"
    run_pagoda("mkmodel", "--vocab", f16, "--dim", 512, "--layers", 4, "--heads", 8,
               "--kv-heads", 4, "--ffn", 1536, "--type", "F16", "--embd-std", 0.5, "-o", rnd)
    out["rnd"] = rnd
    for name in ("Q2_K", "Q3_K_S", "Q5_1"):
        out["rnd_" + name] = quantize(rnd, d / f"random512_{name}.gguf", name)
    out["dir"] = d
    return out


def matrix_types(path):
    return {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors if len(t.shape) >= 2}


def test_the_files_hold_the_types_under_test(files):
    assert {"Q5_0", "Q5_1"} <= matrix_types(files["Q3_K_M"])
    assert "Q5_0" in matrix_types(files["Q4_K_M"])
    assert {"Q2_K", "Q3_K"} <= matrix_types(files["rnd_Q2_K"])
    assert "Q3_K" in matrix_types(files["rnd_Q3_K_S"])
    assert "Q5_1" in matrix_types(files["rnd_Q5_1"])


def llama_logits(path, tokens):
    m = llama_cpp.Llama(str(path), n_ctx=256, logits_all=True, verbose=False, n_threads=2)
    m.eval(tokens)
    out = np.array(m.scores[:len(tokens)], dtype=np.float64)
    m.close()
    return out


def llama_tokens(path, text):
    m = llama_cpp.Llama(str(path), n_ctx=64, vocab_only=True, verbose=False)
    toks = m.tokenize(text.encode(), add_bos=False)
    m.close()
    return toks


def our_logits(path, tokens, top):
    return pagoda_json("logits", "-m", path, "--tokens", " ".join(map(str, tokens)), "--all",
                       "--top", top, "--json", "--threads", "2")


PROMPTS = [
    "The capital of France is a city of",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Once upon a time, in a small village nestled between two mountains, there lived",
]


@pytest.mark.parametrize("name", ["Q3_K_M", "Q4_K_M"])
def test_smollm2_logits_agree_with_llama_cpp(files, name):
    """As the fixture tests check Pagoda's native types: llama.cpp's top 20 within the
    tolerance of ours at every position, and the same top-1 wherever llama.cpp's margin
    exceeds it."""
    tol = tolerance(read_fixture("SmolLM2-Q8_0"))
    path = files[name]
    for text in PROMPTS:
        tokens = llama_tokens(path, text)
        theirs = llama_logits(path, tokens)
        ours = our_logits(path, tokens, 40)
        assert ours["tokens"] == tokens
        for pos, row in enumerate(theirs):
            ids = np.argsort(-row)[:20]
            ref = {"ids": [int(i) for i in ids], "values": [float(row[i]) for i in ids]}
            check_position(ours["logits"][pos], ref, tol, f"{name} {text[:20]!r} position {pos}")


def dense(ours, n_vocab):
    out = np.zeros((len(ours["logits"]), n_vocab))
    for i, p in enumerate(ours["logits"]):
        out[i, p["ids"]] = p["values"]
    return out


def nmse(a, b):
    return float(((a - b) ** 2).sum(-1).mean() / (b ** 2).sum(-1).mean())


# Share of the quantization cost our difference from llama.cpp may reach. Native Q2_K and
# Q3_K leave only the engines' rounding differences; requantizing Q5_1 to Q8_0 adds about
# (new step / old step)^2 = (31/254)^2 of the file's own error (measured: 0.000004 for
# Q2_K, 0.0005 for Q3_K_S, 0.07 for Q5_1).
BOUNDS = {"Q3_K_S": 0.02, "Q2_K": 0.02, "Q5_1": 0.25}


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_random_llama_logits_agree_with_llama_cpp(files, name):
    tokens = [1, 504, 3458, 282, 4649, 314, 253, 2030, 2634, 28, 2821, 253, 1345, 10990, 30, 198]
    f16 = llama_logits(files["rnd"], tokens)
    theirs = llama_logits(files["rnd_" + name], tokens)
    ours = dense(our_logits(files["rnd_" + name], tokens, f16.shape[1]), f16.shape[1])
    cost = nmse(theirs, f16)
    assert cost > 1e-4, "the file barely differs from F16: nothing measured"
    assert nmse(ours, theirs) <= BOUNDS[name] * cost, (name, nmse(ours, theirs) / cost)


def check_converted(src_path, out_path):
    """Types by the rule above; values exact where the format promises, bounded elsewhere."""
    src = {t.name: t for t in gguf.GGUFReader(str(src_path)).tensors}
    out = {t.name: t for t in gguf.GGUFReader(str(out_path)).tensors}
    assert set(src) == set(out)
    kinds = set()
    for name, t in src.items():
        u = out[name]
        want = cpu_storage(t.tensor_type.name) if len(t.shape) >= 2 else t.tensor_type.name
        assert u.tensor_type.name == want, name
        if u.tensor_type == t.tensor_type:
            assert np.array_equal(np.asarray(u.data).view(np.uint8),
                                  np.asarray(t.data).view(np.uint8)), name
            continue
        kind = (t.tensor_type.name, u.tensor_type.name)
        kinds.add(kind)
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        b = dequantize(u.data, u.tensor_type).astype(np.float64)
        if kind == ("Q5_0", "Q8_0"):
            assert np.array_equal(a, b), name
            continue
        a, b = a.reshape(-1, 32), b.reshape(-1, 32)
        err, amax = np.abs(a - b).max(axis=1), np.abs(a).max(axis=1)
        # Q8_0: half a step (amax / 254) plus the fp16 rounding of the step.
        assert (err <= (1 / 254 + 1 / 2048) * amax + 1e-7).all(), (name, kind, (err / amax).max())
    return kinds


def test_quantize_for_the_cpu_writes_what_the_loader_stores(files):
    d = files["dir"]
    kinds = set()
    for name in ("Q3_K_M", "rnd_Q5_1"):
        out = d / f"{name}.cpu.gguf"
        run_pagoda("quantize", files[name], out, "CPU")
        kinds |= check_converted(files[name], out)
        # Labelled "mostly X" by llama.cpp's numbering, X the type most weights are in now.
        r = gguf.GGUFReader(str(out))
        elements = {}
        for t in r.tensors:
            if len(t.shape) >= 2:
                elements[t.tensor_type.name] = elements.get(t.tensor_type.name, 0) + int(t.n_elements)
        field = r.fields["general.file_type"]
        assert int(field.parts[field.data[0]][0]) == FILE_TYPES[max(elements, key=elements.get)]
        # The loader converts exactly as quantize did: the same logits either way.
        tokens = [1, 504, 3458, 282, 4649, 314]
        assert our_logits(out, tokens, 20) == our_logits(files[name], tokens, 20), name
    assert {("Q5_0", "Q8_0"), ("Q5_1", "Q8_0")} <= kinds


def test_cpu_plan_counts_the_bytes_the_loader_holds(files):
    d = files["dir"]
    for name in ("Q4_K_M", "rnd_Q5_1"):
        out = d / f"{name}.plan.gguf"
        run_pagoda("quantize", files[name], out, "CPU")
        held = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(out)).tensors)
        file_bytes = sum(int(t.n_bytes) for t in gguf.GGUFReader(str(files[name])).tensors)
        plan = pagoda_json("plan", files[name], "--json", "--device", "cpu", "--device-memory",
                           "4GiB")
        assert plan["weight_bytes"] == held > file_bytes
        assert any("CPU backend converts at load" in n for n in plan["notes"]), plan["notes"]
        again = pagoda_json("plan", out, "--json", "--device", "cpu", "--device-memory", "4GiB")
        assert again["weight_bytes"] == held
        assert not any("converts at load" in n for n in again["notes"])
    # Nothing to convert: the file's bytes.
    q2 = pagoda_json("plan", files["rnd_Q2_K"], "--json", "--device", "cpu", "--device-memory",
                     "4GiB")
    assert q2["weight_bytes"] == sum(int(t.n_bytes)
                                     for t in gguf.GGUFReader(str(files["rnd_Q2_K"])).tensors)


def test_the_load_log_names_the_conversions(files):
    proc = run_pagoda("run", "-m", files["Q3_K_M"], "-p", "Once", "-n", 1, "-t", 2,
                      env_extra={"PAGODA_LOG": "info"})
    line = [x for x in proc.stderr.splitlines() if "converted for the CPU backend" in x]
    assert line, proc.stderr
    counts = {}
    for t in gguf.GGUFReader(str(files["Q3_K_M"])).tensors:
        if len(t.shape) >= 2 and cpu_storage(t.tensor_type.name) != t.tensor_type.name:
            k = f"{t.tensor_type.name}->{cpu_storage(t.tensor_type.name)}"
            counts[k] = counts.get(k, 0) + 1
    for k, n in counts.items():
        assert f"{k} x {n}" in line[0], (k, n, line[0])
