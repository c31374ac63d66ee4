#!/usr/bin/env python3
"""Every quantized format Pagoda loads and writes, on SmolLM2-135M's real weights, against
llama.cpp's own quants, in one run (issue 31 part 6). Each file is evaluated by
`pagoda perplexity --kl-base F16.gguf --json` (the F16 GGUF as the baseline row), and the
table gives PPL, mean / p99 KL divergence of the next-token distribution from the F16's,
the share of positions with the same top token, and each KLD's ratio to llama.cpp Q8_0's
and Q4_0's, with the issue's targets:

  smoothquant, fp8 (Pagoda's)             KLD <= 3 x llama.cpp Q8_0's
  awq, gptq (4-bit; every such row)       KLD <= 0.75 x llama.cpp Q4_0's
  nf4 (bitsandbytes)                      KLD <= llama.cpp Q4_0's

Made in a temp dir from the 16-bit folder and the F16 GGUF:
  llama.cpp Q8_0, Q4_0, Q4_K_M   llama-cpp-python's llama_model_quantize, no importance matrix
  Pagoda fp8, smoothquant, gptq, `pagoda quantize FOLDER OUT SCHEME` (gptq: asym, group 128;
  awq, nf4                       also --sym --act-order, and --act-order --static-groups;
                                 awq: group 64, as 576 columns need; nf4 --double-quant);
                                 calibration --samples S --seq-len 512
  external tools                 scripts/hf_awq_gptq.py (awq_g64: AutoAWQ's packer over
                                 round-to-nearest, no activation-aware search; gptq4_asym:
                                 round-to-nearest in GPTQ layout), scripts/hf_bnb_nf4.py (nf4,
                                 nf4_dq), scripts/hf_compressed.py (w8a8_int8, w4a16_asym)

The calibration text is tinyshakespeare's first half (a temp file handed to --calibration);
the evaluation reads its second half, which no calibration saw.

Bits/weight: "file" is the bytes of the file's quantized matrices (every tensor of a
quantized linear: codes, scales, zeros, g_idx, absmax ...) over their weights; "loaded" is
16 x `pagoda plan --device cpu --json` weight_bytes over the F16 GGUF's (all weights,
embeddings and 16-bit layers included, as the CPU loader stores them). "loaded as" counts
the types `pagoda info --tensors` gives the layers' matrices, plus the CPU plan's note of
what it converts at load.

  .venv/bin/python bench/format_quality.py [--chunks 40] [--ctx 256] [--threads 2]
      [--samples 32] [--only NAME,NAME] [--keep DIR]
"""
import argparse, collections, ctypes, json, os, re, subprocess, sys, tempfile, time

import llama_cpp
from gguf import GGUFReader
from safetensors import safe_open

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "..", "shared", "testdata", "text", "tinyshakespeare.txt")
HF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct-hf")
F16 = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F16.gguf")
PAGODA = os.path.join(ROOT, "build", "pagoda")
PY = sys.executable
LLAMA_FTYPES = {"Q8_0": 7, "Q4_0": 2, "Q4_K_M": 15}  # llama.h
LINEAR = re.compile(r"^(model\.layers\.\d+\.\w+\.(?:q|k|v|o|gate|up|down)_proj)\.")
# name -> (target reference, factor): KLD <= factor x that reference's KLD.
TARGETS = {"fp8": ("Q8_0", 3.0), "smoothquant": ("Q8_0", 3.0),
           "gptq": ("Q4_0", 0.75), "gptq_sym_act": ("Q4_0", 0.75),
           "gptq_act_static": ("Q4_0", 0.75), "awq": ("Q4_0", 0.75), "nf4_pagoda_dq": ("Q4_0", 1.0),
           "awq_g64": ("Q4_0", 0.75), "gptq4_asym": ("Q4_0", 0.75),
           "nf4": ("Q4_0", 1.0), "nf4_dq": ("Q4_0", 1.0)}


def sh(cmd, **kw):
    return subprocess.run(["nice"] + cmd, check=True, capture_output=True, text=True, **kw)


