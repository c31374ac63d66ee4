#!/usr/bin/env bash
# The CUDA backend's whole check on a GPU machine, in one go: build with CUDA, the CUDA
# op and model tests (CPU reference), compute-sanitizer over the op tests, greedy
# generation on CUDA against the CPU (stories260K, and a random-weight model in
# SmolLM2-135M's shapes in F16), then the benchmarks on a random-weight model in
# Llama-3.1-8B's shapes (BF16, made here: too large to carry), kernel timings, and a
# summary table printed last.
#
#   scripts/gpu_check.sh [--skip-bench] [--types "BF16 Q4_0"] [--profile]
# --profile adds per-op GPU time breakdowns (PAGODA_CUDA_PROFILE=1) and decode without
# CUDA graphs to the logs. --quick skips the kernel timings and compute-sanitizer.
# Environment: PAGODA_DATA (folder with models/stories260K.gguf and
# testdata/tokenizer/*.gguf; default ../shared), OUT_DIR (logs; default build-gpu/check),
# MODEL_DIR (random models; default /dev/shm), JOBS (default: all cores),
# MEMCHECK_TIMEOUT (seconds; default 240), BUILD_DIR (default build-gpu), GTEST_SOURCE
# (a googletest source tree, e.g. a copy of Debian's /usr/src/googletest, built for
# pagoda_cuda_tests where libgtest-dev is not installed), BENCH_RUNNER=0
# (skip the `pagoda bench` runs), THROUGHPUT_KV (KV cache types of the offline runs;
# default "fp8 auto"), THROUGHPUT_REQUESTS (offline throughput run; default
# 1000, 0 skips), THROUGHPUT_SEQS / THROUGHPUT_TOKENS (its --max-num-seqs and
# --max-num-batched-tokens), THROUGHPUT_BLOCK_SIZE (its --block-size: tokens a KV
# block; default 16), THROUGHPUT_TIMEOUT (seconds; default 400), PEERS=0 (skip
# bench/peer_transformers.py, run when torch and transformers import, and the llama.cpp
# peer, run when LLAMACPP_SRC holds bench/fetch_llamacpp.sh's tree; default
# build-peers/llama.cpp), LLAMACPP_TIMEOUT (seconds for its build and runs; default 900).
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${PAGODA_DATA:-../shared}
OUT_DIR=${OUT_DIR:-build-gpu/check}
MODEL_DIR=${MODEL_DIR:-/dev/shm}
LLAMACPP_SRC=${LLAMACPP_SRC:-build-peers/llama.cpp}
JOBS=${JOBS:-$(nproc)}
BUILD_DIR=${BUILD_DIR:-build-gpu}
SKIP_BENCH=0
PROFILE=0
QUICK=0
TYPES="BF16"
while [ $# -gt 0 ]; do
  case "$1" in
    --skip-bench) SKIP_BENCH=1 ;;
    --profile) PROFILE=1 ;;
    --quick) QUICK=1 ;;
    --types) TYPES="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
row() { printf '%-44s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }
# One line from a GoogleTest log: tests run, passed, skipped, failed.
gtest_summary() {
  local ran passed skipped failed
  ran=$(grep -oE "^\[==========\] [0-9]+ tests? from .* ran" "$1" | tail -n 1 | grep -oE "[0-9]+" | head -n 1)
  passed=$(grep -oE "^\[  PASSED  \] [0-9]+" "$1" | tail -n 1 | grep -oE "[0-9]+$")
  skipped=$(grep -oE "^\[  SKIPPED \] [0-9]+ tests?," "$1" | tail -n 1 | grep -oE "[0-9]+")
  failed=$(grep -oE "^\[  FAILED  \] [0-9]+ tests?," "$1" | tail -n 1 | grep -oE "[0-9]+")
  echo "${ran:-0} tests: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
}
# The failures of a GoogleTest log: each failed check's message, then the failed tests.
gtest_failures() {
  grep -E -A3 ": Failure$" "$1" | head -n 40
  grep -E "^\[  FAILED  \] [A-Za-z]" "$1" | head -n 30
}
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.1f}')"; }
FAILED=0

echo "== GPU =="
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

echo "== build (CUDA, sm_90) =="
t0=$(now)
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_TESTS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 ${GTEST_SOURCE:+-DPAGODA_GTEST_SOURCE="$GTEST_SOURCE"} \
  > "$OUT_DIR/cmake.log" 2>&1 &&
  cmake --build "$BUILD_DIR" -j"$JOBS" > "$OUT_DIR/build.log" 2>&1
