"""`pagoda tokenize -m FOLDER`: a Hugging Face tokenizer.json folder against `tokenizers`.

The folders are made at test time from the six shared GGUF vocabularies by transformers' own
GGUF conversion, then the ids Pagoda reads from them must equal those of Hugging Face's
`tokenizers` loading the same tokenizer.json, on llama.cpp's conformance inputs, slices of
tinyshakespeare and generated cases, with add_special and parse_special both ways.
"""
import random
import subprocess
import sys
import tempfile
import time
import types

import pytest

from conftest import SHARED, SMOLLM2, TOKENIZER_DATA, VOCAB_NAMES
from tokenizer_cases import make_cases

tokenizers = pytest.importorskip("tokenizers", reason="the reference tokenizer")
pytest.importorskip("transformers", reason="converts the GGUF vocabularies")

SEP = b"\n__ggml_vocab_test__\n"
# The six vocabularies, and SmolLM2's (a whole model file: only its metadata is read).
HF_NAMES = VOCAB_NAMES + ["smollm2"]
SHAKESPEARE = SHARED / "testdata" / "text" / "tinyshakespeare.txt"


def _import_gguf_reader():
    # transformers 5's GGUF reader imports torch at module level for tensors, which reading a
    # tokenizer never touches: a stand-in module satisfies that import only while it runs
    # (is_torch_available() still answers False afterwards).
    import transformers  # noqa: F401  (its import checks must see the real environment)

    class _Stub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})

    had = sys.modules.get("torch")
    sys.modules["torch"] = _Stub("torch")
    try:
        import transformers.integrations.gguf.reader  # noqa: F401
    finally:
        if had is None:
            del sys.modules["torch"]
        else:
            sys.modules["torch"] = had


@pytest.fixture(scope="session")
def hf_folders(tmp_path_factory):
    """name -> folder (or the conversion's error text), converted once per session."""
    from transformers import PreTrainedTokenizerFast
    _import_gguf_reader()
    root = tmp_path_factory.mktemp("hf_tokenizers")
    out = {}
    for name in HF_NAMES:
        path = SMOLLM2 if name == "smollm2" else TOKENIZER_DATA / f"ggml-vocab-{name}.gguf"
        if not path.exists():
            pytest.fail(f"{path} missing: run scripts/setup.sh")
        try:
            tok = PreTrainedTokenizerFast.from_pretrained(str(path.parent), gguf_file=path.name)
            tok.save_pretrained(str(root / name))
            out[name] = root / name
        except Exception as e:  # a converter that fails is a finding, reported by the test
            out[name] = f"transformers could not convert {path.name}: {e!r}"
    return out


def _folder(hf_folders, name):
    f = hf_folders[name]
    if isinstance(f, str):
        pytest.xfail(f)
    return f


def _conformance_inputs(name):
    if name not in VOCAB_NAMES:
        return []
    data = (TOKENIZER_DATA / f"ggml-vocab-{name}.gguf.inp").read_bytes()
    cases = data.split(SEP)
    if cases and cases[-1] == b"":
        cases = cases[:-1]
    return cases


def _shakespeare_slices(count=40):
    text = SHAKESPEARE.read_bytes().decode("utf-8")
    rng = random.Random(31)
    out = []
    for _ in range(count):
        n = rng.choice([1, 7, 40, 200, 1500])
        start = rng.randrange(0, len(text) - n)
        out.append(text[start:start + n].encode())
    return out


def _specials(tok):
    return [t.content for t in tok.get_added_tokens_decoder().values()]


def _cases(name, ref):
    cases = _conformance_inputs(name) + _shakespeare_slices()
    cases += make_cases(31, _specials(ref), count=150)
    # tokenizers takes str: inputs that are not UTF-8 are left out.
    valid = []
    for c in cases:
        try:
            c.decode("utf-8")
            if b"\n__ggml_vocab_test__\n" not in c:
                valid.append(c)
        except UnicodeDecodeError:
            pass
    return valid


