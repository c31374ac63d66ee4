"""Our tokenizer against llama.cpp's (through llama-cpp-python) on varied text.

The conformance files cover 46 inputs per vocabulary; this checks that the implementation
is not tuned to them: a few hundred generated strings per vocabulary (scripts, emoji, digit
and whitespace runs, contractions in any case, code, special-token text, some invalid UTF-8),
with parse_special off and on, plus every token's piece, the end-of-generation and control
sets, and BOS handling.
"""
import ctypes
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import SMOLLM2, TOKENIZER_DATA, VOCAB_NAMES
from tokenizer_cases import make_cases

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed; it is the reference tokenizer")

VOCABS = [TOKENIZER_DATA / f"ggml-vocab-{n}.gguf" for n in VOCAB_NAMES] + [SMOLLM2]
SEP = b"\n__ggml_vocab_test__\n"


def _vocab_id(path):
    return path.name


@pytest.fixture(scope="module", params=VOCABS, ids=_vocab_id)
def reference(request):
    path = request.param
    if not path.exists():
        pytest.fail(f"{path} missing: run scripts/setup.sh")
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    return path, llm, llama_cpp.llama_model_get_vocab(llm.model)


def _ours(pagoda_bin, path, cases, parse_special):
    with tempfile.NamedTemporaryFile(suffix=".inp") as f:
        f.write(b"".join(c + SEP for c in cases))
        f.flush()
        args = [str(pagoda_bin), "tokenize", "-m", str(path), "--vocab-test", f.name]
        if parse_special:
            args.append("--parse-special")
        out = subprocess.run(args, capture_output=True, check=True).stdout.decode()
    lines = out.split("\n")[:-1]
    assert len(lines) == len(cases)
    return [[int(t) for t in line.split()] for line in lines]


def _specials(llm, vocab):
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    out = []
    for i in range(n):
        attr = llama_cpp.llama_vocab_get_attr(vocab, i)
        if attr & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED):
            out.append(llama_cpp.llama_vocab_get_text(vocab, i).decode("utf-8", "replace"))
    # Keep a deterministic, varied selection (the real chat markers come first in these files).
    return out[:40]


@pytest.mark.parametrize("parse_special", [False, True], ids=["plain", "parse_special"])
def test_ids_match_llama_cpp(pagoda_bin, reference, parse_special, record_property):
    path, llm, vocab = reference
    cases = make_cases(seed=1234, specials=_specials(llm, vocab), count=500)
    ours = _ours(pagoda_bin, path, cases, parse_special)
    mismatches = []
    for case, got in zip(cases, ours):
        want = llm.tokenize(case, add_bos=False, special=parse_special)
        if got != want:
            mismatches.append((case, got, want))
    agree = len(cases) - len(mismatches)
    record_property("agree", f"{agree}/{len(cases)}")
    print(f"\n{path.name} parse_special={parse_special}: {agree}/{len(cases)} agree")
    for case, got, want in mismatches[:5]:
        print(f"  {case!r}\n    ours {got}\n    llama {want}")
    assert not mismatches


def test_add_special_matches_llama_cpp(pagoda_bin, reference):
    path, llm, vocab = reference
    for text in ["Hello world", " leading space", "x", "tail\n"]:
        got = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(path), "-p", text],
                             capture_output=True, text=True, check=True).stdout.split()
        assert [int(t) for t in got] == llm.tokenize(text.encode(), add_bos=True, special=False)


def _piece(vocab, token, special):
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, token, buf, len(buf), 0, special)
    assert n >= 0
    return buf.raw[:n]


def test_pieces_eog_and_control_match_llama_cpp(pagoda_bin, reference):
    path, llm, vocab = reference
    out = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(path), "--info", "--dump-pieces"],
                         capture_output=True, text=True, check=True).stdout.split("\n")
    info = {line.split()[0]: line.split()[1:] for line in out[:6] if line}
    n = llama_cpp.llama_vocab_n_tokens(vocab)
    assert int(info["n_vocab"][0]) == n
    eog = [i for i in range(n) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    control = [i for i in range(n) if llama_cpp.llama_vocab_is_control(vocab, i)]
    assert [int(x) for x in info["eog"]] == eog
    assert [int(x) for x in info["control"]] == control
    assert int(info["bos"][0]) == llama_cpp.llama_vocab_bos(vocab)
    assert int(info["eos"][0]) == llama_cpp.llama_vocab_eos(vocab)
    bad = []
    for line in out[6:]:
        if not line:
            continue
        tid, plain, special = line.split()
        tid = int(tid)
        ours = [b"" if plain == "-" else bytes.fromhex(plain),
                b"" if special == "-" else bytes.fromhex(special)]
        if ours != [_piece(vocab, tid, False), _piece(vocab, tid, True)]:
            bad.append(tid)
    print(f"\n{path.name}: pieces agree for {n - len(bad)}/{n} tokens")
    assert not bad, f"pieces differ for {len(bad)} tokens, e.g. {bad[:10]}"


# Every pre-tokenizer variant, not only the five the shared files use: the qwen2 vocabulary
# relabelled with each tokenizer.ggml.pre value and compared with llama.cpp, which then runs
# the same merges under that variant's regexes (its std::regex against our engine).
PRE_NAMES = ["default", "llama3", "llama-bpe", "dbrx", "chatglm-bpe", "deepseek-llm",
             "deepseek-coder", "deepseek-v3", "falcon", "gpt-2", "mpt", "starcoder", "refact",
             "command-r", "smollm", "qwen2", "stablelm2", "qwen35", "poro-chat", "viking",
             "tekken", "gpt-4o", "chameleon", "seed-coder", "bailingmoe", "olmo", "jais"]


def _relabel_pre(data, pre):
    """The GGUF bytes with tokenizer.ggml.pre replaced (files without tensors only)."""
    key = b"tokenizer.ggml.pre"
    i = data.find(struct.pack("<Q", len(key)) + key)
    assert i >= 0
    j = i + 8 + len(key)
    assert struct.unpack_from("<I", data, j)[0] == 8  # string
    (n,) = struct.unpack_from("<Q", data, j + 4)
    start = j + 12
    return data[:j + 4] + struct.pack("<Q", len(pre)) + pre.encode() + data[start + n:]


@pytest.fixture(scope="module")
def qwen2_bytes():
    path = TOKENIZER_DATA / "ggml-vocab-qwen2.gguf"
    if not path.exists():
        pytest.fail(f"{path} missing: run scripts/setup.sh")
    return path.read_bytes()


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_pre_tokenizer_variants_match_llama_cpp(pagoda_bin, qwen2_bytes, tmp_path, pre):
    path = tmp_path / f"qwen2-as-{pre}.gguf"
    path.write_bytes(_relabel_pre(qwen2_bytes, pre))
    try:
        llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    except Exception as e:  # this llama.cpp build may not know the name
        pytest.skip(f"llama.cpp cannot load pre '{pre}': {e}")
    cases = make_cases(seed=99, specials=["<|im_end|>", "<|endoftext|>"], count=1000)
    ours = _ours(pagoda_bin, path, cases, False)
    bad = [(c, g, llm.tokenize(c, add_bos=False, special=False)) for c, g in zip(cases, ours)
           if g != llm.tokenize(c, add_bos=False, special=False)]
    print(f"\npre={pre}: {len(cases) - len(bad)}/{len(cases)} agree")
    for case, got, want in bad[:3]:
        print(f"  {case!r}\n    ours {got}\n    llama {want}")
    assert not bad