rc=$?
row "build (-j$JOBS)" "$([ $rc = 0 ] && echo ok || echo FAILED) in $(secs "$t0" "$(now)") s"
if [ $rc != 0 ]; then tail -n 40 "$OUT_DIR/build.log"; exit 1; fi
BIN=$BUILD_DIR

echo "== CUDA op and model tests =="
# GoogleTest: every suite but the timings (PerfCuda, PerfOps), the op table's CUDA cases
# (OpTable/*) included.
timeout 300 $BIN/pagoda_cuda_tests > "$OUT_DIR/cuda_tests.log" 2>&1
rc=$?
gtest_failures "$OUT_DIR/cuda_tests.log"
row "op + model tests vs CPU" "$([ $rc = 0 ] && echo pass || echo FAIL) ($(gtest_summary "$OUT_DIR/cuda_tests.log"))"
[ $rc = 0 ] || FAILED=1

echo "== greedy generation: CUDA against CPU =="
python3 - "$OUT_DIR" <<'PY'
import json, sys
out = sys.argv[1]
for name in ("stories260K", "SmolLM2-F16"):
    cases = json.load(open(f"tests/fixtures/llamacpp_{name}.json"))["cases"]
    with open(f"{out}/{name}.tokens", "w") as f:
        for c in cases:
            f.write(" ".join(map(str, c["tokens"])) + "\n")
PY
$BIN/pagoda cuda-check -m "$DATA/models/stories260K.gguf" --tokens-file "$OUT_DIR/stories260K.tokens" \
  -n 64 > "$OUT_DIR/e2e_stories.log" 2>&1
rc=$?
cat "$OUT_DIR/e2e_stories.log"
row "greedy 64 stories260K F32" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_stories.log" | sed 's/cuda-check: //')"
[ $rc = 0 ] || FAILED=1
SMOL="$MODEL_DIR/smollm2-shape-random-F16.gguf"
$BIN/pagoda mkmodel --preset smollm2-135m --vocab "$DATA/testdata/tokenizer/ggml-vocab-gpt-2.gguf" \
  --type F16 -o "$SMOL" > "$OUT_DIR/mk_smol.log" 2>&1
$BIN/pagoda cuda-check -m "$SMOL" --tokens-file "$OUT_DIR/SmolLM2-F16.tokens" -n 64 \
  > "$OUT_DIR/e2e_smol.log" 2>&1
rc=$?
cat "$OUT_DIR/e2e_smol.log"
row "greedy 64 SmolLM2-shape random F16" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_smol.log" | sed 's/cuda-check: //')"
[ $rc = 0 ] || FAILED=1
# FP8 KV cache: the GPU's greedy tokens against the CPU's top 5 under teacher forcing.
for m in "stories260K stories260K $DATA/models/stories260K.gguf" "SmolLM2-shape SmolLM2-F16 $SMOL"; do
  read -r name tokens path <<< "$m"
  $BIN/pagoda cuda-check -m "$path" --tokens-file "$OUT_DIR/$tokens.tokens" -n 64 \
    --kv-cache-dtype fp8 > "$OUT_DIR/e2e_fp8_$name.log" 2>&1
  rc=$?
  tail -n 1 "$OUT_DIR/e2e_fp8_$name.log"
  row "greedy 64 $name, fp8 KV" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_fp8_$name.log" | sed 's/cuda-check fp8 KV: //')"
  [ $rc = 0 ] || FAILED=1
done
# FP8 weights (--quantization fp8), the same top-5 check.
for m in "stories260K stories260K $DATA/models/stories260K.gguf" "SmolLM2-shape SmolLM2-F16 $SMOL"; do
  read -r name tokens path <<< "$m"
  $BIN/pagoda cuda-check -m "$path" --tokens-file "$OUT_DIR/$tokens.tokens" -n 64 \
    --quantization fp8 > "$OUT_DIR/e2e_fp8w_$name.log" 2>&1
  rc=$?
  tail -n 1 "$OUT_DIR/e2e_fp8w_$name.log"
  row "greedy 64 $name, fp8 weights" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_fp8w_$name.log" | sed 's/cuda-check fp8 weights: //')"
  [ $rc = 0 ] || FAILED=1
done

