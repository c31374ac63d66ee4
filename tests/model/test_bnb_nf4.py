"""bitsandbytes NF4 checkpoints against bitsandbytes and transformers.

scripts/hf_bnb_nf4.py makes the folders from models/SmolLM2-135M-Instruct-hf with
transformers' BitsAndBytesConfig on the CPU (bitsandbytes' own quantize_4bit packs them)
and save_pretrained: nf4 (f32 absmax per 64), nf4_dq (double quantization) and fp4.
Then:
  - every matrix Pagoda loads (`pagoda info --dequantize`, the converted NF4 blocks)
    is bitsandbytes.functional.dequantize_4bit of that layer within the rounding Pagoda's
    NF4 block adds: the code book as int8 (round(127 c): at most 0.4663/127 of the
    block's absmax) and d = absmax / 127 as f16 (2^-11 relative; 2^-25 absolute on the
    step below f16's normal range);
    Measured over 7 matrices (3.5M weights): max 0.38% and RMS 0.23% of the block's absmax,
    with and without double quantization;
  - Pagoda's logits agree with transformers (float32) running those dequantized weights
    (KL divergence printed), and greedy text starts the same;
  - FP4, LLM.int8, other block sizes and quant storage are refused by name.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pagoda_util import (compare_logits, greedy_texts, plan_and_loaded_weight_bytes,
                         reference, ROOT, run_pagoda)

import bitsandbytes.functional as bnbf  # noqa: E402  (scripts/setup.sh installs it)
import torch  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "hf_bnb_nf4.py")
SRC = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct-hf")
SCHEMES = ["nf4", "nf4_dq"]
MATRICES = ["blk.0.attn_q.weight", "blk.3.attn_k.weight", "blk.7.ffn_down.weight",
            "blk.29.ffn_gate.weight", "blk.12.attn_output.weight", "blk.20.ffn_up.weight",
            "blk.5.attn_v.weight"]
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
      "attn_output": "self_attn.o_proj", "ffn_down": "mlp.down_proj",
      "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj"}
TABLE_ROUNDING = 0.4663 / 127  # max |127 c - round(127 c)| / 127 over NF4's code book
# 1.5x the largest measured over 2 x 24 random ids (AVX-512 host): logits 8.7e-2 of the
# range, mean KLD 0.040 (nf4_dq; nf4 0.031). Both include Pagoda's int8 activations per
# 32 (the Q8_0 path NF4 runs through), which transformers' float32 reference does not have:
# the weight rounding alone (transformers on Pagoda's dequantized NF4 blocks against on
# bitsandbytes' dequantization) measured KLD 0.004-0.005 on the same ids (nf4).
LOGIT_BOUND = 0.13
KLD_BOUND = 0.06


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = tmp_path_factory.mktemp("bnb")
    subprocess.run([sys.executable, SCRIPT, SRC, str(out), *SCHEMES, "fp4", "nf4_skip"],
                   check=True, capture_output=True, text=True)
    return {s: str(out / s) for s in SCHEMES + ["fp4", "nf4_skip"]}


def bnb_weight(folder, module):
    """bitsandbytes' own dequantize_4bit of one layer from the folder's tensors, in float32
    (the quant state's dtype set to float32 so the result is not rounded to f16)."""
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        sd = {k[len(module) + 1:]: f.get_tensor(k) for k in f.keys()
              if k.startswith(module + ".")}
    packed = sd.pop("weight")
    key = "weight.quant_state.bitsandbytes__nf4"
    qs = json.loads(bytes(sd.pop(key).numpy()).decode())
    qs["dtype"] = "float32"
    qs = {**{k.split(".")[-1]: v for k, v in sd.items()}, **qs}
    state = bnbf.QuantState.from_dict(qs, device=torch.device("cpu"))
    return bnbf.dequantize_4bit(packed, state).float()


def dequantized_model(folder):
    """transformers (float32) running the dense model with every quantized Linear's weight
    replaced by bitsandbytes' dequantization of it."""
    from transformers import AutoModelForCausalLM
    from safetensors import safe_open
    m = AutoModelForCausalLM.from_pretrained(SRC, dtype=torch.float32).eval()
    params = dict(m.named_parameters())
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        for k in f.keys():  # the folder's own 16-bit tensors (embedding, norms, skipped)
            if k in params and f.get_slice(k).get_dtype() in ("BF16", "F16", "F32"):
                params[k].data.copy_(f.get_tensor(k).float())
        quantized = {k[: -len(".weight.absmax")] for k in f.keys() if k.endswith(".absmax")}
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear) and name in quantized:
            mod.weight.data.copy_(bnb_weight(folder, name))
    return m