def _ours(pagoda_bin, model, cases, add_special, parse_special):
    with tempfile.NamedTemporaryFile(suffix=".inp") as f:
        f.write(b"".join(c + SEP for c in cases))
        f.flush()
        args = [str(pagoda_bin), "tokenize", "-m", str(model), "--vocab-test", f.name]
        if parse_special:
            args.append("--parse-special")
        if add_special:
            args.append("--add-special")
        res = subprocess.run(args, capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    lines = res.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(cases)
    return [[int(t) for t in line.split()] for line in lines]


def _reference(ref, cases, add_special, parse_special):
    # tokenizers always splits out added tokens; encode_special_tokens makes the special ones
    # ordinary text, which is what parse_special off means (non-special ones stay split).
    ref.encode_special_tokens = not parse_special
    return [ref.encode(c.decode("utf-8"), add_special_tokens=add_special).ids for c in cases]


def _first_diff(cases, ours, want):
    bad = [k for k in range(len(cases)) if ours[k] != want[k]]
    if not bad:
        return None
    k = bad[0]
    return (f"{len(bad)}/{len(cases)} cases differ; first {cases[k][:120]!r}:\n"
            f"  pagoda     {ours[k][:40]}\n  tokenizers {want[k][:40]}")


@pytest.mark.parametrize("name", HF_NAMES)
def test_folder_ids_match_tokenizers(pagoda_bin, hf_folders, name):
    folder = _folder(hf_folders, name)
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cases = _cases(name, ref)
    assert len(cases) > 150 if name in VOCAB_NAMES else len(cases) > 100
    problems = []
    t0 = time.time()
    for add_special in (False, True):
        for parse_special in (True, False):
            ours = _ours(pagoda_bin, folder, cases, add_special, parse_special)
            want = _reference(ref, cases, add_special, parse_special)
            d = _first_diff(cases, ours, want)
            if d:
                problems.append(f"add_special={add_special} parse_special={parse_special}: {d}")
    assert not problems, f"{name} ({time.time() - t0:.1f} s):\n" + "\n".join(problems)


@pytest.mark.parametrize("name", VOCAB_NAMES)
def test_folder_agrees_with_gguf_where_references_agree(pagoda_bin, hf_folders, name):
    """Where tokenizers (on the converted folder) and llama.cpp (the .out file) give the
    same ids, Pagoda's two loaders must too."""
    folder = _folder(hf_folders, name)
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    raw = _conformance_inputs(name)
    llama_out = (TOKENIZER_DATA / f"ggml-vocab-{name}.gguf.out").read_text().split("\n")
    keep = [k for k in range(len(raw)) if _decodes(raw[k])]
    cases = [raw[k] for k in keep]
    want_llama = [[int(t) for t in llama_out[k].split()] for k in keep]
    want_hf = _reference(ref, cases, False, False)
    gguf = _ours(pagoda_bin, TOKENIZER_DATA / f"ggml-vocab-{name}.gguf", cases, False, False)
    hf = _ours(pagoda_bin, folder, cases, False, False)
    agree = [k for k in range(len(cases)) if want_llama[k] == want_hf[k]]
    assert agree, f"{name}: the references never agree"
    bad = [k for k in agree if gguf[k] != hf[k]]
    assert not bad, f"{name}: {cases[bad[0]]!r}: gguf {gguf[bad[0]]} folder {hf[bad[0]]}"


def _decodes(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("name", HF_NAMES)
def test_folder_special_tokens_follow_tokenizer_config(pagoda_bin, hf_folders, name):
    import json
    folder = _folder(hf_folders, name)
    ref = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(folder), "--info"],
                         capture_output=True, text=True, check=True)
    info = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    for key in ("bos", "eos"):
        token = cfg.get(f"{key}_token")
        if isinstance(token, dict):
            token = token["content"]
        want = ref.token_to_id(token) if token else -1
        assert int(info[key]) == want, f"{key}: {info[key]} != {want} ({token})"
    if cfg.get("eos_token"):
        assert info["eos"] in info["eog"].split()
    # BOS is added exactly when the reference's post-processor adds a token in front.
    with_special = ref.encode("x", add_special_tokens=True).ids
    without = ref.encode("x", add_special_tokens=False).ids
    assert (info["add_bos"] == "true") == (with_special[:1] != without[:1])


def test_folder_without_tokenizer_json_is_refused(pagoda_bin, tmp_path):
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(tmp_path), "-p", "x"],
                         capture_output=True, text=True)
    assert res.returncode != 0
    assert "tokenizer.json" in res.stderr


def test_unsupported_component_is_named(pagoda_bin, hf_folders, tmp_path):
    import json
    folder = _folder(hf_folders, "gpt-2")
    j = json.loads((folder / "tokenizer.json").read_text())
    j["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": None}
    (tmp_path / "tokenizer.json").write_text(json.dumps(j))
    res = subprocess.run([str(pagoda_bin), "tokenize", "-m", str(tmp_path), "-p", "x"],
                         capture_output=True, text=True)
    assert res.returncode != 0
    assert "normalizer Precompiled is not supported" in res.stderr


