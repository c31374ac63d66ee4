"""`pagoda quantize FOLDER OUT nf4 [--double-quant]` against bitsandbytes itself.

The folders are SmolLM2-135M's 16-bit checkpoint quantized by Pagoda into bitsandbytes' NF4
layout, without and with double quantization. Checked against the library that defines
the format:
  - each matrix's codes and absmax equal bitsandbytes.functional.quantize_4bit's on the
    same weights (blocks of 64; measured: absmax identical, codes identical but for a
    handful of weights exactly between two code values);
  - with --double-quant, for every matrix of four layers: the absmax bytes, nested_absmax,
    nested_quant_map and nested_offset equal quantize_4bit(..., compress_statistics=True)'s,
    but where torch's f32 mean (the offset) rounds its sum differently from Pagoda's exact
    one (test_double_quant_equals_bitsandbytes says how that is checked; measured over all
    210 matrices: 49 offsets 1-2 ulp apart, 24 of 1.66M absmax bytes one step apart); the
    file is smaller;
  - Pagoda's greedy text starts as transformers' does on the folder's weights as
    bitsandbytes' dequantize_4bit decodes them (test_bnb_nf4.dequantized_model);
  - the --double-quant folder loads through transformers' bitsandbytes integration on the
    CPU (with the two float32 adjustments transformers_model names), and Pagoda's logits
    and greedy text agree with that model's within test_bnb_nf4's bounds.
"""
import json
import os

import numpy as np
import pytest
import torch

from pagoda_util import SHARED, compare_logits, greedy_texts, model_path, run_pagoda

import bitsandbytes.functional as bnbf  # noqa: E402  (scripts/setup.sh installs it)

