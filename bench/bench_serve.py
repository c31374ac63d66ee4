#!/usr/bin/env python3
"""Serving benchmark in the manner of vLLM's `bench serve`: Poisson arrivals at a given
request rate, random prompts of a given length, streamed completions; reports TTFT, TPOT,
ITL and end-to-end latency (mean, median, p99) and throughput.

Against a running OpenAI-compatible server:
  .venv/bin/python bench/bench_serve.py --base-url http://127.0.0.1:8000 --model NAME \
      --rates 1,4,16 --num-prompts 64 --input-len 128 --output-len 64
Or let it start one (same model, 2 threads, same context) and stop it afterwards:
  .venv/bin/python bench/bench_serve.py --launch pagoda --rates 1,4,16
  .venv/bin/python bench/bench_serve.py --launch llama-cpp --rates 1,4,16   # llama-cpp-python[server]

Prompts are slices of tinyshakespeare (about 4 characters a token); outputs ignore EOS
(`ignore_eos` for Pagoda, a -100 logit bias on the end tokens for llama.cpp) so every
request generates --output-len tokens. Output tokens are counted from the streamed
chunks (one token each on both servers) unless the server reports usage.
"""
import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "..", "shared", "testdata", "text", "tinyshakespeare.txt")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def make_prompts(n, input_len, seed):
    text = open(CORPUS, encoding="utf-8").read()
    rng = random.Random(seed)
    chars = input_len * 4
    out = []
    for _ in range(n):
        start = rng.randrange(0, len(text) - chars)
        out.append(text[start:start + chars])
    return out


async def one_request(session, url, model, prompt, output_len, extra):
    body = {"model": model, "prompt": prompt, "max_tokens": output_len, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}, **extra}
    t0 = time.perf_counter()
    times, usage, error = [], None, None
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                return {"error": f"HTTP {resp.status}: {(await resp.text())[:200]}"}
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                j = json.loads(data)
                if "error" in j:
                    error = str(j["error"])
                    break
                if j.get("usage"):
                    usage = j["usage"]
                if j.get("choices") and j["choices"][0].get("text"):
                    times.append(time.perf_counter())
    except aiohttp.ClientError as e:
        error = repr(e)
    end = time.perf_counter()
    if error or not times:
        return {"error": error or "no output"}
    n_out = usage["completion_tokens"] if usage else len(times)
    return {"ttft": times[0] - t0, "e2e": end - t0,
            "itl": [b - a for a, b in zip(times, times[1:])],
            "tpot": (end - times[0]) / (n_out - 1) if n_out > 1 else None,
            "output_tokens": n_out,
            "prompt_tokens": usage["prompt_tokens"] if usage else None}


async def run_rate(url, model, prompts, output_len, rate, seed, extra):
    rng = random.Random(seed)
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        tasks = []
        t0 = time.perf_counter()
        for p in prompts:
            tasks.append(asyncio.create_task(one_request(session, url, model, p, output_len,
                                                         extra)))
            if rate > 0:
                await asyncio.sleep(rng.expovariate(rate))
        results = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - t0
    return results, elapsed


def summarize(results, elapsed):
    ok = [r for r in results if "error" not in r]

    def stats(xs):
        xs = sorted(xs)
        if not xs:
            return {"mean": None, "median": None, "p99": None}
        return {"mean": statistics.fmean(xs) * 1e3, "median": statistics.median(xs) * 1e3,
                "p99": xs[min(len(xs) - 1, int(round(0.99 * (len(xs) - 1))))] * 1e3}

    out_tokens = sum(r["output_tokens"] for r in ok)
    return {
        "completed": len(ok), "failed": len(results) - len(ok),
        "errors": sorted({r["error"] for r in results if "error" in r})[:3],
        "duration_s": elapsed,
        "request_throughput": len(ok) / elapsed,
        "output_throughput": out_tokens / elapsed,
        "ttft_ms": stats([r["ttft"] for r in ok]),
        "tpot_ms": stats([r["tpot"] for r in ok if r["tpot"] is not None]),
        "itl_ms": stats([x for r in ok for x in r["itl"]]),
        "e2e_ms": stats([r["e2e"] for r in ok]),
    }


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(kind, args):
    port = free_port()
    if kind == "pagoda":
        cmd = [os.path.join(ROOT, "build", "pagoda"), "serve", "-m", args.model_path, "--port",
               str(port), "--threads", str(args.threads), "--max-model-len", str(args.ctx),
               "--served-model-name", "bench", "--kv-cache-memory", "512MiB"]
    else:
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", args.model_path, "--port",
               str(port), "--n_threads", str(args.threads), "--n_threads_batch",
               str(args.threads), "--n_ctx", str(args.ctx), "--model_alias", "bench",
               # Its default lets each new request cut the one streaming off.
               "--interrupt_requests", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import urllib.request
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{kind} server did not start: {' '.join(cmd)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url")
    ap.add_argument("--model", default="bench", help="model name in the API")
    ap.add_argument("--launch", choices=["pagoda", "llama-cpp"])
    ap.add_argument("--model-path", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--rates", default="1,4,16", help="requests/s, comma-separated; 0 = all at once")
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the results here too")
    args = ap.parse_args()
    # A SIGTERM (e.g. from `timeout`) still stops the server this script started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    proc = None
    if args.launch:
        proc, url = launch(args.launch, args)
        args.model = "bench"
    elif args.base_url:
        url = args.base_url.rstrip("/")
    else:
        ap.error("give --base-url or --launch")
    # End tokens of SmolLM2-style vocabularies (<|endoftext|>, <|im_end|>) for llama.cpp.
    extra = {"ignore_eos": True, "logit_bias": {"0": -100, "2": -100}}
    prompts = make_prompts(args.num_prompts, args.input_len, args.seed)
    all_results = {}
    try:
        for rate in [float(r) for r in args.rates.split(",")]:
            results, elapsed = asyncio.run(run_rate(url, args.model, prompts, args.output_len,
                                                    rate, args.seed, extra))
            s = summarize(results, elapsed)
            all_results[str(rate)] = s
            print(f"rate {rate:g} req/s: {s['completed']} ok, {s['failed']} failed in "
                  f"{s['duration_s']:.1f} s; {s['request_throughput']:.2f} req/s, "
                  f"{s['output_throughput']:.1f} out tok/s")
            for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                v = s[k]
                if v["mean"] is not None:
                    print(f"  {k[:-3]:5s} mean {v['mean']:8.1f} ms  median {v['median']:8.1f} ms"
                          f"  p99 {v['p99']:8.1f} ms")
            if s["errors"]:
                print("  errors:", s["errors"])
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": all_results}, f, indent=2)


if __name__ == "__main__":
    main()
