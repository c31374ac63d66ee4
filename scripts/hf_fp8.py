#!/usr/bin/env python3
"""Writes `quant_method: fp8` checkpoints of a Hugging Face folder, laid out as
transformers' FineGrainedFP8Config and vLLM's Fp8Config read them, with torch's own
float8_e4m3fn cast (transformers quantizes on the fly only on a GPU, so the folders are
made here the way its Fp8Quantize and vLLM's per-tensor checkpoints store them).

  hf_fp8.py SRC_FOLDER OUT_DIR [SCHEME ...]

Every Linear in model.layers becomes an F8_E4M3 `weight` with, per tile of the weight,
scale = amax / 448 and q = (w / scale) cast to e4m3 (round to nearest even, as torch does):
  block128       weight_block_size [128, 128], F32 weight_scale_inv [ceil(out/128),
                 ceil(in/128)] (576 and 192 are not multiples of 128: partial tiles)
  block64        [64, 64] blocks, which divide every SmolLM2 matrix (transformers' own
                 dequantization needs that)
  tensor         per tensor, dynamic activations, in transformers' names: a scalar
                 weight_scale_inv and weight_block_size null
  tensor_static  per tensor, activation_scheme static, in vLLM's names: F32 weight_scale [1]
                 and input_scale [1] (a stand-in for a calibrated range: Pagoda does not
                 use it)
  block_skip     block128 with modules_to_not_convert ["o_proj", "model.layers.1.mlp",
                 "model.layers.2.self_attn.q_proj"] (a suffix, a prefix, an exact name):
                 those Linear layers stay in the source dtype (layer 2's q beside FP8 k, v)
The other tensors (embeddings, norms) keep the source dtype.
"""
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

FP8_MAX = 448.0
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

SCHEMES = {
    "block128": dict(block=(128, 128)),
    "block64": dict(block=(64, 64)),
    "block48": dict(block=(48, 48)),
    "tensor": dict(hf_names=True),
    "tensor_static": dict(static=True),
    "block_skip": dict(block=(128, 128),
                       skip=["o_proj", "model.layers.1.mlp", "model.layers.2.self_attn.q_proj"]),
}


def quantize_blocks(w, bn, bk):
    """(fp8 weight, f32 scales [ceil(rows/bn), ceil(cols/bk)]) with one scale per tile."""
    rows, cols = w.shape
    gr, gc = -(-rows // bn), -(-cols // bk)
    padded = torch.zeros(gr * bn, gc * bk, dtype=torch.float32)
    padded[:rows, :cols] = w.float()
    tiles = padded.reshape(gr, bn, gc, bk)
    scale = (tiles.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    q = (tiles / scale[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.reshape(gr * bn, gc * bk)[:rows, :cols].to(torch.float8_e4m3fn)
    return q.contiguous(), scale.contiguous()


def should_skip(module, patterns):
    return any(module.endswith(p) or module.startswith(p + ".") or module == p
               for p in patterns)


def make(src, sd, out, name, cache):
    """One scheme's folder; `cache` keeps each matrix's quantization for the next scheme
    with the same tiles."""
    opts = SCHEMES[name]
    static = opts.get("static", False)
    hf_names = opts.get("hf_names", False)
    result = {}
    for key, t in sd.items():
        module = key[: -len(".weight")]
        if not (key.endswith(".weight") and module.split(".")[-1] in LINEARS
                and not should_skip(module, opts.get("skip", []))):
            result[key] = t
            continue
        tile = opts.get("block", tuple(t.shape))
        if (key, tile) not in cache:
            cache[(key, tile)] = quantize_blocks(t, *tile)
        q, s = cache[(key, tile)]
        result[key] = q
        if "block" in opts:
            result[module + ".weight_scale_inv"] = s
        elif hf_names:
            result[module + ".weight_scale_inv"] = s.reshape(())
        else:
            result[module + ".weight_scale"] = s.reshape(1) if static else s.reshape(())
        if static:
            # A stand-in for a calibrated activation range (Pagoda checks it, then does not
            # use it): |x| up to 8 x the layer's largest weight, over 448.
            a = torch.tensor(8 * t.float().abs().max().item() / FP8_MAX, dtype=torch.float32)
            result[module + (".activation_scale" if hf_names else ".input_scale")] = (
                a.reshape(()) if hf_names else a.reshape(1))
    out.mkdir(parents=True, exist_ok=True)
    save_file(result, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    qc = {"quant_method": "fp8", "activation_scheme": "static" if static else "dynamic"}
    if "block" in opts:
        qc["weight_block_size"] = list(opts["block"])
        qc["fmt"] = "e4m3"  # as DeepSeek-V3 and Qwen3-FP8 write it
    elif opts.get("hf_names"):
        qc["weight_block_size"] = None  # transformers' default would be [128, 128]
    if "skip" in opts:
        qc["modules_to_not_convert"] = opts["skip"]
    cfg["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src.iterdir():
        if f.is_file() and f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    sd = load_file(src / "model.safetensors")
    cache = {}
    for name in sys.argv[3:] or SCHEMES:
        make(src, sd, out / name, name, cache)
        print(out / name)


if __name__ == "__main__":
    main()
