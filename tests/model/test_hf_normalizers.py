"""tokenizer.json normalizers NFC, NFD, NFKC, NFKD and Lowercase against independent references.

The qwen2 folder (converted from the shared GGUF vocabulary as in test_hf_tokenizer.py) is
byte-level, so the ids Pagoda gives for a text spell out exactly the text its normalizer made:
decoding them with `tokenizers` shows Pagoda's normalization, which is compared with Python's
`unicodedata.normalize` and with `tokenizers`' own normalizers. Then the ids themselves are
compared with `tokenizers` on folders with the normalizer set, as real Qwen files have it.

Python's unicodedata here is Unicode 14.0, Pagoda's tables 15.1: characters unassigned in 14.0
are left out of the comparison with it. `tokenizers` normalizes with older data still (about
Unicode 11) and lowercases with Rust's (Unicode 16 or later): the comparisons with it use only
characters whose properties those versions share (see _stable_for_tokenizers).
"""
import json
import random
import shutil
import unicodedata

import pytest

from conftest import SHARED, TOKENIZER_DATA
from test_hf_tokenizer import _conformance_inputs, _import_gguf_reader, _ours

tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizer")
from tokenizers import normalizers  # noqa: E402

SHAKESPEARE = SHARED / "testdata" / "text" / "tinyshakespeare.txt"
FORMS = ["NFC", "NFD", "NFKC", "NFKD"]
MAX = 0x110000


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast
    _import_gguf_reader()
    path = TOKENIZER_DATA / "ggml-vocab-qwen2.gguf"
    out = tmp_path_factory.mktemp("qwen2_hf")
    tok = PreTrainedTokenizerFast.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.save_pretrained(str(out))
    return out


def _with_normalizer(src, dst, normalizer):
    dst.mkdir(exist_ok=True)
    for f in src.iterdir():
        shutil.copy(f, dst / f.name)
    j = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    j["normalizer"] = normalizer
    (dst / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return dst


def _pagoda_text(pagoda_bin, folder, plain_ref, cases):
    """What Pagoda's normalizer made of each case, read back from its ids."""
    ids = _ours(pagoda_bin, folder, [c.encode() for c in cases], False, False)
    return [plain_ref.decode(i, skip_special_tokens=False) for i in ids]


def _assigned_in_python(c):
    return not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)) != "Cn"


def _decomposable():
    return [c for c in range(MAX) if _assigned_in_python(c) and unicodedata.decomposition(chr(c))]


def _marks():
    """Combining marks of many classes (and a few starters that compose, as U+0CD5)."""
    marks = [c for c in range(MAX) if _assigned_in_python(c) and unicodedata.combining(chr(c))]
    rng = random.Random(5)
    return rng.sample(marks, 60) + [0x0301, 0x0300, 0x0308, 0x0323, 0x0327, 0x031B, 0x0345,
                                    0x0328, 0x0304, 0x093C, 0x05B0, 0x0CD5, 0x0B3E, 0x3099]


def _hangul_cases(rng):
    out = [chr(c) for c in range(0xAC00, 0xD7A4, 7)]
    for _ in range(800):
        s = ""
        for _ in range(rng.randint(1, 6)):
            s += chr(rng.choice([rng.randint(0x1100, 0x1114), rng.randint(0x1160, 0x1177),
                                 rng.randint(0x11A6, 0x11C4), rng.randint(0xAC00, 0xD7A3)]))
        out.append(s)
    out += ["\u1100\u1161", "\u1100\u1161\u11a8", "\uac00\u11a8", "\uac01\u11a8",
            "\u1112\u1175\u11c2", "\u1100\u11a7", "\u115f\u1160"]
    return out


