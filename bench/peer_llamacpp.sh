#!/usr/bin/env bash
# The llama.cpp peer in the same call as Pagoda (issue 6): builds `llama-bench` from the
# trimmed source bench/fetch_llamacpp.sh makes (CUDA for sm_90 unless CUDA_ARCH says
# otherwise; GPU=0 builds for the CPU), then runs the issue's rows on each model with flash
# attention on: prefill 512 and 2,048, decode 128, decode 128 at depth 4,096. Prints
# llama-bench's JSON lines, then one summary line per row.
#   bench/peer_llamacpp.sh SRC BUILD_DIR MODEL.gguf [MODEL.gguf ...]
set -euo pipefail
SRC=$1
BUILD=$2
shift 2
if [ ! -x "$BUILD/bin/llama-bench" ]; then
  gpu_flags=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90}")
  [ "${GPU:-1}" = 0 ] && gpu_flags=(-DGGML_CUDA=OFF)
  cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release "${gpu_flags[@]}" -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON > "$BUILD.cmake.log" 2>&1
  cmake --build "$BUILD" --target llama-bench -j"${JOBS:-$(nproc)}" > "$BUILD.build.log" 2>&1 ||
    { tail -n 30 "$BUILD.build.log"; exit 1; }
fi
NGL=${NGL:-99}
REPS=${REPS:-3}
out=$(mktemp)
for m in "$@"; do
  "$BUILD/bin/llama-bench" -m "$m" -ngl "$NGL" -fa 1 -p "${PROMPTS:-512,2048}" -n "${GEN:-128}" \
    -r "$REPS" -o jsonl | tee -a "$out"
  "$BUILD/bin/llama-bench" -m "$m" -ngl "$NGL" -fa 1 -p 0 -n "${GEN:-128}" -d "${DEPTH:-4096}" \
    -r "$REPS" -o jsonl | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    what = (f"prefill {d['n_prompt']}" if d.get("n_prompt") else f"decode {d['n_gen']}") + \
        (f" @ depth {d['n_depth']}" if d.get("n_depth") else "")
    name = d.get("model_type", "?")
    print(f"llama.cpp {name[:28]:28s} {what:24s} {d['avg_ts']:10.1f} tok/s")
PY
rm -f "$out"
