"""Paths and helpers for the Python tests that drive build/pagoda."""
import functools
import hashlib
import importlib.util
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.normpath(os.path.join(ROOT, "..", "shared"))
MODELS = os.path.join(ROOT, "models")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
PAGODA = os.environ.get("PAGODA_BIN", os.path.join(ROOT, "build", "pagoda"))


def run_pagoda(*args, check=True, timeout=600, input=None, env_extra=None):
    """Runs build/pagoda with args (and env_extra added to the environment); returns the
    CompletedProcess (text mode)."""
    env = {**os.environ, **env_extra} if env_extra else None
    proc = subprocess.run([PAGODA, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, input=input, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"pagoda {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stderr}")
    return proc


def pagoda_json(*args, **kw):
    return json.loads(run_pagoda(*args, **kw).stdout)


_sha_cache = {}


def sha256(path):
    if path not in _sha_cache:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _sha_cache[path] = h.hexdigest()
    return _sha_cache[path]


def model_path(rel):
    """A model the setup script provides; a clear failure when it is missing."""
    path = os.path.normpath(os.path.join(ROOT, rel))
    if not os.path.exists(path):
        pytest.fail(f"{path} is missing: run scripts/setup.sh (or scripts/fetch_models.sh)")
    return path


def all_logits(model, tokens):
    """Every position's full logits, [len(tokens), n_vocab] as numpy float32, from
    `pagoda logits --all`."""
    import numpy as np
    out = json.loads(run_pagoda("logits", "-m", model, "--tokens", " ".join(map(str, tokens)),
                                "--all", "--json", "--top", 1 << 20).stdout)
    rows = np.zeros((len(out["logits"]), out["n_vocab"]), np.float32)
    for r, row in enumerate(out["logits"]):
        rows[r, row["ids"]] = row["values"]
    return rows


def plan_and_loaded_weight_bytes(model):
    """`pagoda plan`'s weight bytes for the CPU beside what the CPU backend holds once the
    model is loaded (`pagoda bench --json`'s weight_bytes, the loaded matrices' own count)."""
    plan = pagoda_json("plan", "-m", model, "--json", "--device", "cpu", "--device-memory",
                       "4GiB")
    loaded = pagoda_json("bench", "-m", model, "-p", 4, "-n", 1, "-r", 1, "-t", 2, "--json")
    return plan["weight_bytes"], loaded["weight_bytes"]


def greedy_texts(folder, model, prompt="The capital of France is", n=8):
    """Greedy continuations of `prompt`: `pagoda run` on `folder`, and transformers'
    generate on `model` (a torch model holding the reference weights, or a Reference of
    one) with the folder's tokenizer. Returns (pagoda's text, transformers' text)."""
    out = run_pagoda("run", "-m", folder, "-p", prompt, "--temperature", "0", "-n", n).stdout
    if isinstance(model, Reference):
        assert model.folder == str(folder), (model.folder, folder)
        return out, model.greedy_text(prompt, n)
    return out, torch_greedy_text(model, folder, prompt, n)


# Comparing Pagoda with an independent torch reference. The checkpoint tests
# (test_awq_gptq, test_bnb_nf4, test_compressed_tensors, test_fp8_checkpoint, ...) all
# measure the same figures on the same random ids; each keeps its own bounds.

SMOL_HF = "models/SmolLM2-135M-Instruct-hf"
SEEDS = (5, 6)  # the random-id sequences the logit comparisons use
N_IDS = 24
GREEDY_PROMPT = "The capital of France is"
GREEDY_TOKENS = 8


def random_ids(seed, n=N_IDS, vocab=49152):
    import numpy as np
    return np.random.default_rng(seed).integers(0, vocab, n).tolist()


def kld(ref, ours):
    """Mean over positions of KL(softmax(ref) || softmax(ours)) in nats, from two
    [positions, vocab] logit arrays, in float64."""
    import torch
    lr = torch.log_softmax(torch.as_tensor(ref, dtype=torch.float64), -1)
    lq = torch.log_softmax(torch.as_tensor(ours, dtype=torch.float64), -1)
    return float((lr.exp() * (lr - lq)).sum(-1).mean())


def torch_logits(model, tokens):
    """A transformers model's logits at every position of `tokens`, numpy float32."""
    import torch
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].float().numpy()


def torch_greedy_text(model, folder, prompt=GREEDY_PROMPT, n=GREEDY_TOKENS):
    """transformers' greedy continuation of `prompt` by `model`, with `folder`'s tokenizer."""
    import torch
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=n, do_sample=False)
    return tok.decode(ref[0, ids.shape[1]:])


