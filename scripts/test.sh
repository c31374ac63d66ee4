#!/usr/bin/env bash
# Runs every test: the GoogleTest unit and op tests, the Python tests that drive
# build/pagoda against llama.cpp fixtures and reference tokenizers, the unit tests again
# under AddressSanitizer + UndefinedBehaviorSanitizer, and the GGUF and chat-template
# fuzzers for a bounded time. Expects scripts/setup.sh to have run.
#   scripts/test.sh           everything
#   scripts/test.sh --quick   unit and Python tests only
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = "--quick" ] && QUICK=1
JOBS=$(nproc)
# ccache (CMakeLists.txt uses it when installed): paths relative to the checkout, so a
# fresh clone elsewhere reuses what an earlier build of the same sources compiled.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1

echo "== build =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$JOBS"

if grep -q "^PAGODA_CUDA:BOOL=ON" build/CMakeCache.txt; then
  # The main build compiles the kernels for Hopper only; sm_80 and sm_89 are opt-in
  # (cmake/cuda.cmake). Compiling them here too (about 95 s on 2 cores) keeps that option
  # building: launch bounds tuned for Hopper's 64 warps an SM are an error on sm_89's 48.
  echo "== CUDA kernels for sm_80 and sm_89 =="
  cmake -S . -B build-arch -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_TESTS=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="80;89" >/dev/null
  cmake --build build-arch -j"$JOBS" --target pagoda_cuda_kernels
fi

echo "== layers include downward only =="
python3 scripts/check_layers.py

echo "== unit and op tests =="
build/pagoda_tests --gtest_brief=1

echo "== Python tests (build/pagoda against references) =="
.venv/bin/python -m pytest -q --durations=20 tests

[ "$QUICK" = 1 ] && exit 0

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (clang) =="
# One sanitized tree serves the unit tests and the fuzzers: clang (libFuzzer needs it),
# CPU code only (the sanitizers are host-compiler flags that nvcc rejects; the CUDA code
# is checked by compute-sanitizer on the GPU machine, scripts/gpu_check.sh). GCC's
# warnings are checked by the main build above.
CC=clang CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGODA_FUZZ=ON \
  -DPAGODA_CUDA=OFF -DPAGODA_SANITIZE=address,undefined -DPAGODA_TESTS=ON >/dev/null
# Only what runs below: the tests and the fuzzers (not a sanitized pagoda and benchmarks).
cmake --build build-san -j"$JOBS" --target pagoda_tests fuzz_gguf fuzz_safetensors \
  fuzz_chat_template fuzz_http_request fuzz_openai_request
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 build-san/pagoda_tests --gtest_brief=1

echo "== GGUF fuzzer (libFuzzer, ${PAGODA_FUZZ_SECONDS:=60} s) =="
CORPUS=$(mktemp -d)
trap 'rm -rf "$CORPUS"' EXIT
# Seeds: a tiny well-formed model and a vocabulary-only file.
build/pagoda mkmodel --vocab ../shared/models/stories260K.gguf --dim 8 --layers 1 --heads 2 \
  --ffn 16 -o "$CORPUS/tiny.gguf"
head -c 65536 ../shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf > "$CORPUS/vocab-head.gguf"
build-san/fuzz_gguf -max_total_time="$PAGODA_FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 \
  -print_final_stats=1 "$CORPUS" 2>&1 | tail -n 12

echo "== safetensors fuzzer (libFuzzer, ${PAGODA_FUZZ_SECONDS} s) =="
SCORPUS=$(mktemp -d)
trap 'rm -rf "$CORPUS" "$SCORPUS"' EXIT
# Seeds written by the safetensors package: F16, F32 and I64 tensors with metadata,
# and an index (the target parses the bytes up to the first NUL as one).
.venv/bin/python - "$SCORPUS" <<'PY'
import json, sys, numpy as np
from safetensors.numpy import save_file
d = sys.argv[1]
save_file({"model.embed_tokens.weight": np.ones((4, 8), np.float16),
           "model.norm.weight": np.arange(8, dtype=np.float32),
           "model.layers.0.self_attn.q_proj.bias": np.zeros(3, np.int64)},
          f"{d}/tiny.safetensors", metadata={"format": "pt"})