# Perplexity (`pagoda perplexity`, llama-perplexity's procedure) of stories260K (real
# weights) over tinyshakespeare: the GPU's 16-bit run against the CPU's (within 0.5%),
# then the GPU's FP8 KV cache and FP8 weights against that 16-bit run (KL divergence,
# same top token), which the greedy checks above only bound by the top 5.
STORIES="$DATA/models/stories260K.gguf"
PPL_ARGS=(-f "$DATA/testdata/text/tinyshakespeare.txt" -c 128 --chunks 100 --json)
$BIN/pagoda perplexity -m "$STORIES" "${PPL_ARGS[@]}" > "$OUT_DIR/ppl_cpu.json" 2> "$OUT_DIR/ppl.log"
$BIN/pagoda perplexity -m "$STORIES" --device cuda "${PPL_ARGS[@]}" > "$OUT_DIR/ppl_cuda.json" 2>> "$OUT_DIR/ppl.log"
verdict=$(python3 - "$OUT_DIR" <<'PY'
import json, sys
try:
    c = json.load(open(f"{sys.argv[1]}/ppl_cpu.json"))
    g = json.load(open(f"{sys.argv[1]}/ppl_cuda.json"))
except Exception as e:
    print(f"FAIL: {e}")
    sys.exit()
ok = abs(g["ppl"] / c["ppl"] - 1) <= 0.005
print(f"{'pass' if ok else 'FAIL'}: cuda {g['ppl']:.4f}, cpu {c['ppl']:.4f} ({g['scored']} tokens)")
PY
)
row "perplexity stories260K, cuda vs cpu" "$verdict"
[ "${verdict#pass}" != "$verdict" ] || FAILED=1
for m in "fp8-KV --kv-cache-dtype fp8" "fp8-weights --quantization fp8"; do
  read -r name flag value <<< "$m"
  $BIN/pagoda perplexity -m "$STORIES" --device cuda "$flag" "$value" --kl-base "$STORIES" \
    "${PPL_ARGS[@]}" > "$OUT_DIR/ppl_$name.json" 2>> "$OUT_DIR/ppl.log"
  line=$(python3 - "$OUT_DIR/ppl_$name.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    k = r["kld"]
    print(f"PPL {r['ppl']:.4f} (16-bit {r['base_ppl']:.4f}), KLD mean {k['mean']:.2e} "
          f"max {k['max']:.2e}, same top {100 * r['same_top']:.2f}%")
except Exception as e:
    print(f"FAIL: {e}")
PY
)
  row "perplexity stories260K, cuda $name" "$line"
done

# K-quants (Q4_K, Q5_K, Q6_K), which the kernels multiply in the file's own bits
# (backend/cuda/kquant_layout.h). "mix": llama.cpp's Q4_K_M pattern, whose Q6_K attn_v
# beside Q4_K q and k makes the loader store that qkv stack in Q8_0; "native": every
# matrix in a K type the kernels take. Both are judged by the GPU's tokens against the
# CPU's top 5: the CPU rounds the activations of K products to 8 bits per 256 (llama.cpp's
# Q8_K), the GPU per 32, which parts greedy runs of this random model at gaps of ~1
# (cmd_cuda_check.cpp). Dimensions are whole 256-blocks.
KQ_F16="$MODEL_DIR/kquant-random-F16.gguf"
$BIN/pagoda mkmodel --arch llama --vocab "$DATA/testdata/tokenizer/ggml-vocab-gpt-2.gguf" \
  --dim 512 --layers 4 --heads 8 --kv-heads 2 --ffn 1536 --ctx 2048 --std 0.05 --embd-std 0.5 \
  --type F16 --seed 5 -o "$KQ_F16" > "$OUT_DIR/mk_kquant.log" 2>&1
for m in "mix attn_v=Q6_K,ffn_down=Q5_K,output=Q6_K" "native ffn_down=Q5_K,output=Q6_K"; do
  read -r name types <<< "$m"
  KQ="$MODEL_DIR/kquant-random-$name.gguf"
  $BIN/pagoda quantize "$KQ_F16" "$KQ" Q4_K --tensor-type "$types" >> "$OUT_DIR/mk_kquant.log" 2>&1 &&
    $BIN/pagoda cuda-check -m "$KQ" --tokens-file "$OUT_DIR/SmolLM2-F16.tokens" -n 64 \
      > "$OUT_DIR/e2e_kquant_$name.log" 2>&1
  rc=$?
  cat "$OUT_DIR/mk_kquant.log" "$OUT_DIR/e2e_kquant_$name.log" 2>/dev/null | tail -n 12
  row "greedy 64 K-quant $name" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_kquant_$name.log" 2>/dev/null | sed 's/cuda-check [a-zK-]* weights: //')"
  [ $rc = 0 ] || FAILED=1
