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
    # A directory is a Hugging Face checkpoint folder (tests/model/test_hf_folder.py).
    d = tmp_path / "dir.gguf"
    d.mkdir()
    expect_error(["run", "-m", str(d), "-p", "hi"], "has no config.json")


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


TEXT = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")


def device_commands(tmp_path):
    """Every command that takes --device, with arguments on which `--device cpu` finishes
    quickly (serve instead stops at a later flag rather than listen)."""
    requests = tmp_path / "in.jsonl"
    requests.write_text('{"prompt": "Once", "max_tokens": 2, "temperature": 0}\n')
    return {
        "plan": ["plan", STORIES, "--device-memory", "4GiB"],
        "bench": ["bench", "-m", STORIES, "-p", "8", "-n", "4", "-r", "1"],
        "perplexity": ["perplexity", "-m", STORIES, "-f", TEXT, "-c", "128", "--chunks", "1"],
        "generate": ["generate", "-m", STORIES, "--input", requests, "-q"],
        "serve": ["serve", "-m", STORIES, "--scheduling-policy", "none"],
        "cuda-check": ["cuda-check", "-m", STORIES, "--tokens", "1 2", "-n", "2"],
    }


def test_every_command_reads_device_one_way(tmp_path):
    for name, args in device_commands(tmp_path).items():
        probe = run_pagoda(*args, "--device", "gpu", check=False)
        if name == "serve" and "has no HTTP server" in probe.stderr:
            continue  # built without the server
        for bad in ("gpu", "GPU", "cuda:", "cuda:x", "cuda1", "tpu"):
            expect_error([*args, "--device", bad],
                         f"pagoda {name}: error: --device must be cpu, cuda or cuda:N, "
                         f"not '{bad}'")
        # cuda and cuda:N are devices: whatever fails after is the backend's, not the flag's.
        for good in ("cuda", "cuda:1"):
            proc = run_pagoda(*args, "--device", good, check=False)
            assert "--device must be" not in proc.stderr, (name, good, proc.stderr)
        proc = run_pagoda(*args, "--device", "cpu", check=False)
        if name == "serve":
            assert "--scheduling-policy must be" in proc.stderr, proc.stderr
        elif name == "cuda-check":  # the CPU is what it checks the GPU against
            assert "cuda-check compares the CPU with a GPU" in proc.stderr, proc.stderr
        else:
            assert proc.returncode == 0, (name, proc.stderr)
