#!/usr/bin/env bash
# Batch-1 decode on the GPU machine, A/B in one build: builds with CUDA (unless
# BUILD=0), runs the CUDA tests whose names contain one of the comma-separated $TESTS
# (default: all but the timings; GoogleTest, GTEST_SOURCE as in gpu_check.sh), the greedy
# checks against the CPU that take the one-token path (SmolLM2-shape F16 and Q4_0, FP8
# weights), compute-sanitizer's memcheck over the tests named in $MEMCHECK if set, then `pagoda bench` tg128 on Llama-3.1-8B shapes (random weights) for each
# type in $TYPES under each environment in $VARIANTS, and prints a table last.
#
#   bench/decode_ab.sh [--skip-checks]
# Environment: TYPES (default "BF16 Q4_0"; "BF16+fp8": the BF16 file with
# --quantization fp8; a llama.cpp mix name such as "Q4_K_M": an F16 file quantized by
# `pagoda quantize` with that mix), VARIANTS (';'-separated environment
# settings and `pagoda bench` flags, "-" for none; default "-;PAGODA_CUDA_FUSE=none"; for
# example "-;--async-scheduling;PAGODA_CUDA_SPLIT_KEYS=0 --async-scheduling"; "omit":
# each kind of op left out in turn), REPS (bench -r; default 3),
# PAGODA_DATA (default ../shared), OUT_DIR (default build-gpu/ab), MODEL_DIR (default
# /dev/shm), BUILD_DIR (default build-gpu).
set -uo pipefail
cd "$(dirname "$0")/.."
DATA=${PAGODA_DATA:-../shared}
OUT_DIR=${OUT_DIR:-build-gpu/ab}
MODEL_DIR=${MODEL_DIR:-/dev/shm}
BUILD_DIR=${BUILD_DIR:-build-gpu}
TYPES=${TYPES:-"BF16 Q4_0"}
VARIANTS=${VARIANTS:-"-;PAGODA_CUDA_FUSE=none"}
# VARIANTS=omit: each kind of op left out in turn (PAGODA_CUDA_OMIT), so the differences
# from "-" are what each kind costs inside the step's graph.
if [ "$VARIANTS" = omit ]; then
  VARIANTS="-"
  for k in norm qkv rope attention wo gate_up silu down output; do
    VARIANTS="$VARIANTS;PAGODA_CUDA_OMIT=$k"
  done
fi
REPS=${REPS:-3}
CHECKS=1
[ "${1:-}" = "--skip-checks" ] && CHECKS=0
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: > "$SUMMARY"
row() { printf '%-52s %s\n' "$1" "$2" | tee -a "$SUMMARY"; }
# "a,b" -> --gtest_filter='*a*:*b*' (tests whose names contain a or b) in FILTER; none for "".
name_filter() { FILTER=(); [ -z "$1" ] || FILTER=("--gtest_filter=*${1//,/*:*}*"); }
gtest_tail() { grep -E "^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ tests?" "$1" | tr '\n' ' '; }
BIN=$BUILD_DIR

if [ "${BUILD:-1}" = 1 ]; then
  t0=$(date +%s)
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 ${GTEST_SOURCE:+-DPAGODA_GTEST_SOURCE="$GTEST_SOURCE"} \
    > "$OUT_DIR/cmake.log" 2>&1 &&
    cmake --build "$BUILD_DIR" -j"$(nproc)" --target pagoda pagoda_cuda pagoda_cuda_tests \
      > "$OUT_DIR/build.log" 2>&1
  rc=$?
  row "build" "$([ $rc = 0 ] && echo ok || echo FAILED) in $(($(date +%s) - t0)) s"
  if [ $rc != 0 ]; then grep -m 20 -B2 -A6 "error" "$OUT_DIR/build.log"; exit 1; fi
fi

# The 8B models are written in the background while the checks run.
for TYPE in $TYPES; do
  [ "${TYPE%+fp8}" != "$TYPE" ] && continue  # the BF16 file, quantized at load
  M="$MODEL_DIR/llama3.1-8b-random-$TYPE.gguf"
  [ -s "$M" ] && continue
  case "$TYPE" in
    Q[2-6]_K_[SML])  # a mix: written in F16, then quantized tensor by tensor
      ($BIN/pagoda mkmodel --preset llama3.1-8b \
        --vocab "$DATA/testdata/tokenizer/ggml-vocab-llama-bpe.gguf" --type F16 -o "$M.f16" &&
        $BIN/pagoda quantize "$M.f16" "$M" "$TYPE"; rm -f "$M.f16") > "$OUT_DIR/mk_$TYPE.log" 2>&1 &
      ;;
    *)
      $BIN/pagoda mkmodel --preset llama3.1-8b \
        --vocab "$DATA/testdata/tokenizer/ggml-vocab-llama-bpe.gguf" --type "$TYPE" -o "$M" \
        > "$OUT_DIR/mk_$TYPE.log" 2>&1 &
      ;;
  esac
