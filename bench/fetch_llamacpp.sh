#!/usr/bin/env bash
# Fetches llama.cpp's source as the llama-cpp-python sdist on PyPI ships it (the version
# scripts/setup.sh pins) and trims it to what `llama-bench` needs with the CPU and CUDA
# backends (22 MB, so it can travel to the GPU machine: `carry` build-peers), into DEST
# (default build-peers/llama.cpp, ignored by git), for bench/peer_llamacpp.sh. The source
# is never committed.
#   bench/fetch_llamacpp.sh [DEST]
set -euo pipefail
cd "$(dirname "$0")/.."
VER=${LLAMA_VERSION:-$(sed -n "s/^LLAMA_VERSION=\([0-9.]*\).*/\1/p" scripts/setup.sh)}
VER=${VER:-0.3.36}
DEST=${1:-build-peers/llama.cpp}
PY=${PYTHON:-.venv/bin/python}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PY" -m pip download --quiet --no-binary :all: --no-deps "llama-cpp-python==$VER" -d "$tmp"
tar xzf "$tmp"/llama_cpp_python-"$VER".tar.gz -C "$tmp"
src="$tmp/llama_cpp_python-$VER/vendor/llama.cpp"
rm -rf "$DEST"
mkdir -p "$DEST/ggml/src" "$DEST/tools"
cp -r "$src"/{CMakeLists.txt,cmake,common,include,src,vendor,LICENSE} "$DEST/"
for f in "$src"/ggml/*; do
  [ "$(basename "$f")" = src ] || cp -r "$f" "$DEST/ggml/"
done
for f in "$src"/ggml/src/*; do
  case "$(basename "$f")" in
    ggml-cpu | ggml-cuda) cp -r "$f" "$DEST/ggml/src/" ;;
    *) [ -d "$f" ] && [ "$(basename "$f")" != ggml-blas ] && continue; cp -r "$f" "$DEST/ggml/src/" ;;
  esac
done
cp -r "$src/tools/llama-bench" "$DEST/tools/"
echo 'add_subdirectory(llama-bench)' > "$DEST/tools/CMakeLists.txt"
echo "llama.cpp from llama-cpp-python $VER: $(du -sh "$DEST" | cut -f1) in $DEST"
