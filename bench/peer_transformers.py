#!/usr/bin/env python3
"""Hugging Face transformers' generate() on random weights in Llama-3.1-8B's shapes (the
issue 6 peer), decode rate at a given batch: prompt of --input random tokens, greedy,
exactly --output new tokens. The prefill (a generate() of one token) is timed apart and
taken off, so the figure is decode tokens per second as `pagoda bench` reports it.

    python3 bench/peer_transformers.py --batch 1 128 --input 512 --output 128
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--input", type=int, default=512)
    ap.add_argument("--output", type=int, default=128)
    ap.add_argument("--deadline", type=float, default=1e9, help="seconds; skip batches after it")
    a = ap.parse_args()
    t_start = time.time()
    cfg = LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                      rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": 8192},
                      initializer_range=0.02, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    print(f"model ready in {time.time() - t_start:.1f} s "
          f"({sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters)", flush=True)
    for b in a.batch:
        if time.time() - t_start > a.deadline:
            print(json.dumps({"batch": b, "skipped": "deadline"}))
            continue
        ids = torch.randint(1000, 120000, (b, a.input), device="cuda")
        mask = torch.ones_like(ids)

        def gen(n):
            torch.cuda.synchronize()
            t0 = time.time()
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
            torch.cuda.synchronize()
            assert out.shape[1] == a.input + n
            return time.time() - t0

        with torch.no_grad():
            gen(2)  # warm-up
            t_prefill = gen(1)
            t_all = gen(a.output)
        decode = b * (a.output - 1) / max(1e-9, t_all - t_prefill)
        print(json.dumps({"batch": b, "input": a.input, "output": a.output,
                          "prefill_s": round(t_prefill, 3), "total_s": round(t_all, 3),
                          "decode_tok_s": round(decode, 1),
                          "end_to_end_tok_s": round(b * a.output / t_all, 1)}), flush=True)


if __name__ == "__main__":
    main()
