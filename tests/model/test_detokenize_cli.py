"""`pagoda tokenize -p TEXT` then `pagoda tokenize --decode IDS` gives TEXT back."""
import os

import pytest

from pagoda_util import ROOT, SHARED, run_pagoda

TEXTS = ["Hello, world!", "  two  spaces\tand a tab\n\nnewlines", "naïve café, 日本語, emoji 🙂",
         "def f(x):\n    return x ** 2  # comment", "<|im_start|>user\nhi<|im_end|>"]
VOCABS = [os.path.join(SHARED, "testdata", "tokenizer", f"ggml-vocab-{n}.gguf")
          for n in ("llama-bpe", "qwen2", "gpt-2", "llama-spm", "phi-3", "deepseek-coder")]
VOCABS.append(os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))


@pytest.mark.parametrize("vocab", VOCABS, ids=os.path.basename)
@pytest.mark.parametrize("text", TEXTS)
def test_round_trip(vocab, text):
    ids = run_pagoda("tokenize", "-m", vocab, "-p", text, "--no-bos", "--parse-special").stdout.strip()
    assert ids
    back = run_pagoda("tokenize", "-m", vocab, "--decode", ids).stdout
    assert back == text


def test_decode_rejects_bad_ids():
    vocab = VOCABS[0]
    proc = run_pagoda("tokenize", "-m", vocab, "--decode", "1 99999999", check=False)
    assert proc.returncode != 0 and "out-of-range" in proc.stderr
