"""`pagoda tokenize` against llama.cpp's conformance files, and its error handling."""
import subprocess

import pytest

from conftest import TOKENIZER_DATA, VOCAB_NAMES


@pytest.mark.parametrize("name", VOCAB_NAMES)
def test_vocab_test_reproduces_out_file(pagoda_bin, name):
    vocab = TOKENIZER_DATA / f"ggml-vocab-{name}.gguf"
    if not vocab.exists():
        pytest.skip(f"{vocab} missing")
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(vocab), "--vocab-test",
                          str(vocab) + ".inp"], capture_output=True, check=True)
    expected = (TOKENIZER_DATA / f"ggml-vocab-{name}.gguf.out").read_bytes()
    if res.stdout != expected:
        got, want = res.stdout.split(b"\n"), expected.split(b"\n")
        bad = [k for k in range(max(len(got), len(want)))
               if (got[k] if k < len(got) else None) != (want[k] if k < len(want) else None)]
        pytest.fail(f"{name}: {len(bad)} lines differ, first at line {bad[0] + 1}:\n"
                    f"got  {got[bad[0]] if bad[0] < len(got) else None!r}\n"
                    f"want {want[bad[0]] if bad[0] < len(want) else None!r}")


def test_prompt_prints_ids_and_pieces(pagoda_bin):
    vocab = TOKENIZER_DATA / "ggml-vocab-llama-spm.gguf"
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(vocab), "-p", "Hello world",
                          "--pieces"], capture_output=True, text=True, check=True)
    lines = res.stdout.splitlines()
    assert lines[0] == "1 15043 3186"
    assert lines[1].split() == ["1", "'<s>'"]
    assert "' Hello'" in lines[2]
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(vocab), "-p", "Hello world",
                          "--no-bos"], capture_output=True, text=True, check=True)
    assert res.stdout == "15043 3186\n"


@pytest.mark.parametrize("args,needle", [
    (["-m", "/nonexistent/file.gguf", "-p", "x"], "nonexistent"),
    (["-m", str(TOKENIZER_DATA / "ggml-vocab-gpt-2.gguf.inp"), "-p", "x"], "GGUF"),
    (["--frobnicate"], "unknown argument"),
    (["-p", "x"], "no model"),
    (["-m", str(TOKENIZER_DATA / "ggml-vocab-gpt-2.gguf"), "--vocab-test", "/nonexistent.inp"],
     "cannot read"),
])
def test_errors_exit_nonzero_with_message(pagoda_bin, args, needle):
    res = subprocess.run([str(pagoda_bin), "tokenize", *args], capture_output=True, text=True)
    assert res.returncode != 0
    assert needle in res.stderr
    assert res.stdout == ""
