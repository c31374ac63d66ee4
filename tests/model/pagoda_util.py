"""Paths and helpers for the Python tests that drive build/pagoda."""
import hashlib
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
    generate on `model` (a torch model holding the reference weights) with the folder's
    tokenizer. Returns (pagoda's text, transformers' text)."""
    import torch
    from transformers import AutoTokenizer
    out = run_pagoda("run", "-m", folder, "-p", prompt, "--temperature", "0", "-n", n).stdout
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        ref = model.generate(ids, max_new_tokens=n, do_sample=False)
    return out, tok.decode(ref[0, ids.shape[1]:])