done
# Sequences decoded together (cuda-check --parallel): batched products replayed from CUDA
# graphs, each sequence against the CPU. F16: cuBLASLt at 16 rows; FP8 weights: FP8
# cuBLASLt products at 16 rows; Q4_0: the 8-bit-activation GEMV at 4 rows, fed by the
# norm and SiLU kernels' own quantization.
SMOL_Q4="$MODEL_DIR/smollm2-shape-random-Q4_0.gguf"
$BIN/pagoda mkmodel --preset smollm2-135m --vocab "$DATA/testdata/tokenizer/ggml-vocab-gpt-2.gguf" \
  --type Q4_0 -o "$SMOL_Q4" > "$OUT_DIR/mk_smol_q4.log" 2>&1
# Q4_0 one sequence at a time as well: one-token steps take the fused products
# (gemv_fused: RoPE epilogue, block weights quantizing their own input).
for m in "F16 16 $SMOL" "fp8-weights 16 $SMOL --quantization fp8" "Q4_0 4 $SMOL_Q4" "Q4_0-alone 1 $SMOL_Q4"; do
  read -r name par path extra <<< "$m"
  # shellcheck disable=SC2086
  $BIN/pagoda cuda-check -m "$path" --tokens-file "$OUT_DIR/SmolLM2-F16.tokens" -n 64 \
    --parallel "$par" $extra > "$OUT_DIR/e2e_par_$name.log" 2>&1
  rc=$?
  tail -n 1 "$OUT_DIR/e2e_par_$name.log"
  row "greedy 64 SmolLM2-shape $name, $par together" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_par_$name.log" | sed 's/cuda-check[^:]*: //')"
  [ $rc = 0 ] || FAILED=1
done
# Decode KV splits from the batch size alone (PAGODA_CUDA_SPLIT_KEYS=0; the default picks
# them from the context, so the runs above take one split and no merge at short contexts).
PAGODA_CUDA_SPLIT_KEYS=0 $BIN/pagoda cuda-check -m "$SMOL" --tokens-file "$OUT_DIR/SmolLM2-F16.tokens" \
  -n 64 > "$OUT_DIR/e2e_batchsplits.log" 2>&1
rc=$?
tail -n 1 "$OUT_DIR/e2e_batchsplits.log"
row "greedy 64 SmolLM2-shape F16, batch-only splits" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/e2e_batchsplits.log" | sed 's/cuda-check[^:]*: //')"
[ $rc = 0 ] || FAILED=1

echo "== the engine on CUDA: pagoda generate --device cuda against --device cpu =="
# The same 10 fixture prompts through the batching engine (scheduler, paged KV, greedy
# picked on the GPU) on both backends, all at once.
python3 - "$OUT_DIR" <<'PY'
import json, sys
out = sys.argv[1]
with open(f"{out}/engine_in.jsonl", "w") as f:
    for i, line in enumerate(open(f"{out}/SmolLM2-F16.tokens")):
        f.write(json.dumps({"id": i, "prompt": [int(t) for t in line.split()], "max_tokens": 64,
                            "temperature": 0, "ignore_eos": True}) + "\n")
PY
# cuda-async: pipelined steps (--async-scheduling), each queued before the previous
# step's picks reach the host, its inputs taken from them on the GPU.
for dev in cpu cuda cuda-async; do
  # shellcheck disable=SC2046
  PAGODA_LOG=info $BIN/pagoda generate -m "$SMOL" --device ${dev%-async} --input "$OUT_DIR/engine_in.jsonl" \
    --output "$OUT_DIR/engine_out_$dev.jsonl" --kv-cache-memory 256MiB --quiet \
    $([ $dev = cuda-async ] && echo --async-scheduling) \
    > "$OUT_DIR/engine_$dev.log" 2>&1 || echo "generate --device $dev failed: $(tail -n 3 "$OUT_DIR/engine_$dev.log")"
done
for gpu_run in cuda cuda-async; do
python3 - "$OUT_DIR" "$gpu_run" <<'PY' | tee "$OUT_DIR/engine_cmp_$gpu_run.txt"
import json, sys
out = sys.argv[1]
def load(d):
    try:
        return {r["id"]: r["token_ids"] for r in map(json.loads, open(f"{out}/engine_out_{d}.jsonl"))}
    except Exception as e:
        return {}
cpu, gpu = load("cpu"), load(sys.argv[2])
same = sum(1 for k in cpu if gpu.get(k) == cpu[k])
first = [next((i for i, (a, b) in enumerate(zip(cpu[k], gpu.get(k, []))) if a != b), None)
         for k in cpu if gpu.get(k) != cpu[k]]