done

if [ $CHECKS = 1 ]; then
  name_filter "${TESTS:-}"
  timeout 300 $BIN/pagoda_cuda_tests ${FILTER[@]+"${FILTER[@]}"} > "$OUT_DIR/cuda_tests.log" 2>&1
  rc=$?
  grep -E "FAIL" "$OUT_DIR/cuda_tests.log" | head -n 20
  row "CUDA tests ${TESTS:-(all)}" "$([ $rc = 0 ] && echo pass || echo FAIL) ($(gtest_tail "$OUT_DIR/cuda_tests.log"))"
  if [ -n "${MEMCHECK:-}" ]; then
    name_filter "$MEMCHECK"
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 $BIN/pagoda_cuda_tests \
      "${FILTER[@]}" > "$OUT_DIR/memcheck.log" 2>&1
    rc=$?
    row "memcheck $MEMCHECK" "$([ $rc = 0 ] && echo pass || echo FAIL) ($(grep -E "ERROR SUMMARY" "$OUT_DIR/memcheck.log" | tail -n 1); $(gtest_tail "$OUT_DIR/memcheck.log"))"
  fi
  python3 - "$OUT_DIR" <<'PY'
import json, sys
cases = json.load(open("tests/fixtures/llamacpp_SmolLM2-F16.json"))["cases"]
with open(f"{sys.argv[1]}/smol.tokens", "w") as f:
    for c in cases:
        f.write(" ".join(map(str, c["tokens"])) + "\n")
PY
  for T in F16 Q4_0; do
    $BIN/pagoda mkmodel --preset smollm2-135m --vocab "$DATA/testdata/tokenizer/ggml-vocab-gpt-2.gguf" \
      --type $T -o "$MODEL_DIR/smol-$T.gguf" > /dev/null 2>&1
  done
  for m in "F16 smol-F16" "Q4_0 smol-Q4_0" "fp8-weights smol-F16 --quantization fp8" \
    "F16-fp8-KV smol-F16 --kv-cache-dtype fp8"; do
    read -r name file extra <<< "$m"
    # shellcheck disable=SC2086
    $BIN/pagoda cuda-check -m "$MODEL_DIR/$file.gguf" --tokens-file "$OUT_DIR/smol.tokens" -n 64 \
      $extra > "$OUT_DIR/check_$name.log" 2>&1
    rc=$?
    row "greedy 64 SmolLM2-shape $name, one at a time" "$([ $rc = 0 ] && echo pass || echo FAIL): $(tail -n 1 "$OUT_DIR/check_$name.log" | sed 's/cuda-check[^:]*: //')"
  done
fi
wait

for TYPE in $TYPES; do
  M="$MODEL_DIR/llama3.1-8b-random-${TYPE%+fp8}.gguf"
  quant=()
  [ "${TYPE%+fp8}" != "$TYPE" ] && quant=(--quantization fp8)
  IFS=';' read -ra vs <<< "$VARIANTS"
  i=0
  for v in "${vs[@]}"; do
    i=$((i + 1))
    env_args=()
    flag_args=()
    if [ "$v" != "-" ]; then
      read -ra words <<< "$v"
      for w in "${words[@]}"; do
        case "$w" in --*) flag_args+=("$w") ;; *) env_args+=("$w") ;; esac
      done
    fi
    err="$OUT_DIR/bench_${TYPE}_$i.err"
    out=$(env "${env_args[@]}" $BIN/pagoda bench -m "$M" --device cuda --json -p 0 -n 128 \
      -r "$REPS" "${quant[@]}" "${flag_args[@]}" 2> "$err" | tail -n 1)
    tps=$(echo "$out" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(round(d['decode_tok_s'], 1))" 2>/dev/null)
    row "$TYPE tg128 [$v]" "${tps:-FAILED $(tail -n 2 "$err")} tok/s"
    echo "$TYPE [$v] $out" >> "$OUT_DIR/bench.jsonl"
  done
done
echo "== summary =="
cat "$SUMMARY"
