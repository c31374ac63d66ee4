"""`pagoda quantize` against llama.cpp's own quantizer (llama_model_quantize through
llama-cpp-python) on SmolLM2: for the types whose quantizers are defined bit for bit by
ggml's reference (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1), every tensor both files store in the same
type must be byte-identical. Tensors are read with gguf-py, an independent GGUF reader."""
import ctypes
import os

import pytest

from pagoda_util import model_path, run_pagoda

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")
np = pytest.importorskip("numpy")

# llama.cpp's ftype numbers for "mostly TYPE".
FTYPES = {"F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "BF16": 32}


@pytest.mark.parametrize("target", list(FTYPES))
def test_byte_identical_to_llama_cpp(tmp_path, target):
    src = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    ours = tmp_path / f"ours-{target}.gguf"
    theirs = tmp_path / f"theirs-{target}.gguf"
    run_pagoda("quantize", src, ours, target)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[target]
    params.allow_requantize = True
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(theirs).encode(),
                                          ctypes.byref(params)) == 0
    a = {t.name: t for t in gguf.GGUFReader(str(ours)).tensors}
    b = {t.name: t for t in gguf.GGUFReader(str(theirs)).tensors}
    assert set(a) == set(b)
    compared = 0
    for name, t in a.items():
        u = b[name]
        if t.tensor_type != u.tensor_type:
            continue  # llama.cpp picks other types for some tensors in some ftypes
        assert np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(u.data).view(np.uint8)), name
        compared += 1
    assert compared >= 200, f"only {compared} tensors shared a type"