print(f"{same}/{len(cpu)} identical over 64 tokens" + (f"; first divergences at {first}" if first else ""))
sys.exit(0 if cpu and same == len(cpu) else 1)
PY
rc=$?
grep -h "plan .* GiB" "$OUT_DIR/engine_$gpu_run.log" | tail -n 1
row "engine greedy 64, $gpu_run vs CPU (SmolLM2 shape)" "$([ $rc = 0 ] && echo pass || echo FAIL): $(cat "$OUT_DIR/engine_cmp_$gpu_run.txt")"
[ $rc = 0 ] || FAILED=1
done
rm -f "$SMOL"

if [ $SKIP_BENCH = 0 ]; then
  if [ $QUICK = 0 ]; then
    echo "== kernel timings (Llama-3.1-8B shapes) =="
    # The kernel timings (PerfCuda), then the op table's cases timed on the GPU (PerfOps).
    timeout 240 $BIN/pagoda_cuda_tests --gtest_filter='PerfCuda.*' > "$OUT_DIR/perf.log" 2>&1
    timeout 240 $BIN/pagoda_cuda_tests --gtest_filter='PerfOps/*.Time/cuda_*' \
      > "$OUT_DIR/perf_ops.log" 2>&1
    grep -h "perf " "$OUT_DIR/perf.log" "$OUT_DIR/perf_ops.log"
  fi
  for TYPE in $TYPES; do
    echo "== benchmarks: Llama-3.1-8B shapes, random $TYPE =="
    M="$MODEL_DIR/llama3.1-8b-random-$TYPE.gguf"
    t0=$(now)
    $BIN/pagoda mkmodel --preset llama3.1-8b --vocab "$DATA/testdata/tokenizer/ggml-vocab-llama-bpe.gguf" \
      --type "$TYPE" -o "$M" > "$OUT_DIR/mk_8b_$TYPE.log" 2>&1 || { row "mkmodel 8B $TYPE" FAILED; continue; }
    row "mkmodel llama3.1-8b $TYPE" "$(secs "$t0" "$(now)") s, $(du -h "$M" | cut -f1)"
    B="$BIN/pagoda bench -m $M --device cuda --json"
    [ "${BENCH_RUNNER:-1}" = 1 ] && {
    $B -p 512 -n 128 -r 5 > "$OUT_DIR/bench_${TYPE}_pp512_tg128.json" 2>&1
    $B -p 2048 -b 2048 -n 0 -r 5 > "$OUT_DIR/bench_${TYPE}_pp2048.json" 2>&1
    $B -p 0 -n 64 --depth 4096 -r 3 > "$OUT_DIR/bench_${TYPE}_tg64_d4096.json" 2>&1
    $B -p 0 -n 32 --depth 512 --parallel 32 -r 3 -b 4096 > "$OUT_DIR/bench_${TYPE}_b32.json" 2>&1
    $B -p 0 -n 32 --depth 512 --parallel 128 -r 3 -b 4096 > "$OUT_DIR/bench_${TYPE}_b128.json" 2>&1
    $B -p 0 -n 32 --depth 512 --parallel 128 -r 3 -b 4096 --kv-cache-dtype fp8 > "$OUT_DIR/bench_${TYPE}_b128_fp8.json" 2>&1
    $B -p 0 -n 64 --depth 4096 -r 3 --kv-cache-dtype fp8 > "$OUT_DIR/bench_${TYPE}_tg64_d4096_fp8.json" 2>&1
    if [ "$TYPE" = BF16 ]; then
      $B -p 512 -n 128 -r 3 --quantization fp8 > "$OUT_DIR/bench_${TYPE}_pp512_tg128_fp8w.json" 2>&1
      $B -p 0 -n 32 --depth 512 --parallel 128 -r 3 -b 4096 --quantization fp8 --kv-cache-dtype fp8 \
        > "$OUT_DIR/bench_${TYPE}_b128_fp8w.json" 2>&1
    fi
    PAGODA_CUDA_PDL=0 $B -p 0 -n 128 -r 3 > "$OUT_DIR/bench_${TYPE}_tg128_nopdl.json" 2>&1
    PAGODA_CUDA_FUSE=none $B -p 0 -n 128 -r 3 > "$OUT_DIR/bench_${TYPE}_tg128_nofuse.json" 2>&1
    # Decode KV splits from the batch size alone (the default picks them from the context).
    PAGODA_CUDA_SPLIT_KEYS=0 $B -p 0 -n 128 -r 3 > "$OUT_DIR/bench_${TYPE}_tg128_batchsplits.json" 2>&1
    PAGODA_CUDA_SPLIT_KEYS=0 $B -p 0 -n 64 --depth 4096 -r 3 --kv-cache-dtype fp8 \
      > "$OUT_DIR/bench_${TYPE}_tg64_d4096_fp8_batchsplits.json" 2>&1
    # Pipelined decode steps (the engine's --async-scheduling): the host's time per step
    # hidden behind the queued step.
    $B -p 0 -n 128 -r 3 --async-scheduling > "$OUT_DIR/bench_${TYPE}_tg128_async.json" 2>&1
    PAGODA_CUDA_SPLIT_KEYS=0 $B -p 0 -n 128 -r 3 --async-scheduling \
      > "$OUT_DIR/bench_${TYPE}_tg128_async_batchsplits.json" 2>&1
    $B -p 0 -n 32 --depth 512 --parallel 128 -r 3 -b 4096 --async-scheduling \
      > "$OUT_DIR/bench_${TYPE}_b128_async.json" 2>&1
    }
    if [ $PROFILE = 1 ]; then
      PAGODA_CUDA_GRAPHS=0 $B -p 0 -n 128 -r 3 > "$OUT_DIR/bench_${TYPE}_tg128_nographs.json" 2>&1
      for args in "-p 0 -n 32 -r 1" "-p 2048 -b 2048 -n 0 -r 1" "-p 0 -n 16 --depth 512 --parallel 128 -r 1 -b 4096"; do
        echo "-- profile: bench $args" >> "$OUT_DIR/profile_$TYPE.log"
        PAGODA_CUDA_PROFILE=1 $B $args >> "$OUT_DIR/profile_$TYPE.log" 2>&1
      done
      cat "$OUT_DIR/profile_$TYPE.log"
      echo "decode tg128 without graphs: $(cat "$OUT_DIR/bench_${TYPE}_tg128_nographs.json")"
    fi
    [ "${BENCH_RUNNER:-1}" = 1 ] && python3 - "$OUT_DIR" "$TYPE" <<'PY' | tee -a "$SUMMARY"
