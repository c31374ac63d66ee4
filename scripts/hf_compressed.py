#!/usr/bin/env python3
"""Writes compressed-tensors checkpoints of a Hugging Face folder, one per scheme, with
the compressed-tensors package's own scheme objects, qparam maths (calculate_qparams over
min-max of each channel/group, no calibration data) and ModelCompressor (which packs the
weights and writes config.json's quantization_config), as llm-compressor would.

  hf_compressed.py SRC_FOLDER OUT_DIR [SCHEME ...]

Schemes: w8a8_int8 (int-quantized, per-channel), w8a8_int8_tensor (per-tensor),
w4a16 (pack-quantized, symmetric, group 64: SmolLM2-135M's 576 columns are not
whole groups of 128, which the package refuses), w4a16_asym (zero points, group 64),
w4a16_channel (per-channel), fp8 (float-quantized E4M3, per-channel, dynamic tokens),
fp8_tensor (per-tensor weight and static input scale). lm_head is in the ignore list.
"""
import shutil
import sys
from pathlib import Path

import torch
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    QuantizationStatus,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils.helpers import calculate_qparams
from transformers import AutoModelForCausalLM


def args(**kw):
    return QuantizationArgs(**kw)


SCHEMES = {
    "w8a8_int8": dict(
        weights=args(num_bits=8, type="int", symmetric=True, strategy="channel"),
        input_activations=args(
            num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True
        ),
    ),
    "w8a8_int8_tensor": dict(
        weights=args(num_bits=8, type="int", symmetric=True, strategy="tensor"),
        input_activations=args(
            num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True
        ),
    ),
    "w4a16": dict(
        weights=args(num_bits=4, type="int", symmetric=True, strategy="group", group_size=64)
    ),
    "w4a16_asym": dict(
        weights=args(num_bits=4, type="int", symmetric=False, strategy="group", group_size=64)
    ),
    "w4a16_channel": dict(
        weights=args(num_bits=4, type="int", symmetric=True, strategy="channel")
    ),
    "fp8": dict(
        weights=args(num_bits=8, type="float", symmetric=True, strategy="channel"),
        input_activations=args(
            num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True
        ),
    ),
    "fp8_tensor": dict(
        weights=args(num_bits=8, type="float", symmetric=True, strategy="tensor"),
        input_activations=args(num_bits=8, type="float", symmetric=True, strategy="tensor"),
    ),
}


def minmax(w, a):
    """Min and max of w over each quantization group of args a, shaped as the scale."""
    if a.strategy == "tensor":
        return w.min().reshape(1), w.max().reshape(1)
    if a.strategy == "channel":
        return w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
    g = a.group_size
    rows, cols = w.shape
    n = (cols + g - 1) // g
    mins = torch.stack([w[:, i * g : (i + 1) * g].amin(dim=1) for i in range(n)], dim=1)
    maxs = torch.stack([w[:, i * g : (i + 1) * g].amax(dim=1) for i in range(n)], dim=1)
    return mins, maxs


def make(src, out, name):
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    scheme = QuantizationScheme(targets=["Linear"], **SCHEMES[name])
    config = QuantizationConfig(
        config_groups={"group_0": scheme},
        ignore=["lm_head"],
        quantization_status=QuantizationStatus.INITIALIZED,
    )
    apply_quantization_config(model, config)
    for mod in model.modules():
        s = getattr(mod, "quantization_scheme", None)
        if s is None:
            continue
        w = mod.weight.data.float()
        lo, hi = minmax(w, s.weights)
        scale, zp = calculate_qparams(lo, hi, s.weights)
        mod.weight_scale.data.copy_(scale.reshape(mod.weight_scale.shape))
        if hasattr(mod, "weight_zero_point"):
            mod.weight_zero_point.data.copy_(zp.reshape(mod.weight_zero_point.shape))
        if hasattr(mod, "input_scale"):  # static activations: a fixed made-up range
            mod.input_scale.data.fill_(8.0 / 448.0)
        mod.quantization_status = QuantizationStatus.FROZEN
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    compressor.update_config(out)
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors") and f.is_file():
            shutil.copy(f, out / f.name)


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    for name in sys.argv[3:] or SCHEMES:
        make(src, out / name, name)
        print(out / name)


if __name__ == "__main__":
    main()
