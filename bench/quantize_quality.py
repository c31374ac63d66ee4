#!/usr/bin/env python3
"""`pagoda quantize` against llama.cpp's quantizer (llama-cpp-python's
llama_model_quantize, no importance matrix) on the same F16 file, mix by mix, in one run:
wall time of each quantizer and what each file loses, the mean KL divergence of the
next-token distribution from the F16 model's, with llama.cpp evaluating all the files.
Both files hold every tensor in the same type (tests/model/test_quant_mix.py), so the
quantizers are what differs. A third file per mix is `pagoda quantize --imatrix` with an
importance matrix from `pagoda imatrix` over text the evaluation never reads (from
character 700,000 of the corpus on; the evaluation windows start at 0, 200,000, ...).
llama-cpp-python cannot hand llama.cpp's quantizer an importance matrix, so that column
has no llama.cpp counterpart.

  .venv/bin/python bench/quantize_quality.py [--model F16.gguf] [--mixes Q4_K_M,Q6_K]
      [--threads 2] [--tokens 1536] [--imatrix-chunks 32]
"""
import argparse, ctypes, os, subprocess, sys, tempfile, time

import numpy as np
import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FTYPES = {"Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
          "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18}  # llama.h
TEXT = os.path.join(ROOT, "..", "shared", "testdata", "text", "tinyshakespeare.txt")


def log_probs(path, windows, threads):
    m = llama_cpp.Llama(path, n_ctx=512, logits_all=True, verbose=False, n_threads=threads)
    out = []
    for w in windows:
        m.reset()
        m.eval(w)
        z = np.array(m.scores[:len(w)], dtype=np.float64)
        z -= z.max(axis=1, keepdims=True)
        out.append(z - np.log(np.exp(z).sum(axis=1, keepdims=True)))
    m.close()
    return np.concatenate(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.F16.gguf"))
    ap.add_argument("--mixes", default=",".join(FTYPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=1536)
    ap.add_argument("--imatrix-chunks", type=int, default=32, help="512-token chunks; 0: none")
    a = ap.parse_args()
    pagoda = os.path.join(ROOT, "build", "pagoda")
    text = open(TEXT, encoding="utf-8").read()
    vocab = llama_cpp.Llama(a.model, vocab_only=True, verbose=False)
    n_win = max(1, a.tokens // 384)
    windows = [vocab.tokenize(text[o:o + 3000].encode())[:384]
               for o in range(0, n_win * 200_000, 200_000)]
    ref = log_probs(a.model, windows, a.threads)
    p = np.exp(ref)
    print(f"model {os.path.basename(a.model)}, {sum(map(len, windows))} tokens, "
          f"{a.threads} threads")
    print("| mix | MiB (ours / llama.cpp) | quantize s (ours / llama.cpp) | KLD ours | KLD llama.cpp "
          "| KLD ratio | KLD ours + imatrix | imatrix / ours |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        imatrix = None
        if a.imatrix_chunks > 0:
            calib, imatrix = os.path.join(d, "calib.txt"), os.path.join(d, "imatrix.gguf")
            with open(calib, "w", encoding="utf-8") as f:
                f.write(text[700_000:])
            t0 = time.perf_counter()
            subprocess.run([pagoda, "imatrix", "-m", a.model, "-f", calib, "-o", imatrix,
                            "--chunks", str(a.imatrix_chunks), "-t", str(a.threads)],
                           check=True, capture_output=True)
            print(f"(importance matrix: {a.imatrix_chunks} chunks of 512 tokens, "
                  f"{time.perf_counter() - t0:.1f} s)")
        for mix in a.mixes.split(","):
            theirs, ours = os.path.join(d, f"t_{mix}.gguf"), os.path.join(d, f"o_{mix}.gguf")
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = FTYPES[mix]
            params.nthread = a.threads
            t0 = time.perf_counter()
            assert llama_cpp.llama_model_quantize(a.model.encode(), theirs.encode(),
                                                  ctypes.byref(params)) == 0
            t_theirs = time.perf_counter() - t0
            t0 = time.perf_counter()
            subprocess.run([pagoda, "quantize", a.model, ours, mix, "--threads", str(a.threads)],
                           check=True, capture_output=True)
            t_ours = time.perf_counter() - t0
            files = [ours, theirs]
            if imatrix:
                files.append(os.path.join(d, f"i_{mix}.gguf"))
                subprocess.run([pagoda, "quantize", a.model, files[2], mix, "--imatrix", imatrix,
                                "--threads", str(a.threads)], check=True, capture_output=True)
            k = [float((p * (ref - log_probs(f, windows, a.threads))).sum(axis=1).mean())
                 for f in files]
            mib = [os.path.getsize(f) / 2**20 for f in (ours, theirs)]
            im = f"{k[2]:.4f} | {k[2] / k[0]:.3f}" if imatrix else "- | -"
            print(f"| {mix} | {mib[0]:.1f} / {mib[1]:.1f} | {t_ours:.2f} / {t_theirs:.2f} | "
                  f"{k[0]:.4f} | {k[1]:.4f} | {k[0] / k[1]:.3f} | {im} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
