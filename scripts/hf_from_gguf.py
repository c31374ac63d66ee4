#!/usr/bin/env python3
"""Writes a Hugging Face checkpoint folder from a Llama or Qwen2 GGUF file, without torch.

    hf_from_gguf.py MODEL.gguf OUT_DIR [--dtype keep|f16|bf16|f32] [--shards N]
                    [--rope-scaling JSON] [--no-tokenizer]

What it writes, as transformers' own GGUF loader (modeling_gguf_pytorch_utils) would:
  - config.json (LlamaForCausalLM / Qwen2ForCausalLM) and generation_config.json from the
    GGUF metadata;
  - model.safetensors, or N shards model-0000i-of-0000N.safetensors with
    model.safetensors.index.json, written by the safetensors package's numpy writer
    (BF16, which numpy lacks, is written as U16 and its header relabelled);
  - tensors under Hugging Face names, [out, in] row-major (the GGUF bytes as they are),
    with llama.cpp's Q/K row permutation undone for Llama exactly as transformers'
    _reverse_permute_weights does (GGUF Llama rotates adjacent pairs, HF rotate-half);
  - the tokenizer (tokenizer.json, tokenizer_config.json, ...) by
    AutoTokenizer.from_pretrained(dir, gguf_file=...).save_pretrained, which needs no
    torch; --no-tokenizer skips it.

--dtype keep writes each tensor in its GGUF type (F32 norms stay F32); f16/bf16/f32 cast
all of them, as checkpoints usually are. Block-quantized GGUF types are dequantized first.
llama3 RoPE scaling cannot be read back from a GGUF (llama.cpp keeps only the computed
rope_freqs.weight): pass its rope_scaling dict with --rope-scaling.
"""
import argparse
import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize
from safetensors.numpy import save_file

GLOBAL = {"token_embd.weight": "model.embed_tokens.weight",
          "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}
LAYER = {"attn_norm.weight": "input_layernorm.weight",
         "ffn_norm.weight": "post_attention_layernorm.weight",
         "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
         "attn_v.weight": "self_attn.v_proj.weight",
         "attn_output.weight": "self_attn.o_proj.weight",
         "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
         "attn_v.bias": "self_attn.v_proj.bias",
         "attn_q_norm.weight": "self_attn.q_norm.weight",
         "attn_k_norm.weight": "self_attn.k_norm.weight",
         "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
         "ffn_down.weight": "mlp.down_proj.weight"}
ARCH = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
        "qwen3": ("Qwen3ForCausalLM", "qwen3")}


def field(r, key, default=None):
    f = r.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types and f.types[0].name == "STRING":
        return bytes(v).decode()
    return v.tolist()[0]


def hf_name(gguf_name):
    if gguf_name in GLOBAL:
        return GLOBAL[gguf_name]
    parts = gguf_name.split(".", 2)
    if parts[0] == "blk" and parts[2] in LAYER:
        return f"model.layers.{parts[1]}.{LAYER[parts[2]]}"
    if gguf_name == "rope_freqs.weight":
        return None  # config.json's rope_scaling says it
    raise SystemExit(f"error: no Hugging Face name for GGUF tensor '{gguf_name}'")


def reverse_permute(w, n_head):
    """transformers' _reverse_permute_weights: llama.cpp's Q/K row order back to HF's."""
    dim = w.shape[0] // n_head // 2
    return w.reshape(n_head, dim, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def tensor_array(t):
    """The tensor as numpy, [out, in] (GGUF ne reversed), in its own float type."""
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    if t.tensor_type == GGMLQuantizationType.F32:
        return np.asarray(t.data, dtype=np.float32).reshape(shape), "F32"
    if t.tensor_type == GGMLQuantizationType.F16:
        return np.asarray(t.data, dtype=np.float16).reshape(shape), "F16"
    if t.tensor_type == GGMLQuantizationType.BF16:
        return np.frombuffer(np.asarray(t.data).tobytes(), dtype=np.uint16).reshape(shape), "BF16"
    return dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape), "F32"