import json, sys
out, t = sys.argv[1], sys.argv[2]
def load(name):
    try:
        return json.loads(open(f"{out}/bench_{t}_{name}.json").read().strip().splitlines()[-1])
    except Exception as e:
        return {"error": str(e)}
rows = [("pp512_tg128", "prefill 512", "prefill_tok_s"), ("pp512_tg128", "decode tg128 batch 1", "decode_tok_s"),
        ("pp2048", "prefill 2048", "prefill_tok_s"), ("tg64_d4096", "decode batch 1 @ depth 4096", "decode_tok_s"),
        ("b32", "decode 32 seqs @ depth 512", "decode_tok_s"), ("b128", "decode 128 seqs @ depth 512", "decode_tok_s"),
        ("b128_fp8", "decode 128 seqs @ depth 512, fp8 KV", "decode_tok_s"),
        ("tg64_d4096_fp8", "decode batch 1 @ depth 4096, fp8 KV", "decode_tok_s"),
        ("pp512_tg128_fp8w", "prefill 512, fp8 weights", "prefill_tok_s"),
        ("pp512_tg128_fp8w", "decode tg128 batch 1, fp8 weights", "decode_tok_s"),
        ("b128_fp8w", "decode 128 seqs, fp8 weights + KV", "decode_tok_s"),
        ("tg128_nopdl", "decode tg128 batch 1, no PDL", "decode_tok_s"),
        ("tg128_nofuse", "decode tg128 batch 1, no fused products", "decode_tok_s"),
        ("tg128_batchsplits", "decode tg128 batch 1, batch-only splits", "decode_tok_s"),
        ("tg64_d4096_fp8_batchsplits", "decode @ 4096, fp8 KV, batch-only splits", "decode_tok_s"),
        ("tg128_async", "decode tg128 batch 1, pipelined", "decode_tok_s"),
        ("tg128_async_batchsplits", "decode tg128 batch 1, pipelined, batch-only splits", "decode_tok_s"),
        ("b128_async", "decode 128 seqs @ 512, pipelined", "decode_tok_s")]
