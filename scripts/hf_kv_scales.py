#!/usr/bin/env python3
"""Writes a copy of a Hugging Face checkpoint folder with calibrated FP8 KV-cache scales,
computed by transformers (PyTorch on the CPU), as llm-compressor's kv_cache_scheme stores
them: one k_scale and one v_scale a layer (model.layers.N.self_attn.k_scale / v_scale,
float32, amax / 448 over the calibration tokens' keys after RoPE and values), and
config.json's quantization_config gaining

    "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                        "dynamic": false, "symmetric": true}

(a folder without a quantization_config gets a compressed-tensors one with no weight
groups). The reference against which `pagoda quantize ... --kv-cache-scales` is tested.

  hf_kv_scales.py SRC_FOLDER OUT_FOLDER [--calibration TEXT] [--samples N] [--seq-len L]
                  [--scheme-edit JSON]

Calibration as Pagoda's: the text tokenized whole (special tokens added), cut into
--samples chunks of --seq-len tokens, each chunk's first token replaced by BOS where the
tokenizer adds one, and each run from an empty cache. --scheme-edit merges JSON into kv_cache_scheme (for refusal tests).
"""
import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

E4M3_MAX = 448.0


def layer_kv(cache, layer):
    if hasattr(cache, "layers"):  # transformers >= 4.56
        return cache.layers[layer].keys, cache.layers[layer].values
    return cache.key_cache[layer], cache.value_cache[layer]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--calibration", default=str(
        Path(__file__).resolve().parent.parent.parent / "shared/testdata/text/tinyshakespeare.txt"))
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--scheme-edit", default="{}")
    a = ap.parse_args()
    src, out = Path(a.src), Path(a.out)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
    model.eval()
    ids = tok(open(a.calibration, encoding="utf-8").read(), add_special_tokens=True)["input_ids"]
    n_layers = model.config.num_hidden_layers
    k_amax = torch.zeros(n_layers)
    v_amax = torch.zeros(n_layers)
    # As Pagoda (and llama.cpp's perplexity): a chunk starts with BOS only where the
    # tokenizer adds one (SmolLM2's does not).
    bos = tok.bos_token_id if ids and ids[0] == tok.bos_token_id else None
    chunks = min(a.samples, len(ids) // a.seq_len)
    with torch.no_grad():
        for c in range(chunks):
            chunk = list(ids[c * a.seq_len:(c + 1) * a.seq_len])
            if bos is not None:
                chunk[0] = bos
            outp = model(torch.tensor([chunk]), use_cache=True)
            for l in range(n_layers):
                k, v = layer_kv(outp.past_key_values, l)
                k_amax[l] = max(k_amax[l], k.abs().max())
                v_amax[l] = max(v_amax[l], v.abs().max())
    shutil.copytree(src, out)
    tensors = {}
    for f in sorted(out.glob("*.safetensors")):
        if f.name == "model.safetensors":
            tensors = load_file(f)
    if not tensors:
        raise SystemExit("hf_kv_scales.py writes single-file checkpoints only")
    for l in range(n_layers):
        tensors[f"model.layers.{l}.self_attn.k_scale"] = (k_amax[l] / E4M3_MAX).reshape(1).float()
        tensors[f"model.layers.{l}.self_attn.v_scale"] = (v_amax[l] / E4M3_MAX).reshape(1).float()
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    qc = cfg.get("quantization_config") or {
        "quant_method": "compressed-tensors", "format": "dense",
        "quantization_status": "compressed", "config_groups": {}, "ignore": []}
    scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
              "symmetric": True}
    scheme.update(json.loads(a.scheme_edit))
    qc["kv_cache_scheme"] = scheme
    cfg["quantization_config"] = qc
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    print(json.dumps({"chunks": chunks, "k_scale": (k_amax / E4M3_MAX).tolist(),
                      "v_scale": (v_amax / E4M3_MAX).tolist()}))


if __name__ == "__main__":
    main()
