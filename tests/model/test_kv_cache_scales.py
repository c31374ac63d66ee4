"""Calibrated FP8 KV-cache scales in a checkpoint folder (compressed-tensors
kv_cache_scheme: model.layers.N.self_attn.k_scale / v_scale).

scripts/hf_kv_scales.py computes the scales with transformers (amax of each layer's keys
after RoPE and values over calibration text, / 448) and writes them as llm-compressor
does. Pagoda reads them for its CUDA FP8 cache (the KL divergence they buy is measured on
the GPU: bench/RESULTS.md); here, on the CPU:
  - the folder loads, and its logits are the 16-bit folder's (the scales touch only an FP8
    cache, which the CPU does not have);
  - schemes Pagoda cannot honour, and missing or invalid scales, are refused by name.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from pagoda_util import all_logits, ROOT, run_pagoda

SCRIPT = os.path.join(ROOT, "scripts", "hf_kv_scales.py")
SRC = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct-hf")
TOKENS = [1, 504, 3458, 282, 4649, 314, 7042, 30, 378, 2]


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    out = tmp_path_factory.mktemp("kv") / "smollm2-kv"
    proc = subprocess.run([sys.executable, SCRIPT, SRC, str(out), "--samples", "4",
                           "--seq-len", "128"], check=True, capture_output=True, text=True)
    return {"dir": str(out), "scales": json.loads(proc.stdout.strip().splitlines()[-1])}


def test_scales_are_plausible(scaled):
    # Keys after RoPE and values of a real model: positive, far from E4M3's 448 at 1.0.
    for which in ("k_scale", "v_scale"):
        s = np.array(scaled["scales"][which])
        assert len(s) == 30 and (s > 0).all() and (s < 1).all(), (which, s)


def test_cpu_logits_unchanged(scaled):
    a = all_logits(scaled["dir"], TOKENS)
    b = all_logits(SRC, TOKENS)
    np.testing.assert_array_equal(a, b)


def edited(scaled, tmp_path, scheme=None, tensors=None):
    out = tmp_path / "edited"
    shutil.copytree(scaled["dir"], out)
    if scheme is not None:
        cfg = json.loads((out / "config.json").read_text())
        cfg["quantization_config"]["kv_cache_scheme"].update(scheme)
        (out / "config.json").write_text(json.dumps(cfg))
    if tensors is not None:
        t = load_file(str(out / "model.safetensors"))
        tensors(t)
        save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
    return str(out)


@pytest.mark.parametrize("scheme,named", [
    ({"type": "int"}, "kv_cache_scheme: 8-bit int"),
    ({"num_bits": 4}, "kv_cache_scheme: 4-bit float"),
    ({"strategy": "channel"}, "strategy channel"),
    ({"dynamic": True}, "dynamic scales"),
    ({"symmetric": False}, "asymmetric"),
])
def test_unsupported_schemes_are_refused(scaled, tmp_path, scheme, named):
    proc = run_pagoda("run", "-m", edited(scaled, tmp_path, scheme=scheme), "-p", "Hi", "-n", 1,
                      check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr


def test_missing_and_invalid_scales_are_refused(scaled, tmp_path):
    gone = edited(scaled, tmp_path,
                  tensors=lambda t: t.pop("model.layers.7.self_attn.v_scale"))
    proc = run_pagoda("run", "-m", gone, "-p", "Hi", "-n", 1, check=False)
    assert proc.returncode != 0 and "model.layers.7.self_attn.v_scale" in proc.stderr, proc.stderr
    shutil.rmtree(gone)

    def negative(t):
        t["model.layers.3.self_attn.k_scale"] = np.array([-0.5], np.float32)
    proc = run_pagoda("run", "-m", edited(scaled, tmp_path, tensors=negative), "-p", "Hi", "-n",
                      1, check=False)
    assert proc.returncode != 0 and "positive and finite" in proc.stderr, proc.stderr


def test_pagoda_quantize_calibrates_the_same_scales(scaled, tmp_path):
    # Pagoda's own calibration (its CPU forward, the same chunks) against transformers'.
    out = tmp_path / "fp8kv"
    run_pagoda("quantize", SRC, out, "fp8", "--kv-cache-scales", "--samples", 4, "--seq-len", 128)
    cfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert cfg["kv_cache_scheme"]["type"] == "float" and cfg["kv_cache_scheme"]["num_bits"] == 8
    from safetensors import safe_open
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        for which in ("k_scale", "v_scale"):
            ours = np.array([float(f.get_tensor(f"model.layers.{l}.self_attn.{which}")[0])
                             for l in range(30)])
            ref = np.array(scaled["scales"][which])
            ratio = ours / ref
            print(which, ratio.min(), ratio.max())
            # Measured within 0.11% (float32 sums in a different order).
            assert np.abs(ratio - 1).max() < 5e-3, (which, ratio)
    assert "Paris" in run_pagoda("run", "-m", out, "-p", "The capital of France is",
                                 "--temperature", 0, "-n", 4).stdout


@pytest.mark.parametrize("args,named", [
    (["gptq"], "gptq folder has no place"),
    (["nf4"], "nf4 folder has no place"),
])
def test_kv_cache_scales_flag_refusals(tmp_path, args, named):
    proc = run_pagoda("quantize", SRC, tmp_path / "o", *args, "--kv-cache-scales", check=False)
    assert proc.returncode != 0 and named in proc.stderr, proc.stderr


def test_kv_cache_scales_flag_refused_for_gguf(tmp_path):
    gguf = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F16.gguf")
    proc = run_pagoda("quantize", gguf, tmp_path / "o.gguf", "Q8_0", "--kv-cache-scales",
                      check=False)
    assert proc.returncode != 0 and "--kv-cache-scales applies to the folder" in proc.stderr, \
        proc.stderr
