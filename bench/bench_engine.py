#!/usr/bin/env python3
"""The batching engine's benchmarks (issue 3), on SmolLM2 Q4_1 with 2 threads by default.

  .venv/bin/python bench/bench_engine.py [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
      [--threads 2] [--requests 256] [--sequential 32]

1. Offline throughput: N requests (prompts of 128..512 tokens cut from tinyshakespeare,
   128 output tokens each, greedy, EOS ignored). Output tokens/s of `pagoda generate`
   with continuous batching, against the same engine one request at a time
   (--max-num-seqs 1) and llama.cpp (llama-cpp-python's low-level API: one prompt
   decode, then 128 single-token decodes with greedy picks) one request at a time. The
   one-at-a-time runs take the first --sequential requests of the same list (their
   rate does not depend on how many run); their greedy outputs must equal the batched
   run's for the same requests.
2. Shared prefix: 64 requests that share a 1,000-token system prompt (each then adds
   16..64 tokens of its own, 16 output tokens): prompt tokens computed and mean time to
   first token, prefix caching on against off.
3. KV waste in run 1: reserved but unfilled token slots over reserved slots, averaged
   over steps.
"""
import argparse, ctypes, json, os, random, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGODA = os.path.join(ROOT, "build", "pagoda")
CORPUS = os.path.join(ROOT, "..", "shared", "testdata", "text", "tinyshakespeare.txt")


_QUIET = None  # the log callback must outlive every llama.cpp call


def corpus_tokens(model):
    global _QUIET
    import llama_cpp as L
    _QUIET = L.llama_log_callback(lambda level, text, user_data: None)
    L.llama_log_set(_QUIET, ctypes.c_void_p(0))
    llm = L.Llama(model_path=model, vocab_only=True, verbose=False)
    text = open(CORPUS, encoding="utf-8").read()[:400_000]
    return llm.tokenize(text.encode(), add_bos=False, special=False)


def write_jsonl(path, reqs):
    with open(path, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")


def pagoda_generate(model, reqs, threads, extra):
    with tempfile.TemporaryDirectory() as d:
        inp, out, st = (os.path.join(d, n) for n in ("in.jsonl", "out.jsonl", "stats.json"))
        write_jsonl(inp, reqs)
        cmd = [PAGODA, "generate", "-m", model, "--input", inp, "--output", out, "--stats-json", st,
               "--threads", str(threads), "--quiet"] + extra
        subprocess.run(cmd, check=True)
        outs = [json.loads(l) for l in open(out)]
        return outs, json.load(open(st))


class LlamaCppSequential:
    """llama.cpp through llama-cpp-python's Llama object: one prompt evaluation, then
    greedy single-token decodes (temp 0 = argmax), no stop at EOS. (Its raw llama_batch
    bindings crash in llama_decode in 0.3.36, so the high-level generator is used.)"""

    def __init__(self, path, threads, n_ctx):
        from llama_cpp import Llama
        self.llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_threads=threads,
                         n_threads_batch=threads, verbose=False)

    def generate(self, prompt, n):
        out = []
        for t in self.llm.generate(prompt, temp=0.0, top_k=1, reset=True):
            out.append(int(t))
            if len(out) == n:
                break
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--sequential", type=int, default=32)
    ap.add_argument("--out-tokens", type=int, default=128)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    model = os.path.join(ROOT, args.model)
    rng = random.Random(7)
    toks = corpus_tokens(model)

    def window(n):
        s = rng.randrange(0, len(toks) - n)
        return toks[s:s + n]

    reqs = [{"id": i, "prompt": window(rng.randint(128, 512)), "max_tokens": args.out_tokens,
             "temperature": 0, "ignore_eos": True} for i in range(args.requests)]
    res = {"model": args.model, "threads": args.threads, "requests": args.requests}

    # 1. Throughput.
    outs, st = pagoda_generate(model, reqs, args.threads,
                               ["--max-num-seqs", "256", "--kv-cache-memory", "4GiB"])
    res["batched_out_tok_s"] = st["output_tokens_per_s"]
    res["batched_elapsed_s"] = st["elapsed_s"]
    res["kv_waste"] = st["kv_waste"]
    res["preemptions"] = st["preemptions"]
    print(f"batched: {st['generation_tokens']} tokens in {st['elapsed_s']:.1f} s = "
          f"{st['output_tokens_per_s']:.1f} tok/s; KV waste {100 * st['kv_waste']:.2f}%", file=sys.stderr)
    sub = reqs[:args.sequential]
    souts, sst = pagoda_generate(model, sub, args.threads, ["--max-num-seqs", "1", "--kv-cache-memory", "256MiB"])
    res["sequential_out_tok_s"] = sst["output_tokens_per_s"]
    print(f"pagoda one at a time: {sst['output_tokens_per_s']:.1f} tok/s", file=sys.stderr)
    same = sum(a["token_ids"] == b["token_ids"] for a, b in zip(outs, souts))
    res["batched_equals_sequential"] = f"{same}/{len(sub)}"
    peer = LlamaCppSequential(model, args.threads, 1024)
    t = time.perf_counter()
    n_out = 0
    agree = 0
    for r, o in zip(sub, outs):
        g = peer.generate(r["prompt"], r["max_tokens"])
        n_out += len(g)
        agree += g == o["token_ids"]
    el = time.perf_counter() - t
    res["llamacpp_sequential_out_tok_s"] = n_out / el
    res["llamacpp_greedy_identical"] = f"{agree}/{len(sub)}"
    print(f"llama.cpp one at a time: {n_out / el:.1f} tok/s", file=sys.stderr)

    # 2. Shared prefix.
    system = window(1000)
    preqs = [{"id": i, "prompt": system + window(rng.randint(16, 64)), "max_tokens": 16,
              "temperature": 0, "ignore_eos": True} for i in range(64)]
    for on in (True, False):
        flag = "--enable-prefix-caching" if on else "--no-enable-prefix-caching"
        _, pst = pagoda_generate(model, preqs, args.threads,
                                 [flag, "--max-num-seqs", "64", "--kv-cache-memory", "2GiB"])
        key = "on" if on else "off"
        res[f"prefix_{key}_prompt_tokens_computed"] = pst["prompt_tokens_computed"]
        res[f"prefix_{key}_mean_ttft_s"] = pst["mean_ttft_s"]
        res[f"prefix_{key}_elapsed_s"] = pst["elapsed_s"]
        res[f"prefix_{key}_hits"] = pst["prefix_cache_hits"]
        print(f"prefix caching {key}: {pst['prompt_tokens_computed']} prompt tokens computed, "
              f"mean TTFT {pst['mean_ttft_s']:.3f} s", file=sys.stderr)

    res["ratio_batched_vs_sequential"] = res["batched_out_tok_s"] / res["sequential_out_tok_s"]
    res["ratio_batched_vs_llamacpp"] = res["batched_out_tok_s"] / res["llamacpp_sequential_out_tok_s"]
    res["ratio_prefill_off_over_on"] = (res["prefix_off_prompt_tokens_computed"]
                                        / max(1, res["prefix_on_prompt_tokens_computed"]))
    res["ratio_ttft_off_over_on"] = res["prefix_off_mean_ttft_s"] / max(1e-9, res["prefix_on_mean_ttft_s"])
    print(json.dumps(res, indent=2))
    if args.json:
        json.dump(res, open(args.json, "w"), indent=2)


if __name__ == "__main__":
    main()
