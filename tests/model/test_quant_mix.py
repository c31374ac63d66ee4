"""`pagoda quantize IN OUT MIX` for llama.cpp's named mixes (Q2_K, Q3_K_S/M/L, Q4_K_S/M,
Q5_K_S/M, Q6_K): every tensor must come out in the type llama.cpp's own quantizer
(llama_model_quantize through llama-cpp-python) gives it, read back with gguf-py, and the
file must say the same general.file_type. Two models: SmolLM2 (tied embedding, 9 query
heads on 3 KV heads, 576-wide rows that fall back to 32-element types) and a random Llama
512 wide with 8 query heads on 2 KV heads (GQA 4, which changes Q2_K's attn_v) and an
output matrix of its own, 16 layers so that the _M mixes' layer rules show."""
import ctypes
import os

import pytest

from pagoda_util import SHARED, model_path, run_pagoda

llama_cpp = pytest.importorskip("llama_cpp")
gguf = pytest.importorskip("gguf")

FTYPES = {"Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
          "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18}  # llama.h


def types_of(path):
    r = gguf.GGUFReader(str(path))
    field = r.fields["general.file_type"]
    return ({t.name: t.tensor_type.name for t in r.tensors},
            int(field.parts[field.data[0]][0]))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("quant_mix")
    smol = model_path("models/SmolLM2-135M-Instruct.F16.gguf")
    rnd = d / "random512.gguf"  # stories260K's 512-token vocabulary keeps it small
    run_pagoda("mkmodel", "--vocab", os.path.join(SHARED, "models", "stories260K.gguf"), "--dim", 512, "--layers", 16, "--heads", 8,
               "--kv-heads", 2, "--ffn", 1024, "--type", "F16", "-o", rnd)
    return {"smol": smol, "rnd": rnd, "dir": d}


@pytest.mark.parametrize("model", ["smol", "rnd"])
@pytest.mark.parametrize("mix", list(FTYPES))
def test_every_tensor_takes_llama_cpps_type(models, model, mix):
    src = models[model]
    theirs = models["dir"] / f"theirs_{model}_{mix}.gguf"
    ours = models["dir"] / f"ours_{model}_{mix}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[mix]
    params.nthread = 2
    assert llama_cpp.llama_model_quantize(str(src).encode(), str(theirs).encode(),
                                          ctypes.byref(params)) == 0
    run_pagoda("quantize", src, ours, mix)
    (a, fa), (b, fb) = types_of(ours), types_of(theirs)
    assert fa == fb == FTYPES[mix]
    assert set(a) == set(b)
    differ = {n: (a[n], b[n]) for n in a if a[n] != b[n]}
    assert not differ, differ
    # The mix is not trivial: more than one type among the matrices (Q6_K is one type
    # where rows allow).
    if mix != "Q6_K":
        assert len({t for n, t in a.items() if n.endswith(".weight") and "norm" not in n}) >= 2