SRC = model_path("models/SmolLM2-135M-Instruct-hf")
DQ_LAYERS = ("0", "7", "15", "29")
MATRICES = ["model.layers.0.self_attn.q_proj.weight", "model.layers.3.self_attn.v_proj.weight",
            "model.layers.7.mlp.down_proj.weight", "model.layers.29.mlp.gate_proj.weight"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("nf4q") / "nf4"
    run_pagoda("quantize", SRC, out, "nf4")
    return str(out)


@pytest.fixture(scope="module")
def folder_dq(tmp_path_factory):
    out = tmp_path_factory.mktemp("nf4q") / "nf4_dq"
    run_pagoda("quantize", SRC, out, "nf4", "--double-quant")
    return str(out)


def quant_state(f, name):
    return json.loads(bytes(f.get_tensor(name + ".quant_state.bitsandbytes__nf4").tolist())
                      .decode())


def test_codes_and_absmax_equal_bitsandbytes(folder):
    from safetensors import safe_open
    qc = json.load(open(f"{folder}/config.json"))["quantization_config"]
    assert qc["quant_method"] == "bitsandbytes" and qc["bnb_4bit_quant_type"] == "nf4"
    with safe_open(f"{SRC}/model.safetensors", "pt") as src, \
            safe_open(f"{folder}/model.safetensors", "pt") as ours:
        for name in MATRICES:
            w = src.get_tensor(name)
            codes, state = bnbf.quantize_4bit(w, blocksize=64, quant_type="nf4")
            mine = ours.get_tensor(name)
            assert mine.shape == codes.shape and mine.dtype == torch.uint8
            same = (mine.flatten() == codes.flatten()).float().mean().item()
            print(f"{name}: {same:.6f} of the bytes equal")
            assert same > 0.9999, name
            torch.testing.assert_close(ours.get_tensor(name + ".absmax"), state.absmax.float(),
                                       rtol=0, atol=0)
            torch.testing.assert_close(ours.get_tensor(name + ".quant_map"), state.code.float())
            qs = quant_state(ours, name)
            assert qs["blocksize"] == 64 and qs["shape"] == list(w.shape)
            assert "nested_offset" not in qs and name + ".nested_absmax" not in ours.keys()


def test_greedy_agrees_with_bitsandbytes_decode(folder):
    from test_bnb_nf4 import dequantized_model
    ours, theirs = greedy_texts(folder, dequantized_model(folder))
    print(f"pagoda {ours!r}, transformers {theirs!r}")
    assert "Paris" in ours
    assert ours.split()[:2] == theirs.split()[:2]


def ulps(a, b):
    return abs(int(np.float32(a).view(np.int32)) - int(np.float32(b).view(np.int32)))


def test_double_quant_equals_bitsandbytes(folder_dq):
    """Every matrix against quantize_4bit(..., compress_statistics=True). The offset is
    torch's f32 mean of the absmax values, whose summation order (vector width, threads)
    rounds differently from Pagoda's exact sum when the sum needs more than f32's 24 bits,
    as these f16 weights' can, and differs between CPUs (torch sums 8 or 16 lanes at a
    time on AVX2 or AVX-512): there the offsets are a few ulp apart, and so may be the
    absmax bytes that sat on a step. Everything after the offset is checked exactly, against
    bitsandbytes' own quantize_blockwise of (absmax - Pagoda's offset)."""
    from safetensors import safe_open
    qc = json.load(open(f"{folder_dq}/config.json"))["quantization_config"]
    assert qc["bnb_4bit_use_double_quant"] is True and qc["bnb_4bit_quant_type"] == "nf4"
    apart, bytes_apart, n_bytes = [], 0, 0
    with safe_open(f"{SRC}/model.safetensors", "pt") as src, \
            safe_open(f"{folder_dq}/model.safetensors", "pt") as ours:
        names = [k[: -len(".nested_absmax")] for k in ours.keys() if k.endswith(".nested_absmax")]
        assert len(names) == 30 * 7
        # Every matrix of four layers (all 210 take bitsandbytes half a minute here).
        names = [n for n in names if n.split(".")[2] in DQ_LAYERS]
        for name in names:
            w = src.get_tensor(name)
            codes, state = bnbf.quantize_4bit(w, blocksize=64, quant_type="nf4",
                                              compress_statistics=True)
            same = (ours.get_tensor(name).flatten() == codes.flatten()).float().mean().item()
            assert same > 0.9999, (name, same)
            qs = quant_state(ours, name)
            assert qs == {"quant_type": "nf4", "blocksize": 64, "dtype": str(w.dtype)[6:],
                          "shape": list(w.shape), "nested_blocksize": 256,
                          "nested_dtype": "float32", "nested_offset": qs["nested_offset"]}
            offset = np.float32(qs["nested_offset"])
            assert float(offset) == qs["nested_offset"]  # the f32 value, exactly
            absmax = ours.get_tensor(name + ".absmax")
            nested = ours.get_tensor(name + ".nested_absmax")
            assert absmax.dtype == torch.uint8 and absmax.shape == state.absmax.shape
            assert torch.equal(ours.get_tensor(name + ".nested_quant_map"), state.state2.code)
            assert torch.equal(ours.get_tensor(name + ".quant_map"), state.code)
            # After the offset: bitsandbytes' own blockwise quantization, to the bit.
            block_max = w.float().reshape(-1, 64).abs().amax(1)
            ref_codes, ref2 = bnbf.quantize_blockwise(block_max - torch.tensor(offset),
                                                      blocksize=256)
            assert torch.equal(absmax, ref_codes), name
            assert torch.equal(nested, ref2.absmax), name
            # End to end.
            n_bytes += absmax.numel()
            if offset == np.float32(state.offset.item()):
                assert torch.equal(absmax, state.absmax), name
                assert torch.equal(nested, state.state2.absmax), name
                continue
            apart.append(ulps(offset, state.offset.item()))
            bytes_apart += (absmax != state.absmax).sum().item()
    print(f"{len(names)} matrices: nested_offset apart from bitsandbytes' in {len(apart)}, by "
          f"{max(apart, default=0)} ulp at most ({bytes_apart} of {n_bytes} absmax bytes "
          f"one step apart); all else equal")
    # Measured over all 210 matrices: 49 offsets apart, by 2 ulp at most; 24 of 1658880
    # bytes one step apart.
    assert max(apart, default=0) <= 4 and bytes_apart <= 1e-4 * n_bytes


def transformers_model(folder):
    """The folder as transformers loads it through bitsandbytes on the CPU (Linear4bit
    layers holding the file's codes and its nested quant state), run in float32: the tied
    embedding / lm_head made float32 (transformers leaves it float16 while its norms hand
    lm_head float32, which this transformers/bitsandbytes pair cannot multiply), and the
    4-bit layers' compute dtype float32 (bitsandbytes' CPU kernel may still round
    activations to bf16 on AVX-512 BF16 hosts)."""
    import bitsandbytes as bnb
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    m.model.embed_tokens.float()
    layers = [mod for mod in m.modules() if isinstance(mod, bnb.nn.Linear4bit)]
    assert len(layers) == 30 * 7
    for mod in layers:
        assert mod.weight.quant_state.nested  # double quantization, as the file says
        mod.compute_dtype = torch.float32
    return m


def test_double_quant_loads_in_transformers(folder_dq):
    from test_bnb_nf4 import KLD_BOUND, LOGIT_BOUND, bnb_weight
    model = transformers_model(folder_dq)
    # transformers' quant state decodes the layer as bitsandbytes does the file's tensors.
    layer = model.model.layers[7].mlp.down_proj
    ref = bnb_weight(folder_dq, "model.layers.7.mlp.down_proj")
    state = layer.weight.quant_state
    state.dtype = torch.float32
    torch.testing.assert_close(bnbf.dequantize_4bit(layer.weight.data, state), ref,
                               rtol=0, atol=0)
    for f in compare_logits(folder_dq, model):
        print(f"nf4 --double-quant against transformers: {f['err']:.3g} of the range, "
              f"KLD {f['kld']:.3g}")
        assert f["err"] < LOGIT_BOUND and f["kld"] < KLD_BOUND
    ours, theirs = greedy_texts(folder_dq, model)
    print(f"pagoda {ours!r}, transformers {theirs!r}")
    assert "Paris" in ours and ours.split()[:2] == theirs.split()[:2]


def test_double_quant_is_smaller(folder, folder_dq):
    plain = os.path.getsize(f"{folder}/model.safetensors")
    dq = os.path.getsize(f"{folder_dq}/model.safetensors")
    print(f"model.safetensors: {plain} bytes, {dq} with --double-quant")
    # 0.373 bits less a weight of the 106M quantized weights: about 4.9 MB.
    assert plain - dq > 4.5e6


def test_refusals(tmp_path):
    proc = run_pagoda("quantize", SRC, tmp_path / "o", "nf4", "--samples", 4, check=False)
    assert proc.returncode != 0 and "--samples" in proc.stderr, proc.stderr
    proc = run_pagoda("quantize", SRC, tmp_path / "o", "fp8", "--double-quant", check=False)
    assert proc.returncode != 0, proc.stderr
    assert "--double-quant applies to nf4, not to fp8" in proc.stderr, proc.stderr
    # A NaN weight has no NF4 code: refused by name, not written as -1 x absmax.
    from safetensors.torch import save_file
    nan = tmp_path / "nan"
    nan.mkdir()
    w = torch.randn(4, 64, dtype=torch.float16)
    w[1, 5] = float("nan")
    save_file({"model.layers.0.self_attn.q_proj.weight": w}, nan / "model.safetensors",
              metadata={"format": "pt"})
    (nan / "config.json").write_text(json.dumps({"torch_dtype": "float16"}))
    for flags in ([], ["--double-quant"]):
        proc = run_pagoda("quantize", nan, tmp_path / "nan_out", "nf4", *flags, check=False)
        assert proc.returncode != 0, proc.stderr
        assert ("'model.layers.0.self_attn.q_proj.weight' holds an infinite or NaN weight"
                in proc.stderr), proc.stderr
        assert not any((tmp_path / "nan_out").iterdir())  # the partial output is removed
    stories = os.path.join(SHARED, "models", "stories260K.gguf")
    proc = run_pagoda("quantize", stories, tmp_path / "o.gguf", "Q8_0", "--double-quant",
                      check=False)
    assert proc.returncode != 0 and "--double-quant" in proc.stderr, proc.stderr
