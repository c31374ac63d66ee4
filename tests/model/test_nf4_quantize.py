"""`pagoda quantize FOLDER OUT nf4` against bitsandbytes itself.

The folder is SmolLM2-135M's 16-bit checkpoint quantized by Pagoda into bitsandbytes' NF4
layout. Checked against the library that defines the format:
  - each matrix's codes and absmax equal bitsandbytes.functional.quantize_4bit's on the
    same weights (blocks of 64; measured: absmax identical, codes identical but for a
    handful of weights exactly between two code values);
  - Pagoda's greedy text starts as transformers' does on the folder's weights as
    bitsandbytes' dequantize_4bit decodes them (test_bnb_nf4.dequantized_model; loading
    the folder through transformers' bitsandbytes integration on the CPU mixes float32
    activations with float16 weights at lm_head in this transformers/bitsandbytes pair).
"""
import json

import pytest
import torch

from pagoda_util import greedy_texts, model_path, run_pagoda

import bitsandbytes.functional as bnbf  # noqa: E402  (scripts/setup.sh installs it)

SRC = model_path("models/SmolLM2-135M-Instruct-hf")
MATRICES = ["model.layers.0.self_attn.q_proj.weight", "model.layers.3.self_attn.v_proj.weight",
            "model.layers.7.mlp.down_proj.weight", "model.layers.29.mlp.gate_proj.weight"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("nf4q") / "nf4"
    run_pagoda("quantize", SRC, out, "nf4")
    return str(out)


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
            qs = json.loads(bytes(ours.get_tensor(name + ".quant_state.bitsandbytes__nf4")
                                  .tolist()).decode())
            assert qs["blocksize"] == 64 and qs["shape"] == list(w.shape)


def test_greedy_agrees_with_bitsandbytes_decode(folder):
    from test_bnb_nf4 import dequantized_model
    ours, theirs = greedy_texts(folder, dequantized_model(folder))
    print(f"pagoda {ours!r}, transformers {theirs!r}")
    assert "Paris" in ours
    assert ours.split()[:2] == theirs.split()[:2]


def test_refusals(tmp_path):
    proc = run_pagoda("quantize", SRC, tmp_path / "o", "nf4", "--samples", 4, check=False)
    assert proc.returncode != 0 and "--samples" in proc.stderr, proc.stderr