open(f"{d}/index.json", "w").write(json.dumps(
    {"metadata": {"total_size": 96}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                    "b": "model-00002-of-00002.safetensors"}}))
PY
build-san/fuzz_safetensors -max_total_time="$PAGODA_FUZZ_SECONDS" -max_len=65536 \
  -rss_limit_mb=2048 -print_final_stats=1 "$SCORPUS" 2>&1 | tail -n 12

echo "== chat-template fuzzer (libFuzzer, ${PAGODA_FUZZ_SECONDS} s) =="
TCORPUS=$(mktemp -d)
trap 'rm -rf "$CORPUS" "$SCORPUS" "$TCORPUS"' EXIT
cp ../shared/testdata/chat-templates/*.jinja "$TCORPUS/"
build-san/fuzz_chat_template -max_total_time="$PAGODA_FUZZ_SECONDS" -max_len=20000 \
  -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$TCORPUS" 2>&1 | tail -n 12
echo "== HTTP request fuzzer (libFuzzer, ${PAGODA_FUZZ_SECONDS} s) =="
HCORPUS=$(mktemp -d)
trap 'rm -rf "$CORPUS" "$SCORPUS" "$TCORPUS" "$HCORPUS"' EXIT
# Seeds: the first byte sets the piece size, the rest is what a client sends.
printf '\x03POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n{"a": [1]}\n' \
  > "$HCORPUS/cl"
printf '\x01POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: v\r\n\r\n' \
  > "$HCORPUS/chunked"
printf '\x05GET /health?x HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.1\r\n\r\n' > "$HCORPUS/pipelined"
build-san/fuzz_http_request -max_total_time="$PAGODA_FUZZ_SECONDS" -max_len=16384 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 "$HCORPUS" 2>&1 | tail -n 12

echo "== OpenAI request fuzzer (libFuzzer, ${PAGODA_FUZZ_SECONDS} s) =="
RCORPUS=$(mktemp -d)
trap 'rm -rf "$CORPUS" "$SCORPUS" "$TCORPUS" "$HCORPUS" "$RCORPUS"' EXIT
# Seeds: a chat request (with tools), completions with text and token ids, and one with
# stop strings and ids, a seed and log-probabilities. The target reads stories260K's
# vocabulary (PAGODA_FUZZ_VOCAB names another).
cat > "$RCORPUS/chat.json" <<'JSON'
{"model": "smollm2", "messages": [{"role": "system", "content": "Be brief."},
 {"role": "user", "content": [{"type": "text", "text": "Hi there"}]}],
 "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "stream": true,
 "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 2}
JSON
cat > "$RCORPUS/chat_tools.json" <<'JSON'
{"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null,
 "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get",
 "arguments": "{\"city\": \"Oslo\"}"}}]}, {"role": "tool", "content": "3 C"}],
 "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object",
 "properties": {"city": {"type": "string"}}}}}], "add_generation_prompt": true}
JSON
cat > "$RCORPUS/completion_ids.json" <<'JSON'
{"model": "smollm2", "prompt": [[1, 2, 3, 400], [5, 6]], "max_tokens": 4, "n": 2, "echo": true}
JSON
cat > "$RCORPUS/completion_text.json" <<'JSON'
{"prompt": ["Once upon a time", "The end"], "max_completion_tokens": 8, "priority": -3,
 "user": "u", "ignore_eos": true, "min_p": 0.05, "top_k": 40, "repetition_penalty": 1.1}
JSON
cat > "$RCORPUS/completion_stop.json" <<'JSON'
{"prompt": "Hello", "stop": ["\n", "The"], "stop_token_ids": [2, 13], "seed": 18446744073709551615,
 "logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": -0.5,
 "include_stop_str_in_output": true}
JSON
build-san/fuzz_openai_request -max_total_time="$PAGODA_FUZZ_SECONDS" -max_len=65536 \
  -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 "$RCORPUS" 2>&1 | tail -n 12
echo "all tests passed"