for name, label, key in rows:
    if name.endswith("_fp8w") and t != "BF16":
        continue  # FP8 weights are quantized from the BF16 file only
    d = load(name)
    if "error" in d:
        print(f"{'8B ' + t + ' ' + label:44s} ERROR {d['error'][:60]}")
        continue
    extra = f" ({d['decode_gb_s']:.0f} GB/s)" if key == "decode_tok_s" else ""
    load_s = f", load {d['load_s']:.1f} s" if name == "pp512_tg128" and key == "prefill_tok_s" else ""
    print(f"{'8B ' + t + ' ' + label:44s} {d[key]:10.1f} tok/s{extra}{load_s}")
PY
    if [ "$TYPE" = BF16 ] && [ "${THROUGHPUT_REQUESTS:-1000}" -gt 0 ]; then
      # Offline throughput (issue 6): N requests of 1,000 random prompt tokens and 1,000
      # output tokens (EOS ignored, greedy) through `pagoda generate` on the GPU.
      N=${THROUGHPUT_REQUESTS:-1000}
      python3 - "$MODEL_DIR/tp_in.jsonl" "$N" <<'PY'
import json, random, sys
rng = random.Random(1)
with open(sys.argv[1], "w") as f:
    for i in range(int(sys.argv[2])):
        f.write(json.dumps({"id": i, "prompt": [rng.randrange(1000, 120000) for _ in range(1000)],
                            "max_tokens": 1000, "temperature": 0, "ignore_eos": True}) + "\n")
PY
      # Each KV cache type at the sequence count its pool holds without preemption (fp8
      # halves the bytes per token, so twice the sequences fit).
      # fp8-async: the fp8 run with pipelined steps (--async-scheduling).
      for kv in ${THROUGHPUT_KV:-fp8 fp8-async auto}; do
        seqs=${THROUGHPUT_SEQS:-$([ $kv = auto ] && echo 256 || echo 512)}
        # shellcheck disable=SC2046
        PAGODA_LOG=debug timeout ${THROUGHPUT_TIMEOUT:-400} $BIN/pagoda generate -m "$M" --device cuda \
          --kv-cache-dtype ${kv%-async} $([ $kv = fp8-async ] && echo --async-scheduling) \
          --input "$MODEL_DIR/tp_in.jsonl" --output "$MODEL_DIR/tp_out.jsonl" \
          --stats-json "$OUT_DIR/throughput_${TYPE}_$kv.json" --quiet --max-num-seqs $seqs \
          --max-num-batched-tokens ${THROUGHPUT_TOKENS:-8192} --block-size ${THROUGHPUT_BLOCK_SIZE:-16} \
          > "$OUT_DIR/throughput_${TYPE}_$kv.log" 2>&1
        rc=$?
        grep -h "plan .* GiB" "$OUT_DIR/throughput_${TYPE}_$kv.log" | tail -n 1
        python3 - "$OUT_DIR/throughput_${TYPE}_$kv.json" "$N" "$rc" "$kv" "$seqs" "${THROUGHPUT_BLOCK_SIZE:-16}" <<'PY' | tee -a "$SUMMARY"
import json, sys
label = f"8B BF16 offline {sys.argv[2]}x1000/1000, {sys.argv[4]} KV, {sys.argv[5]} seqs, bs {sys.argv[6]}"
try:
    d = json.load(open(sys.argv[1]))
    print(f"{label:44s} {d['output_tokens_per_s']:10.1f} out tok/s "
          f"({d['elapsed_s']:.1f} s, {d['preemptions']} preemptions; host outside the "
          f"model {d['step_s'] - d['execute_s']:.2f} s, {d['pipelined_steps']} of "
          f"{d['steps']} steps pipelined)")
except Exception as e:
    print(f"{label:44s} ERROR rc {sys.argv[3]}: {e}")
PY
        # Decode graphs captured during the run (debug lines) and what they stalled.
        row "8B offline $kv KV: decode graph captures" "$(grep -h "CUDA graph for" \
          "$OUT_DIR/throughput_${TYPE}_$kv.log" | sed -E 's/.* captured in ([0-9.]+) ms.*/\1/' |
          awk '{n++; t+=$1; if ($1>m) m=$1} END {printf "%d, %.1f ms in all, longest %.1f ms", n, t, m}')"
        grep -v "CUDA graph for" "$OUT_DIR/throughput_${TYPE}_$kv.log" | tail -n 3
      done
      rm -f "$MODEL_DIR/tp_in.jsonl" "$MODEL_DIR/tp_out.jsonl"
    fi
    if [ "$TYPE" = BF16 ]; then
      # Sampled requests (temperature, top-k, top-p, seeded): tokens drawn on the GPU
      # against the logits sent to the host's sampler (PAGODA_DEVICE_SAMPLING=0).
      python3 - "$MODEL_DIR/samp_in.jsonl" <<'PY'
