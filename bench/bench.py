#!/usr/bin/env python3
"""Pagoda against llama.cpp on the same models, prompt length, generation length and
thread count, interleaved round by round in one run, reported as ratios.

  .venv/bin/python bench/bench.py [--models Q4_1,Q8_0,F16] [--threads 2] [--rounds 5]
  .venv/bin/python bench/bench.py --models Q4_K_M,Q3_K_M   # llama.cpp's own quantizations
  .venv/bin/python bench/bench.py --models Q8_0 --depth 2048 --kv-cache-dtype q8_0
  .venv/bin/python bench/bench.py --baseline ../old/build/pagoda   # before/after a change

Each round runs `pagoda bench` (one warm-up and one timed pass of each test) and the
same tests on llama.cpp through llama-cpp-python's low-level API (llama_decode on a
batch; no sampling, no per-token Python work beyond the call), with flash attention
both on ("auto", llama.cpp's default) and off; llama.cpp is credited with the faster of
the two. Tests as llama-bench defines them: pp = one prompt of P tokens into an empty
context; tg = G single-token decode steps from an empty context; with --depth D both
start from D tokens of context, evaluated untimed (llama-bench -d). --kv-cache-dtype
q8_0 gives both an 8-bit KV cache (llama.cpp's type_k = type_v = Q8_0, which needs its
flash attention, so only "auto" runs). Medians over rounds.
llama-cpp-python is installed into .venv on first use (it builds llama.cpp: minutes).
"""
import argparse, ctypes, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGODA = os.path.join(ROOT, "build", "pagoda")
MODELS = {
    "Q4_1": "models/SmolLM2-135M-Instruct.Q4_1.gguf",
    "Q8_0": "models/SmolLM2-135M-Instruct.Q8_0.gguf",
    "F16": "models/SmolLM2-135M-Instruct.F16.gguf",
}
LLAMA_CPP_VERSION = "0.3.36"
# Other names are llama.cpp quantizations of the F16 file, made by its own quantizer into
# a temporary folder (ftype numbers from llama.h). SmolLM2's 576-wide rows make llama.cpp
# fall back to Q4_0/Q5_0/Q5_1/Q8_0 for most matrices of its K mixes.
LLAMA_FTYPES = {"Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q4_K_M": 15,
                "Q5_K_M": 17, "Q6_K": 18}


def model_file(name, tmp):
    if name in MODELS or name not in LLAMA_FTYPES:
        return os.path.join(ROOT, MODELS.get(name, name))
    import llama_cpp as L
    out = os.path.join(tmp, f"SmolLM2-135M-Instruct.{name}.gguf")
    params = L.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPES[name]
    params.nthread = 2
    src = os.path.join(ROOT, MODELS["F16"])
    if L.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(params)) != 0:
        sys.exit(f"llama.cpp could not quantize {src} to {name}")
    return out


def ensure_llama_cpp():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print(f"installing llama-cpp-python=={LLAMA_CPP_VERSION} (builds llama.cpp)...", file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q",
                               f"llama-cpp-python=={LLAMA_CPP_VERSION}"])


_quiet = None


def silence_llama_cpp(L):
    global _quiet
    if _quiet is None:
        _quiet = L.llama_log_callback(lambda level, text, user_data: None)
        L.llama_log_set(_quiet, ctypes.c_void_p(0))


class LlamaCpp:
    def __init__(self, path, threads, n_ctx, flash, kv_q8=False):
        import llama_cpp as L
        self.L = L
        silence_llama_cpp(L)
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        self.model = L.llama_model_load_from_file(path.encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = 512
        cp.n_ubatch = 512
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.flash_attn_type = -1 if flash else 0
        cp.no_perf = True
        if kv_q8:
            cp.type_k = cp.type_v = 8  # GGML_TYPE_Q8_0
        self.ctx = L.llama_init_from_model(self.model, cp)
        self.batch = L.llama_batch_init(512, 0, 1)
        self.n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model))

    def clear(self):
        self.L.llama_memory_clear(self.L.llama_get_memory(self.ctx), True)

    def decode(self, tokens, pos0):
        b = self.batch
        for start in range(0, len(tokens), 512):
            chunk = tokens[start:start + 512]
            b.n_tokens = len(chunk)
            for i, t in enumerate(chunk):
                b.token[i] = t
                b.pos[i] = pos0 + start + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1 if i == len(chunk) - 1 else 0
            if self.L.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")

    def fill(self, context):
        self.clear()
        if context:
            self.decode(context, 0)
        return len(context)

    def pp(self, tokens, context=()):
        d = self.fill(context)
        t = time.perf_counter()
        self.decode(tokens, d)
        return len(tokens) / (time.perf_counter() - t)

    def tg(self, tokens, context=()):
        d = self.fill(context)
        t = time.perf_counter()
        for i, tok in enumerate(tokens):
            self.decode([tok], d + i)
        return len(tokens) / (time.perf_counter() - t)