def pagoda_weight(folder, gguf, tmp_path):
    out = tmp_path / (gguf + ".f32")
    r = run_pagoda("info", "-m", folder, "--dequantize", gguf, "--out", str(out))
    return r.stdout.split()[1], np.fromfile(out, np.float32)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_weights_equal_bitsandbytes_dequantize(folders, scheme, tmp_path):
    worst, sq, count = 0.0, 0.0, 0
    for name in MATRICES:
        _, layer, kind, _ = name.split(".")
        ref = bnb_weight(folders[scheme], f"model.layers.{layer}.{HF[kind]}").numpy()
        got, ours = pagoda_weight(folders[scheme], name, tmp_path)
        assert got == "NF4"
        ours = ours.reshape(ref.shape)
        # Each block's absmax is its largest |w| (that weight's code is +-1).
        blocks = ref.reshape(-1, 64)
        absmax = np.abs(blocks).max(1, keepdims=True)
        err = np.abs(ours.reshape(-1, 64) - blocks)
        bound = absmax * (TABLE_ROUNDING + 2.0**-11) + 127 * 2.0**-25 + 1e-7
        assert (err <= bound).all(), f"{name}: worst excess {(err - bound).max():.3g}"
        rel = err / np.maximum(absmax, 1e-30)
        worst = max(worst, rel.max())
        sq += (rel**2).sum()
        count += rel.size
    print(f"{scheme}: |pagoda - bitsandbytes| / block absmax over {count} weights: "
          f"max {worst:.4g}, rms {np.sqrt(sq / count):.4g}")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_logits_agree_with_transformers(folders, scheme):
    for f in compare_logits(folders[scheme], reference(dequantized_model, folders[scheme])):
        print(f"{scheme}: max |pagoda - transformers| = {f['max_abs']:.3g}, "
              f"{f['err']:.3g} of the range, KLD {f['kld']:.3g}, argmax agrees {f['agree']:.2f}")
        assert f["err"] < LOGIT_BOUND
        assert f["kld"] < KLD_BOUND
        assert f["agree"] >= 0.75


@pytest.mark.parametrize("scheme", SCHEMES)
def test_greedy_text_starts_the_same(folders, scheme):
    out, ref_text = greedy_texts(folders[scheme], reference(dequantized_model, folders[scheme]))
    print(f"{scheme}: pagoda {out!r}, transformers {ref_text!r}")
    # The first tokens are the same (later ones may part where two logits are close).
    assert out.split()[:2] == ref_text.split()[:2]


def test_bytes_and_plan(folders):
    out = run_pagoda("info", "-m", folders["nf4"], "--tensors").stdout
    assert " NF4 " in out
    plan = run_pagoda("plan", "-m", folders["nf4"], "--device", "cpu").stdout
    print(plan)
    assert "nf4" in plan.lower()


def test_fp4_is_refused_by_name(folders):
    r = run_pagoda("info", "-m", folders["fp4"], check=False)
    assert r.returncode != 0
    assert "'fp4' is not supported" in r.stderr, r.stderr