def bf16_bits_to_f32(a):
    return (a.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(a):
    """Round to nearest even, as torch's .to(torch.bfloat16)."""
    b = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def cast(a, kind, want):
    """(array, safetensors dtype) in `want` ('keep', 'f16', 'bf16', 'f32')."""
    if want == "keep" or {"f16": "F16", "bf16": "BF16", "f32": "F32"}[want] == kind:
        return a, kind
    f32 = bf16_bits_to_f32(a) if kind == "BF16" else a.astype(np.float32)
    if want == "f32":
        return f32, "F32"
    if want == "f16":
        return f32.astype(np.float16), "F16"
    return f32_to_bf16_bits(f32), "BF16"


def save(tensors, kinds, path):
    """safetensors' numpy writer; BF16 tensors go in as U16 and are relabelled after."""
    save_file(tensors, path, metadata={"format": "pt"})
    if "BF16" not in kinds.values():
        return
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    for name, kind in kinds.items():
        if kind == "BF16":
            header[name]["dtype"] = "BF16"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--dtype", default="keep", choices=["keep", "f16", "bf16", "f32"])
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--rope-scaling", help="config.json rope_scaling as JSON")
    ap.add_argument("--no-tokenizer", action="store_true")
    ap.add_argument("--keep-gguf-qk-order", action="store_true",
                    help="leave llama.cpp's Q/K row order (a wrong checkpoint, for tests)")
    a = ap.parse_args()

    r = GGUFReader(a.gguf)
    arch = field(r, "general.architecture")
    if arch not in ARCH:
        raise SystemExit(f"error: architecture '{arch}' is not one this script writes")
    heads = field(r, f"{arch}.attention.head_count")
    kv_heads = field(r, f"{arch}.attention.head_count_kv", heads)
    dim = field(r, f"{arch}.embedding_length")
    names = {t.name for t in r.tensors}
    embd = next(t for t in r.tensors if t.name == "token_embd.weight")
    if "rope_freqs.weight" in names and not a.rope_scaling:
        raise SystemExit("error: the GGUF has llama3 rope_freqs.weight: pass --rope-scaling")
    hf_arch, model_type = ARCH[arch]
    config = {
        "architectures": [hf_arch], "model_type": model_type,
        "hidden_size": dim,
        "intermediate_size": field(r, f"{arch}.feed_forward_length"),
        "num_hidden_layers": field(r, f"{arch}.block_count"),
        "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": field(r, f"{arch}.attention.key_length", dim // heads),
        # GGUF keeps these in f32: written as the shortest decimal of that f32.
        "rms_norm_eps": float(f"{field(r, f'{arch}.attention.layer_norm_rms_epsilon', 1e-6):.7g}"),
        "rope_theta": float(f"{field(r, f'{arch}.rope.freq_base', 10000.0):.7g}"),
        "max_position_embeddings": field(r, f"{arch}.context_length", 2048),
        "vocab_size": int(embd.shape[1]),
        "tie_word_embeddings": "output.weight" not in names,
        "hidden_act": "silu",
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
    }
    if arch == "llama":
        config.update({"attention_bias": False, "mlp_bias": False})
    else:
        config.update({"use_sliding_window": False, "sliding_window": None})
    if arch == "qwen3":
        config["attention_bias"] = False
    if a.rope_scaling:
        config["rope_scaling"] = json.loads(a.rope_scaling)

    tensors, kinds = {}, {}
    for t in r.tensors:
        name = hf_name(t.name)
        if name is None:
            continue
        arr, kind = tensor_array(t)
        if arch == "llama" and t.name.endswith(("attn_q.weight", "attn_k.weight")) \
                and not a.keep_gguf_qk_order:
            arr = reverse_permute(arr, heads if "attn_q" in t.name else kv_heads)
        arr, kind = cast(arr, kind, a.dtype)
        tensors[name], kinds[name] = np.ascontiguousarray(arr), kind
    dtypes = {k for k in kinds.values()}
    config["torch_dtype"] = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[
        max(dtypes, key=lambda k: sum(tensors[n].nbytes for n in kinds if kinds[n] == k))]

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    gen = {k: config[k] for k in ("bos_token_id", "eos_token_id") if config[k] is not None}
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)

    order = list(tensors)
    if a.shards <= 1:
        save(tensors, kinds, os.path.join(a.out, "model.safetensors"))
    else:
        weight_map, total = {}, 0
        for i in range(a.shards):
            part = order[i::a.shards]
            shard = f"model-{i + 1:05d}-of-{a.shards:05d}.safetensors"
            save({n: tensors[n] for n in part}, {n: kinds[n] for n in part},
                 os.path.join(a.out, shard))
            for n in part:
                weight_map[n] = shard
                total += tensors[n].nbytes
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)

    if not a.no_tokenizer:
        from transformers import AutoTokenizer
        d, base = os.path.split(os.path.abspath(a.gguf))
        AutoTokenizer.from_pretrained(d, gguf_file=base).save_pretrained(a.out)
    print(f"wrote {a.out}: {len(tensors)} tensors ({', '.join(sorted(dtypes))})", file=sys.stderr)


if __name__ == "__main__":
    main()