def make_all(d, a, calib):
    """name -> (producer, path); each made here, timed on stderr."""
    out = {"F16": ("baseline (models/)", F16)}
    t = str(a.threads)

    def timed(name, f):
        if a.only and name not in a.only:
            return
        t0 = time.perf_counter()
        out[name] = f()
        print(f"made {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

    for mix, ftype in LLAMA_FTYPES.items():
        def q(mix=mix, ftype=ftype):
            path = os.path.join(d, f"llama_{mix}.gguf")
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype, params.nthread = ftype, a.threads
            assert llama_cpp.llama_model_quantize(F16.encode(), path.encode(),
                                                  ctypes.byref(params)) == 0
            return "llama.cpp quantize", path
        timed(mix, q)
    cal = ["--calibration", calib, "--samples", str(a.samples), "--seq-len", "512"]
    for name, scheme, extra in (("fp8", "fp8", []), ("smoothquant", "smoothquant", cal),
                                ("gptq", "gptq", cal),
                                ("gptq_sym_act", "gptq", cal + ["--sym", "--act-order"]),
                                ("gptq_act_static", "gptq",
                                 cal + ["--act-order", "--static-groups"]),
                                ("nf4_pagoda_dq", "nf4", ["--double-quant"]),
                                ("awq", "awq", cal + ["--group-size", "64"])):
        def p(name=name, scheme=scheme, extra=extra):
            path = os.path.join(d, name)
            sh([PAGODA, "quantize", HF, path, scheme, "--threads", t] + extra)
            return "pagoda quantize", path
        timed(name, p)
    ext = os.path.join(d, "ext")
    for script, names in (("hf_awq_gptq.py", ["awq_g64", "gptq4_asym"]),
                          ("hf_bnb_nf4.py", ["nf4", "nf4_dq"]),
                          ("hf_compressed.py", ["w8a8_int8", "w4a16_asym"])):
        for n in names:
            who = {"awq_g64": "AutoAWQ's packer, RTN", "gptq4_asym": "RTN in GPTQ layout",
                   "nf4": "bitsandbytes", "nf4_dq": "bitsandbytes"}.get(n, "compressed-tensors")

            def e(n=n, script=script, who=who):
                sh([PY, os.path.join(ROOT, "scripts", script), HF, ext, n],
                   env={**os.environ, "OMP_NUM_THREADS": t, "CUDA_VISIBLE_DEVICES": ""})
                return who, os.path.join(ext, n)
            timed(n, e)
    return out


def file_bpw(path, shapes):
    """Bits per weight of the file's quantized layer matrices (token embeddings left out,
    which only the GGUFs quantize)."""
    if path.endswith(".gguf"):
        nbytes = nelem = 0
        for t in GGUFReader(path).tensors:
            if t.name.startswith("blk.") and len(t.shape) >= 2 and \
                    t.tensor_type.name not in ("F16", "F32", "BF16"):
                nbytes += int(t.n_bytes)
                nelem += int(t.n_elements)
        return 8 * nbytes / nelem if nelem else 16.0
    # linear -> [bytes, every tensor of it 16/32-bit float "weight" / "bias"]
    mods = collections.defaultdict(lambda: [0, True])
    for f in sorted(os.listdir(path)):
        if not f.endswith(".safetensors"):
            continue
        with safe_open(os.path.join(path, f), "pt") as s:
            for k in s.keys():
                m = LINEAR.match(k)
                if not m:
                    continue
                x, n = s.get_slice(k), 1
                for dim in x.get_shape():
                    n *= dim
                size = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "F16": 2, "BF16": 2}.get(x.get_dtype(), 1)
                mods[m.group(1)][0] += n * size
                plain = size > 1 and x.get_dtype() not in ("I32", "I64") and \
                    k[len(m.group(1)) + 1:] in ("weight", "bias")
                mods[m.group(1)][1] = mods[m.group(1)][1] and plain
    q = {k: v for k, v in mods.items() if not v[1]}
    nbytes = sum(v[0] for v in q.values())
    nelem = sum(shapes[k] for k in q)
    return 8 * nbytes / nelem if nelem else 16.0