def edited(folders, tmp_path, edit):
    folder = tmp_path / "edited"
    shutil.copytree(folders["nf4"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg["quantization_config"])
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


@pytest.mark.parametrize("edit,named", [
    (lambda q: q.update(load_in_8bit=True, _load_in_8bit=True, load_in_4bit=False,
                        _load_in_4bit=False), "load_in_8bit (LLM.int8"),
    (lambda q: q.update(bnb_4bit_quant_storage="bfloat16"), "bnb_4bit_quant_storage 'bfloat16'"),
    (lambda q: q.update(bnb_4bit_compute_dtype="float8_e4m3fn"), "float8_e4m3fn"),
    (lambda q: q.update(bnb_4bit_use_double_quant=True), "bnb_4bit_use_double_quant is set"),
    (lambda q: q.update(quant_method="hqq"), "'hqq' is not supported"),
])
def test_unsupported_configs_are_refused_by_name(folders, tmp_path, edit, named):
    r = run_pagoda("info", "-m", edited(folders, tmp_path, edit), check=False)
    assert r.returncode != 0
    assert named in r.stderr, r.stderr


def test_odd_blocksize_is_refused_by_name(folders, tmp_path):
    from safetensors.torch import load_file, save_file
    folder = tmp_path / "bs48"
    shutil.copytree(folders["nf4"], folder)
    path = folder / "model.safetensors"
    sd = load_file(path)
    key = "model.layers.0.self_attn.q_proj.weight.quant_state.bitsandbytes__nf4"
    qs = json.loads(bytes(sd[key].numpy()).decode())
    qs["blocksize"] = 48
    sd[key] = torch.tensor(list(json.dumps(qs).encode()), dtype=torch.uint8)
    save_file(sd, path, metadata={"format": "pt"})
    r = run_pagoda("info", "-m", folder, check=False)
    assert r.returncode != 0
    assert "blocksize 48 is not a multiple of 32" in r.stderr, r.stderr


def test_skip_modules_load_as_16_bit(folders):
    # transformers left every o_proj float16 (llm_int8_skip_modules); Pagoda reads them
    # as such and the rest as NF4, and runs the mix as transformers does.
    out = run_pagoda("info", "-m", folders["nf4_skip"], "--tensors").stdout
    lines = [ln for ln in out.splitlines() if "layers.4." in ln]
    assert any("o_proj" in ln and " F16 " in ln for ln in lines), out
    assert any("q_proj" in ln and " NF4 " in ln for ln in lines), out
    [f] = compare_logits(folders["nf4_skip"], dequantized_model(folders["nf4_skip"]), seeds=(7,))
    print(f"nf4_skip: {f['err']:.3g} of the range, KLD {f['kld']:.3g}")
    assert f["err"] < LOGIT_BOUND and f["kld"] < KLD_BOUND


def test_skip_modules_with_quantized_tensors_are_refused(folders, tmp_path):
    # A module llm_int8_skip_modules names must not hold quantized tensors.
    folder = edited(folders, tmp_path, lambda q: q.update(llm_int8_skip_modules=["o_proj"]))
    r = run_pagoda("info", "-m", folder, check=False)
    assert r.returncode != 0
    assert "self_attn.o_proj" in r.stderr, r.stderr
    assert "dtype U8" in r.stderr or "leaves it unquantized" in r.stderr, r.stderr


PLUGIN = os.path.join(ROOT, "build", "libpagoda_cuda.so")


@pytest.mark.skipif(not os.path.exists(PLUGIN), reason="built without CUDA")
def test_cuda_greedy_text_starts_the_same(folders, tmp_path):
    # The CUDA loader stores NF4 as Q8_0 with the same values (convert_blocks.h).
    prompt = "The capital of France is"
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"id": "a", "prompt": prompt, "max_tokens": 8,
                               "temperature": 0}) + "\n")
    r = run_pagoda("generate", "-m", folders["nf4_dq"], "--input", inp, "--quiet",
                   "--device", "cuda", "--kv-cache-memory", "64MiB", check=False)
    if r.returncode != 0:
        assert "cuda" in r.stderr.lower(), r.stderr
        pytest.skip("no usable GPU: " + r.stderr.strip().splitlines()[-1])
    out = json.loads(r.stdout.splitlines()[0])["text"]
    ref_text = reference(dequantized_model, folders["nf4_dq"]).greedy_text(prompt, 8)
    print(f"cuda nf4_dq: pagoda {out!r}, transformers {ref_text!r}")
    assert out.split()[:2] == ref_text.split()[:2]


@pytest.mark.parametrize("name", ["nf4", "nf4_dq"])
def test_plan_counts_the_loaded_bytes(folders, name):
    # `pagoda plan` counts each layer as the type it converts to; the issue asks for 2%.
    # Measured: equal to the byte on the CPU, and on an H100 (bench/RESULTS.md).
    planned, loaded = plan_and_loaded_weight_bytes(str(folders[name]))
    assert abs(planned - loaded) <= 0.02 * loaded, (planned, loaded)
