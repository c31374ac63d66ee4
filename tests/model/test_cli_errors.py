"""Bad input to the CLI: a clear message on stderr and a non-zero exit, never a crash."""
import os
import shutil

import pytest

from pagoda_util import SHARED, run_pagoda

STORIES = os.path.join(SHARED, "models", "stories260K.gguf")


def expect_error(args, *fragments):
    proc = run_pagoda(*args, check=False)
    assert proc.returncode > 0, f"exit {proc.returncode} (negative means a signal): {proc.stderr}"
    for f in fragments:
        assert f in proc.stderr, f"expected '{f}' in: {proc.stderr}"
    return proc


def test_unknown_command_and_flags():
    expect_error(["frobnicate"], "unknown command 'frobnicate'")
    expect_error(["run", "-m", STORIES, "-p", "hi", "--frob"], "unknown flag '--frob'")
    expect_error(["bench", "-m", STORIES, "--threads"], "needs a value")
    expect_error(["run", "-m", STORIES, "-p", "hi", "--temperature", "-1"], "--temperature")
    expect_error(["run", "-m", STORIES, "-p", "hi", "-n", "ten"], "expects an integer")


def test_missing_and_unreadable_models(tmp_path):
    expect_error(["run", "-m", "/no/such/model.gguf", "-p", "hi"], "/no/such/model.gguf")
    expect_error(["run", "-p", "hi"], "missing -m")
    d = tmp_path / "dir.gguf"
    d.mkdir()
    expect_error(["run", "-m", str(d), "-p", "hi"], "not a regular file")


def test_corrupt_models(tmp_path):
    data = open(STORIES, "rb").read()
    bad_magic = tmp_path / "bad_magic.gguf"
    bad_magic.write_bytes(b"XXXX" + data[4:])
    expect_error(["run", "-m", str(bad_magic), "-p", "hi"], "not a GGUF file")
    for cut in (10, 100, 5000, len(data) // 2, len(data) - 1):
        trunc = tmp_path / f"trunc{cut}.gguf"
        trunc.write_bytes(data[:cut])
        expect_error(["run", "-m", str(trunc), "-p", "hi"], "truncated")
    expect_error(["info", "-m", str(tmp_path / "trunc100.gguf")], "truncated")


def test_vocab_only_file_cannot_generate():
    vocab = os.path.join(SHARED, "testdata", "tokenizer", "ggml-vocab-llama-spm.gguf")
    expect_error(["run", "-m", vocab, "-p", "hi"], "no tensors")


def test_prompt_longer_than_context():
    long_prompt = "Once upon a time " * 200  # far beyond stories260K's 512 tokens
    expect_error(["run", "-m", STORIES, "-p", long_prompt], "context")
    expect_error(["logits", "-m", STORIES, "-p", long_prompt], "context")


def test_token_ids_outside_vocab():
    expect_error(["logits", "-m", STORIES, "--tokens", "1 999999"], "out of range")
    expect_error(["run", "-m", STORIES, "--tokens", "1 512"], "outside the vocabulary")


def test_help_exits_zero():
    for cmd in ("run", "logits", "bench", "tokenize", "quantize", "mkmodel", "info", "plan"):
        proc = run_pagoda(cmd, "--help")
        assert "usage: pagoda" in proc.stdout
