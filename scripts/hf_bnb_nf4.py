#!/usr/bin/env python3
"""Writes bitsandbytes 4-bit checkpoints of a Hugging Face folder the way a user makes one:
transformers loads it with BitsAndBytesConfig (bitsandbytes' own CPU quantize_4bit packs the
weights) and save_pretrained writes the folder, quantization_config included.

  hf_bnb_nf4.py SRC_FOLDER OUT_DIR [SCHEME ...]

Schemes: nf4 (blocksize 64, f32 absmax), nf4_dq (double quantization: uint8 absmax codes
under a nested f32 absmax per 256), fp4 (for the refusal test), nf4_skip (o_proj left
16-bit by llm_int8_skip_modules). The non-quantized tensors
(embeddings, norms) stay float16 as in the source; compute dtype bfloat16.
"""
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

SCHEMES = {
    "nf4": dict(bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=False),
    "nf4_dq": dict(bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True),
    "fp4": dict(bnb_4bit_quant_type="fp4", bnb_4bit_use_double_quant=False),
    # transformers matches these as suffixes: every o_proj stays float16.
    "nf4_skip": dict(bnb_4bit_quant_type="nf4", llm_int8_skip_modules=["o_proj", "lm_head"]),
}


def make(src, out, name):
    cfg = BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16, **SCHEMES[name]
    )
    model = AutoModelForCausalLM.from_pretrained(
        src, quantization_config=cfg, dtype=torch.float16
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors") and f.is_file():
            if not (out / f.name).exists():
                shutil.copy(f, out / f.name)


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    for name in sys.argv[3:] or SCHEMES:
        make(src, out / name, name)
        print(out / name)


if __name__ == "__main__":
    main()