@pytest.mark.parametrize("name", ["qwen2", "phi-3", "smollm2"])
def test_folder_chat_template_renders_as_transformers(pagoda_bin, hf_folders, name, tmp_path):
    """The folder's chat template (chat_template.jinja here) rendered by `pagoda template -m`
    equals transformers' apply_chat_template on the same folder."""
    import json
    from transformers import AutoTokenizer
    folder = _folder(hf_folders, name)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is a pagoda?"},
                {"role": "assistant", "content": "A tiered tower."},
                {"role": "user", "content": "Where?"}]
    mfile = tmp_path / "messages.json"
    mfile.write_text(json.dumps(messages))
    res = subprocess.run([str(pagoda_bin), "template", "-m", str(folder), "--messages",
                          str(mfile), "--add-generation-prompt"], capture_output=True)
    assert res.returncode == 0, res.stderr.decode()
    ref = AutoTokenizer.from_pretrained(str(folder))
    want = ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert res.stdout.decode() == want


# Edits to the converted files that reach the other components the loader maps (each is a
# shape found in published tokenizer.json files), checked against tokenizers the same way.
def _digits_prefix_space(j):  # SmolLM2's pre-tokenizer
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]}


def _merges_as_strings(j):  # files written before merges became pairs
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"] if " " not in "".join(m)]


def _ignore_merges(j):  # Meta's Llama-3 file
    j["model"]["ignore_merges"] = True


def _digit_groups_then_split(j):
    j["pre_tokenizer"]["pretokenizers"].insert(0, {"type": "Digits", "individual_digits": False})


def _metaspace_split_always(j):  # older Llama-2 conversions
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
                          "split": True}


def _unk_instead_of_bytes(j):
    j["model"]["byte_fallback"] = False
    j["model"]["unk_token"] = "<unk>"


def _strip_around_specials(j):  # Phi-3's file strips whitespace right of its markers
    for t in j["added_tokens"]:
        if t["special"] and t["content"].startswith("<|"):
            t["rstrip"] = True
        if t["content"] == "<|end|>":
            t["lstrip"] = True


def _bos_and_eos_template(j):
    j["post_processor"] = {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [], "special_tokens": {
                               "<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                               "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}}


VARIANTS = [
    ("gpt-2", _digits_prefix_space), ("gpt-2", _merges_as_strings),
    ("llama-bpe", _ignore_merges), ("qwen2", _digit_groups_then_split),
    ("llama-spm", _metaspace_split_always), ("llama-spm", _unk_instead_of_bytes),
    ("phi-3", _strip_around_specials), ("llama-spm", _bos_and_eos_template),
]


@pytest.mark.parametrize("name,edit", VARIANTS, ids=[f"{n}-{e.__name__[1:]}" for n, e in VARIANTS])
def test_edited_folder_ids_match_tokenizers(pagoda_bin, hf_folders, name, edit, tmp_path):
    import json
    import shutil
    src = _folder(hf_folders, name)
    for f in src.iterdir():
        shutil.copy(f, tmp_path / f.name)
    j = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    edit(j)
    (tmp_path / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    ref = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    cases = _cases(name, ref)
    cases += [b"12345 and 1,000,000 \xe2\x85\xa7 \xd9\xa3\xd9\xa4", b"  x", b"\xe2\x96\x81a b",
              b"<|user|>\n hi<|end|>\n<|assistant|>", b"\xe1\x84\x80\xf0\x9f\x98\x80 z"]
    # Stripping takes Unicode whitespace (not U+001C, which Python's isspace would).
    cases += [s.encode() for s in ["<|user|>\u00a0hi", "x\u3000<|end|>", "<|user|>\u2028\u0085 hi",
                                   "<|user|>\x1c hi", "a \u2003\t<|end|>\u202f\u205fb"]]
    problems = []
    for add_special in (False, True):
        for parse_special in (True, False):
            ours = _ours(pagoda_bin, tmp_path, cases, add_special, parse_special)
            want = _reference(ref, cases, add_special, parse_special)
            d = _first_diff(cases, ours, want)
            if d:
                problems.append(f"add_special={add_special} parse_special={parse_special}: {d}")
    assert not problems, "\n".join(problems)