def pagoda_bench(path, p, g, threads, depth=0, kv="auto", binary=PAGODA):
    out = subprocess.run([binary, "bench", "-m", path, "--prompt-len", str(p), "--gen-len", str(g),
                          "--threads", str(threads), "--repeats", "1", "--depth", str(depth),
                          "--kv-cache-dtype", kv, "--json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="Q4_1,Q8_0,F16",
                    help="names in MODELS, llama.cpp types made from F16 (LLAMA_FTYPES), or paths")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen-len", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depth", type=int, default=0, help="tokens of context before each test")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=["auto", "q8_0"])
    ap.add_argument("--bandwidth-gbs", type=float, default=74.0,
                    help="memory bandwidth for the floor column (measured: ~74 GB/s, 2 threads)")
    ap.add_argument("--baseline", metavar="PAGODA",
                    help="another pagoda binary (an older build) run in the same rounds; its "
                         "figures and new/old ratios are printed too")
    args = ap.parse_args()
    ensure_llama_cpp()
    import random
    import tempfile
    tmp = tempfile.TemporaryDirectory()
    rows, base_rows = [], []
    for name in args.models.split(","):
        path = model_file(name, tmp.name)
        rng = random.Random(1234)
        q8 = args.kv_cache_dtype == "q8_0"
        n_ctx = args.depth + max(args.prompt_len, args.gen_len) + 16
        peers = {fa: LlamaCpp(path, args.threads, n_ctx, fa, q8)
                 for fa in ((True,) if q8 else (True, False))}
        vocab = peers[True].n_vocab
        context = [rng.randrange(vocab) for _ in range(args.depth)]
        prompt = [rng.randrange(vocab) for _ in range(args.prompt_len)]
        gen = [rng.randrange(vocab) for _ in range(args.gen_len)]
        for peer in peers.values():  # warm-up
            peer.pp(prompt), peer.tg(gen[:16])
        ours_pp, ours_tg, theirs = [], [], {fa: ([], []) for fa in peers}
        base_pp, base_tg = [], []
        bytes_per_tok = None
        for r in range(args.rounds):
            res = pagoda_bench(path, args.prompt_len, args.gen_len, args.threads, args.depth,
                               args.kv_cache_dtype)
            ours_pp.append(res["prefill_tok_s"])
            ours_tg.append(res["decode_tok_s"])
            bytes_per_tok = res["decode_bytes_per_token"]
            if args.baseline:
                b = pagoda_bench(path, args.prompt_len, args.gen_len, args.threads, args.depth,
                                 args.kv_cache_dtype, args.baseline)
                base_pp.append(b["prefill_tok_s"])
                base_tg.append(b["decode_tok_s"])
            for fa, peer in peers.items():
                theirs[fa][0].append(peer.pp(prompt, context))
                theirs[fa][1].append(peer.tg(gen, context))
            print(f"  {name} round {r + 1}: pagoda pp {ours_pp[-1]:.1f} tg {ours_tg[-1]:.1f} | "
                  + " | ".join(f"llama.cpp fa={'auto' if fa else 'off'} pp {theirs[fa][0][-1]:.1f} "
                               f"tg {theirs[fa][1][-1]:.1f}" for fa in peers), file=sys.stderr)
        med = statistics.median
        l_pp = max(med(theirs[fa][0]) for fa in peers)
        l_tg = max(med(theirs[fa][1]) for fa in peers)
        floor = args.bandwidth_gbs * 1e9 / bytes_per_tok
        rows.append((name, med(ours_pp), l_pp, med(ours_tg), l_tg, bytes_per_tok, floor))
        if args.baseline:
            base_rows.append((name, med(base_pp), med(ours_pp), med(base_tg), med(ours_tg)))
    print(f"\nthreads {args.threads}, pp{args.prompt_len}, tg{args.gen_len}, depth {args.depth}, "
          f"{args.kv_cache_dtype} KV cache, {args.rounds} rounds (medians); llama-cpp-python "
          f"{LLAMA_CPP_VERSION}, " + ("flash-attn auto" if args.kv_cache_dtype == "q8_0"
                                      else "best of flash-attn auto/off") + "\n")
    print("| model | pagoda pp tok/s | llama.cpp pp tok/s | pp ratio | pagoda tg tok/s | "
          "llama.cpp tg tok/s | tg ratio | MB read/token | tg floor tok/s | pagoda tg % of floor |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, opp, lpp, otg, ltg, bpt, floor in rows:
        print(f"| SmolLM2-135M {name} | {opp:.1f} | {lpp:.1f} | {opp / lpp:.2f}x | {otg:.1f} | {ltg:.1f} | "
              f"{otg / ltg:.2f}x | {bpt / 1e6:.1f} | {floor:.0f} | {100 * otg / floor:.0f}% |")

    if base_rows:
        print(f"\nthis build ({PAGODA}) against the baseline ({args.baseline}), same rounds:\n")
        print("| model | baseline pp tok/s | pp tok/s | pp new/old | baseline tg tok/s | tg tok/s | "
              "tg new/old |")
        print("|---|---|---|---|---|---|---|")
        for name, bpp, opp, btg, otg in base_rows:
            print(f"| SmolLM2-135M {name} | {bpp:.1f} | {opp:.1f} | {opp / bpp:.3f} | {btg:.1f} | "
                  f"{otg:.1f} | {otg / btg:.3f} |")


if __name__ == "__main__":
    main()