import json, random, sys
rng = random.Random(2)
with open(sys.argv[1], "w") as f:
    for i in range(64):
        f.write(json.dumps({"id": i, "prompt": [rng.randrange(1000, 120000) for _ in range(128)],
                            "max_tokens": 64, "temperature": 0.8, "top_p": 0.95, "top_k": 50,
                            "seed": i, "ignore_eos": True}) + "\n")
PY
      for mode in 1 0; do
        PAGODA_DEVICE_SAMPLING=$mode timeout 120 $BIN/pagoda generate -m "$M" --device cuda \
          --input "$MODEL_DIR/samp_in.jsonl" --output "$OUT_DIR/sampled_$mode.jsonl" \
          --stats-json "$OUT_DIR/sampled_$mode.json" --quiet > "$OUT_DIR/sampled_$mode.log" 2>&1
        python3 - "$OUT_DIR/sampled_$mode.json" "$mode" <<'PY' | tee -a "$SUMMARY"
import json, sys
where = "GPU" if sys.argv[2] == "1" else "host"
try:
    d = json.load(open(sys.argv[1]))
    print(f"{'8B BF16 64 sampled x 128+64, drawn on ' + where:44s} {d['output_tokens_per_s']:10.1f} out tok/s")
except Exception as e:
    print(f"{'8B BF16 sampled, drawn on ' + where:44s} ERROR {e}")
PY
      done
      rm -f "$MODEL_DIR/samp_in.jsonl"
      # The transformers peer in the same call (random weights in the same shapes).
      if [ "${PEERS:-1}" = 1 ] && python3 -c "import torch, transformers" 2> /dev/null; then
        timeout 300 python3 bench/peer_transformers.py --batch 1 128 --input 512 --output 128 \
          > "$OUT_DIR/peer_transformers.log" 2>&1
        python3 - "$OUT_DIR/peer_transformers.log" <<'PY' | tee -a "$SUMMARY"
import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        if "decode_tok_s" in d:
            print(f"{'transformers decode batch ' + str(d['batch']) + ' (' + str(d['input']) + ' in)':44s} {d['decode_tok_s']:10.1f} tok/s")
PY
      fi
    fi
    # The llama.cpp peer in the same call, when its trimmed source is here
    # (bench/fetch_llamacpp.sh; built once per machine, ~4 minutes with CUDA).
    if [ "${PEERS:-1}" = 1 ] && [ -f "$LLAMACPP_SRC/CMakeLists.txt" ]; then
      timeout "${LLAMACPP_TIMEOUT:-900}" bash bench/peer_llamacpp.sh "$LLAMACPP_SRC" \
        "$BUILD_DIR/llama.cpp" "$M" > "$OUT_DIR/peer_llamacpp_$TYPE.log" 2>&1 ||
        echo "llama.cpp peer failed: $(tail -n 3 "$OUT_DIR/peer_llamacpp_$TYPE.log")"
      grep "^llama.cpp " "$OUT_DIR/peer_llamacpp_$TYPE.log" | tee -a "$SUMMARY"
    fi
    rm -f "$M"
  done
fi

echo "== compute-sanitizer (memcheck) over the op tests =="
if [ $QUICK = 1 ]; then
  row "compute-sanitizer memcheck" "skipped (--quick)"
elif command -v compute-sanitizer > /dev/null; then
  timeout ${MEMCHECK_TIMEOUT:-240} compute-sanitizer --tool memcheck --error-exitcode 9 $BIN/pagoda_cuda_tests \
    --gtest_filter='Cuda*rms_norm*:Cuda*silu*:Cuda*q8_outputs*:Cuda*embed*:Cuda*weight*:Cuda*rope*:Cuda*attention*:Cuda*sample*' \
    > "$OUT_DIR/memcheck.log" 2>&1
  rc=$?
  tail -n 3 "$OUT_DIR/memcheck.log"
  row "compute-sanitizer memcheck" "$([ $rc = 0 ] && echo clean || echo "rc $rc") ($(grep -c 'Invalid\|ERROR SUMMARY: [1-9]' "$OUT_DIR/memcheck.log") error lines)"
  [ $rc = 0 ] || FAILED=1
else
  row "compute-sanitizer memcheck" "not installed"
fi

echo
echo "================ summary ================"
cat "$SUMMARY"
exit $FAILED