def linear_shapes():
    shapes = {}
    with safe_open(os.path.join(HF, "model.safetensors"), "pt") as s:
        for k in s.keys():
            m = LINEAR.match(k)
            if m and k.endswith(".weight"):
                r, c = s.get_slice(k).get_shape()
                shapes[m.group(1)] = r * c
    return shapes


def loaded(path):
    """(plan weight_bytes on CPU, 'TYPE xN, ...' of the layers' matrices as loaded)."""
    plan = json.loads(sh([PAGODA, "plan", "-m", path, "--device", "cpu", "--json"]).stdout)
    types = collections.Counter()
    for line in sh([PAGODA, "info", "-m", path, "--tensors"]).stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[2].startswith("[") and "," in line.split("]")[0]:
            name = f[-1] if " as " in line else f[0]
            if name.startswith("blk."):
                types[f[1]] += 1
    desc = ", ".join(f"{t} x{n}" for t, n in types.most_common())
    conv = [n for n in plan["notes"] if "converts at load" in n]
    if conv:
        desc += " (" + re.sub(r".*?: (.*); weights.*", r"CPU converts \1", conv[0]) + ")"
    return plan["weight_bytes"], desc


def evaluate(path, text, a):
    r = sh([PAGODA, "perplexity", "-m", path, "-f", text, "--kl-base", F16, "-c", str(a.ctx),
            "--chunks", str(a.chunks), "--json", "-t", str(a.threads)])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=40)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=32, help="calibration chunks of 512 tokens")
    ap.add_argument("--only", type=lambda s: set(s.split(",")) | {"Q8_0", "Q4_0"}, default=None,
                    help="make only these (llama.cpp Q8_0, Q4_0 always, for the ratios)")
    ap.add_argument("--keep", help="make the files in DIR and keep them")
    a = ap.parse_args()
    text = open(TEXT, encoding="utf-8").read()
    half = len(text) // 2
    with tempfile.TemporaryDirectory() as tmp:
        d = a.keep or tmp
        os.makedirs(d, exist_ok=True)
        calib, held = os.path.join(d, "calib.txt"), os.path.join(d, "eval.txt")
        with open(calib, "w", encoding="utf-8") as f:
            f.write(text[:half])
        with open(held, "w", encoding="utf-8") as f:
            f.write(text[half:])
        files = make_all(d, a, calib)
        shapes = linear_shapes()
        f16_bytes = loaded(F16)[0]
        rows = {}
        for name, (who, path) in files.items():
            t0 = time.perf_counter()
            r = evaluate(path, held, a)
            wb, desc = loaded(path)
            rows[name] = dict(who=who, desc=desc, fbpw=file_bpw(path, shapes),
                              lbpw=16.0 * wb / f16_bytes, r=r)
            print(f"evaluated {name} in {time.perf_counter() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    ref = {k: rows[k]["r"]["kld"]["mean"] for k in ("Q8_0", "Q4_0")}
    r0 = rows["F16"]["r"]
    print(f"{r0['chunks']} chunks of {r0['n_ctx']} tokens ({r0['scored']} scored) of "
          f"tinyshakespeare's second half; calibration: its first half, {a.samples} x 512 tokens; "
          f"{a.threads} threads")
    print("| name | producer | loaded as (layers' matrices) | bpw file | bpw loaded | PPL "
          "| KLD mean (+/- s.e.) | KLD p99 | same top % | / Q8_0 | / Q4_0 | target |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, w in rows.items():
        r = w["r"]
        k = r["kld"]["mean"]
        target = "-"
        if name in TARGETS:
            base, factor = TARGETS[name]
            ok = k <= factor * ref[base]
            target = f"<= {factor:g}x {base}: {'pass' if ok else 'miss'}"
        print(f"| {name} | {w['who']} | {w['desc']} | {w['fbpw']:.2f} | {w['lbpw']:.2f} "
              f"| {r['ppl']:.3f} | {k:.5f} +/- {r['kld']['error']:.5f} | {r['kld']['p99']:.4f} | {100 * r['same_top']:.2f} "
              f"| {k / ref['Q8_0']:.2f} | {k / ref['Q4_0']:.2f} | {target} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