class Reference:
    """The torch model `build(folder)` (an independent reading of the folder), asked for
    logits and greedy text. Its answers are kept: a file's logit and greedy-text tests
    ask the same model, and building one (dequantizing 210 layers into a float32
    SmolLM2) costs more than asking it. When built, it answers the questions every
    checkpoint test asks (logits on random_ids(s) for s in SEEDS, the greedy continuation
    of GREEDY_PROMPT) at once; the model itself is kept only until another is built
    (0.6 GB each). Make one with reference(build, folder)."""

    _last = (None, None)  # (Reference, model): the one model held

    def __init__(self, build, folder):
        self.build, self.folder = build, str(folder)
        self._answers = {}

    def model(self):
        if Reference._last[0] is not self:
            Reference._last = (None, None)  # drop the old model before building
            m = self.build(self.folder)
            Reference._last = (self, m)
            for seed in SEEDS:
                self._ask(("logits", tuple(random_ids(seed))), m)
            if os.path.exists(os.path.join(self.folder, "tokenizer.json")):
                self._ask(("greedy", GREEDY_PROMPT, GREEDY_TOKENS), m)
        return Reference._last[1]

    def _ask(self, key, m):
        if key not in self._answers:
            if key[0] == "logits":
                self._answers[key] = torch_logits(m, list(key[1]))
            else:
                self._answers[key] = torch_greedy_text(m, self.folder, key[1], key[2])
        return self._answers[key]

    def _answer(self, key):
        return self._answers[key] if key in self._answers else self._ask(key, self.model())

    def logits(self, tokens):
        return self._answer(("logits", tuple(tokens)))

    def greedy_text(self, prompt=GREEDY_PROMPT, n=GREEDY_TOKENS):
        return self._answer(("greedy", prompt, n))


_references = {}


def reference(build, folder):
    """The Reference for `build(folder)`, one per (build, folder) in the session."""
    key = (build, str(folder))
    if key not in _references:
        _references[key] = Reference(build, folder)
    return _references[key]


def release_references():
    """Drops the reference model held and every answer kept (conftest calls it after each
    test module: the folders they stand for are the module's)."""
    Reference._last = (None, None)
    _references.clear()


def compare_logits(folder, ref, seeds=SEEDS, n=N_IDS, vocab=49152):
    """Pagoda's logits at every position of `folder` against `ref`'s (a Reference or a
    torch model) on random_ids(seed, n, vocab) for each seed. Returns one dict a seed:
    err (max |pagoda - ref| over the range of ref's logits), max_abs (max |pagoda - ref|),
    kld (mean KL(ref || pagoda), nats) and agree (share of positions with the same
    argmax). The caller asserts its own bounds on them."""
    import numpy as np
    figures = []
    for seed in seeds:
        tokens = random_ids(seed, n, vocab)
        want = ref.logits(tokens) if isinstance(ref, Reference) else torch_logits(ref, tokens)
        ours = all_logits(folder, tokens)
        diff = np.abs(ours - want).max()
        figures.append({"seed": seed, "err": float(diff / (want.max() - want.min())),
                        "max_abs": float(diff), "kld": kld(want, ours),
                        "agree": float((ours.argmax(1) == want.argmax(1)).mean())})
    return figures


@functools.lru_cache(maxsize=None)
def awq_packing_utils():
    """AutoAWQ's awq/utils/packing_utils.py (torch only), loaded by path (once)."""
    root = importlib.util.find_spec("awq").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location(
        "awq_packing_utils", os.path.join(root, "utils", "packing_utils.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


# `pagoda quantize FOLDER OUT scheme` tests (test_awq_quantize, test_gptq_quantize): the
# folder they quantize, the text they calibrate on and measure with.

CALIBRATION_TEXT = os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt")


def quantize_folder(tmp_path_factory, name, scheme, *flags):
    """`pagoda quantize` of the SmolLM2 folder into a fresh folder `name`; returns
    (its path, pagoda's stderr)."""
    out = tmp_path_factory.mktemp(name) / name
    r = run_pagoda("quantize", model_path(SMOL_HF), out, scheme, *flags)
    return str(out), r.stderr


@functools.lru_cache(maxsize=None)
def _eval_ids():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_path(SMOL_HF))
    return tok(open(CALIBRATION_TEXT).read()[-8000:], return_tensors="pt").input_ids[:, :256]


def eval_ids():
    """256 tokens from the end of the calibration text, far from the calibration chunks at
    its start: [1, 256] int64."""
    return _eval_ids().clone()


def log_probs(model, ids):
    import torch
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits[0].float(), -1)


def kld_of_log_probs(lr, lq):
    """Mean over positions of KL(p_r || p_q) from two [positions, vocab] log-prob tensors."""
    return (lr.exp() * (lr - lq)).sum(-1).mean().item()