def _shakespeare_with_accents(rng, marks, decomposable, count=300):
    text = SHAKESPEARE.read_text(encoding="utf-8")
    out = []
    for _ in range(count):
        n = rng.choice([20, 100, 400])
        start = rng.randrange(0, len(text) - n)
        chars = list(text[start:start + n])
        for _ in range(rng.randint(1, n // 5)):
            k = rng.randrange(len(chars) + 1)
            if rng.random() < 0.6:
                ins = "".join(chr(rng.choice(marks)) for _ in range(rng.randint(1, 3)))
            else:
                ins = chr(rng.choice(decomposable))
            chars.insert(k, ins)
        s = "".join(chars)
        out.append(s)
        out.append(unicodedata.normalize("NFD", s))  # composed again by NFC
    return out


def _normalization_cases():
    rng = random.Random(15)
    decomposable = _decomposable()
    marks = _marks()
    cases = [chr(c) for c in decomposable]
    # Each decomposable character with marks in shuffled order, before and after it.
    for c in decomposable:
        ms = [chr(rng.choice(marks)) for _ in range(rng.randint(1, 4))]
        rng.shuffle(ms)
        cases.append(chr(c) + "".join(ms))
        cases.append("".join(ms[:1]) + chr(c) + "".join(ms[1:]))
    # Letters and marks: the usual way accents arrive decomposed.
    for _ in range(2000):
        base = rng.choice("aeiouyAEIOUYcnsztgkrwhxlCNSZ\u03b1\u03b7\u03c9\u0391\u0415\u0438")
        ms = [chr(rng.choice(marks)) for _ in range(rng.randint(1, 5))]
        rng.shuffle(ms)
        cases.append(base + "".join(ms))
    cases += _hangul_cases(rng)
    # Singletons, exclusions and non-starter decompositions.
    cases += ["\u212b", "\u2126", "\u212a", "\u0340\u0341", "a\u0343", "\u0374", "\u037e",
              "\u0387", "\u1f71", "\uf900", "\U0002f800", "\u0958\u095f", "\u09dc\u0a33",
              "\ufb1d\ufb1f", "\u2adc", "\U0001d15e\U0001d164", "\u0344", "a\u0f73\u0f75\u0f81",
              "\u1e9b\u0323", "e\u0301", "A\u030a", "\u0041\u0301\u0323\u0041\u0323\u0301"]
    cases += _shakespeare_with_accents(rng, marks, decomposable)
    return cases


@pytest.mark.parametrize("form", FORMS)
def test_normalizer_matches_unicodedata(pagoda_bin, qwen2_folder, tmp_path, form):
    folder = _with_normalizer(qwen2_folder, tmp_path / form, {"type": form})
    plain = tokenizers.Tokenizer.from_file(str(qwen2_folder / "tokenizer.json"))
    cases = _normalization_cases()
    assert len(cases) > 15000
    got = _pagoda_text(pagoda_bin, folder, plain, cases)
    bad = [k for k in range(len(cases)) if got[k] != unicodedata.normalize(form, cases[k])]
    assert not bad, (f"{len(bad)}/{len(cases)} differ; first {cases[bad[0]]!r}: pagoda "
                     f"{got[bad[0]]!r}, unicodedata {unicodedata.normalize(form, cases[bad[0]])!r}")


def _stable_for_tokenizers(s, form):
    """Whether `tokenizers`' older Unicode data normalizes `s` as current data does: no
    character assigned after Unicode 11 with a mapping or a combining class."""
    return normalizers.__dict__[form]().normalize_str(s) == unicodedata.normalize(form, s)


def test_lowercase_matches_tokenizers_on_every_character(pagoda_bin, qwen2_folder, tmp_path):
    folder = _with_normalizer(qwen2_folder, tmp_path / "lower", {"type": "Lowercase"})
    plain = tokenizers.Tokenizer.from_file(str(qwen2_folder / "tokenizer.json"))
    ref = normalizers.Lowercase()
    chars = [chr(c) for c in range(MAX) if _assigned_in_python(c)]
    cases = ["".join(chars[k:k + 64]) for k in range(0, len(chars), 64)]
    cases += ["\u039f\u0394\u039f\u03a3 \u0391\u03a3. \u03a3", "\u0130stanbul", "\u1e9e\u00df",
              "HELLO World", "\u01c5\u01c4\u01c6"]
    got = _pagoda_text(pagoda_bin, folder, plain, cases)
    bad = [k for k in range(len(cases)) if got[k] != ref.normalize_str(cases[k])]
    assert not bad, f"{len(bad)} differ; first {cases[bad[0]]!r}: {got[bad[0]]!r}"


def _decomposed_cases():
    rng = random.Random(9)
    words = ["cafe\u0301", "nai\u0308ve", "Re\u0301sume\u0301", "fac\u0327ade", "\u00e9t\u00e9",
             "Z\u00fcrich", "Zu\u0308rich", "\u1100\u1161\u11a8\u1100\u1161",
             "\u1112\u1161\u11ab\u1100\u1173\u11af", "\ud55c\uad6d\uc5b4", "A\u030angstro\u0308m",
             "\u212b \u2126 \ufb01 \u00bd \u2460", "o\u0323\u0302", "o\u0302\u0323", "\u0958"]
    out = list(words)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    for _ in range(100):
        start = rng.randrange(0, len(text) - 200)
        s = text[start:start + 200]
        out.append(unicodedata.normalize("NFD", s.replace("e ", "\u00e9 ").replace("a", "\u00e4")))
    for _ in range(100):
        out.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 8))))
    return out


SEQUENCES = {
    "NFC": {"type": "NFC"},
    "NFD": {"type": "NFD"},
    "NFKC": {"type": "NFKC"},
    "NFKD": {"type": "NFKD"},
    "Lowercase": {"type": "Lowercase"},
    "NFC-Lowercase": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
    "NFKD-Prepend": {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Prepend", "prepend": "\u2581"}]},
}


@pytest.mark.parametrize("name", list(SEQUENCES))
def test_normalized_folder_ids_match_tokenizers(pagoda_bin, qwen2_folder, tmp_path, name):
    folder = _with_normalizer(qwen2_folder, tmp_path / name, SEQUENCES[name])
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cases = []
    for c in _conformance_inputs("qwen2"):
        try:
            cases.append(c.decode("utf-8"))
        except UnicodeDecodeError:
            pass
    cases += _decomposed_cases()
    forms = [n["type"] for n in SEQUENCES[name].get("normalizers", [SEQUENCES[name]])]
    cases = [c for c in cases if all(f not in FORMS or _stable_for_tokenizers(c, f)
                                     for f in forms)]
    assert len(cases) > 200
    for parse_special in (False, True):
        ref.encode_special_tokens = not parse_special
        want = [ref.encode(c, add_special_tokens=False).ids for c in cases]
        ours = _ours(pagoda_bin, folder, [c.encode() for c in cases], False, parse_special)
        bad = [k for k in range(len(cases)) if ours[k] != want[k]]
        assert not bad, (f"parse_special={parse_special}: {len(bad)}/{len(cases)} differ; first "
                         f"{cases[bad[0]]!r}:\n  pagoda     {ours[bad[0]][:30]}\n"
                         f"  tokenizers {want[bad[0]][:30]}")


def test_unimplemented_normalizer_is_named(pagoda_bin, qwen2_folder, tmp_path):
    import subprocess
    folder = _with_normalizer(qwen2_folder, tmp_path / "bert", {
        "type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "BertNormalizer"}]})
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(folder), "-p", "x"],
                         capture_output=True, text=True)
    assert res.returncode != 0
    assert "normalizer BertNormalizer is not supported" in res.stderr
