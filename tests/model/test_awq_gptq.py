"""AWQ and GPTQ checkpoints against the formats' own readers.

scripts/hf_awq_gptq.py writes one folder per variant from models/SmolLM2-135M-Instruct-hf
(round-to-nearest codes; AWQ packed by AutoAWQ's WQLinear_GEMM.from_linear, GPTQ packed in
the documented layout). The reference dequantization of each layer is the packages' own
reading of the folder's tensors: AutoAWQ's packing_utils.dequantize_gemm, and GPTQModel's
unpack_rows / unpack_cols / v1 zero correction (gptqmodel/utils/model_dequant.py, as its
convert_gptq_file uses them). Then:
  - that reference is within one scale step of the original weights (the packer and the
    reader agree on the bit order);
  - every matrix Pagoda loads (`pagoda info --dequantize`) equals the reference: exactly for
    Q4_G64/Q4_G128 (the checkpoint's groups as they are) and exact Q8_0, up to the f16
    rounding of m = -s z for Q4_1, within half a Q8_0 step for the requantized layers;
  - Pagoda's logits agree with transformers (float32) running the reference weights
    (KL divergence printed); greedy text starts the same;
  - unsupported configs and corrupt tensors are refused by name.
"""
import ast
import functools
import json
import os
import shutil
import types

import numpy as np
import pytest
import torch

from pagoda_util import (awq_packing_utils, compare_logits, greedy_texts,
                         plan_and_loaded_weight_bytes, reference, ROOT, run_pagoda)

SRC = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct-hf")
GPTQ_REF = os.path.join(ROOT, ".venv", "share", "pagoda-ref", "gptqmodel-7.7.0", "gptqmodel",
                        "utils")
# variant -> (types Pagoda stores its quantized matrices as, logit bound as a fraction of
# the reference logits' range, KL bound in nats). Bounds are about 1.5x the largest
# measured over 2 x 24 random ids (x86-64 AVX2). Most of the gap is the backends' int8
# activations (a Q4/Q8 row multiplies int8 activations per 32-block): the gptq4_sym
# reference weights as a dense F32 folder give KLD 1e-5 against transformers, as the exact
# Q4_0 of the same weights 0.012; exact Q8_0 rows (gptq8_sym) measure 0.034.
# Group 128 on SmolLM2's 576-column rows ends in a group of 64: those rows are Q4_G64, the
# 1536-column ones Q4_G128.
G = {"Q4_G64", "Q4_G128"}
VARIANTS = {
    "awq_g64": ({"Q4_G64"}, 0.1, 0.045),
    "gptq4_sym": (G, 0.1, 0.02),
    "gptq4_asym": (G, 0.1, 0.02),
    "gptq4_asym_v2": (G, 0.1, 0.02),
    "gptq4_channel": (G, 0.1, 0.02),
    "gptq8_sym": ({"Q8_0"}, 0.1, 0.05),
    "gptq8_asym": ({"Q8_0"}, 0.12, 0.065),
    "gptq4_act": ({"Q8_0"}, 0.1, 0.02),
    "gptq4_act_blocks": ({"Q4_1"}, 0.1, 0.02),
}
REQUANTIZED = {"gptq8_asym", "gptq4_act"}
MATRICES = ["blk.0.attn_q.weight", "blk.3.attn_k.weight", "blk.7.ffn_down.weight",
            "blk.29.ffn_gate.weight", "blk.12.attn_output.weight"]
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_output":
      "self_attn.o_proj", "ffn_down": "mlp.down_proj", "ffn_gate": "mlp.gate_proj"}


@pytest.fixture(scope="module")
def folders(awq_gptq_folders):
    # conftest's session fixture writes each folder once (test_awq_quantize uses awq_g64).
    return awq_gptq_folders(*VARIANTS)


@functools.lru_cache(maxsize=None)
def gptqmodel_unpack():
    """GPTQModel's unpacking functions, taken from its model_dequant.py by name (the
    module's own imports pull in the whole package)."""
    wanted = {"unpack_rows", "unpack_cols", "pack_cols", "_shift_gptq_qzeros",
              "_correct_gptq_v1_qzeros", "_uses_gptq_v1_qzeros"}
    tree = ast.parse(open(os.path.join(GPTQ_REF, "model_dequant.py")).read())
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {f.name for f in funcs} == wanted
    planar = ast.parse(open(os.path.join(GPTQ_REF, "planar_packing.py")).read())
    bits = [n for n in planar.body if isinstance(n, ast.AnnAssign)
            and getattr(n.target, "id", "") == "PLANAR_BITS"]
    ns = {"torch": torch, "Tuple": tuple}
    exec(compile(ast.Module(body=bits + funcs, type_ignores=[]), "model_dequant", "exec"), ns)
    return types.SimpleNamespace(**{k: ns[k] for k in wanted})


def layer_tensors(folder, module):
    from safetensors import safe_open
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        return {k[len(module) + 1:]: f.get_tensor(k) for k in f.keys()
                if k.startswith(module + ".")}


def reference_weight(folder, module):
    """(weight [out, in] float32, scale of each weight [out, in]) by the packages' own
    reading, or None for a layer the folder keeps 16-bit."""
    qc = json.load(open(os.path.join(folder, "config.json")))["quantization_config"]
    t = layer_tensors(folder, module)
    if "qweight" not in t:
        return None
    scales = t["scales"].float()
    if qc["quant_method"] == "awq":
        w = awq_packing_utils().dequantize_gemm(t["qweight"], t["qzeros"], scales, 4,
                                                qc["group_size"])
        g_idx = torch.arange(w.shape[0]) // qc["group_size"]
    else:
        g = gptqmodel_unpack()
        bits, qzeros = qc["bits"], t["qzeros"]
        if g._uses_gptq_v1_qzeros(qc):
            qzeros = g._correct_gptq_v1_qzeros(qzeros, bits)
        q = g.unpack_rows(t["qweight"], bits).float()
        z = g.unpack_cols(qzeros, bits).float()
        g_idx = t["g_idx"].long()
        w = (q - z[g_idx]) * scales[g_idx]
    return w.T.contiguous(), scales[g_idx].T.contiguous()


def original_weight(module):
    from safetensors import safe_open
    with safe_open(os.path.join(SRC, "model.safetensors"), "pt") as f:
        return f.get_tensor(module + ".weight").float()


def reference_model(folder):
    """transformers (float32) running the dense model with each quantized layer's weight
    replaced by the reference dequantization."""
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(SRC, dtype=torch.float32).eval()
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            ref = reference_weight(folder, name)
            if ref is not None:
                mod.weight.data.copy_(ref[0])
    return m


def pagoda_weight(folder, gguf, tmp_path):
    out = tmp_path / (gguf + ".f32")
    r = run_pagoda("info", "-m", folder, "--dequantize", gguf, "--out", str(out))
    return r.stdout.split()[1], np.fromfile(out, np.float32)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_weights_equal_the_reference_dequantization(folders, variant, tmp_path):
    for name in MATRICES:
        _, layer, kind, _ = name.split(".")
        module = f"model.layers.{layer}.{HF[kind]}"
        got_type, ours = pagoda_weight(folders[variant], name, tmp_path)
        ref = reference_weight(folders[variant], module)
        if ref is None:  # AWQ's modules_to_not_convert: the 16-bit weight as it is
            assert got_type in ("F16", "BF16", "F32")
            assert (ours.reshape(-1) == original_weight(module).numpy().reshape(-1)).all()
            continue
        w, s = ref[0].numpy(), ref[1].numpy()
        # The packer and the reader agree: round-to-nearest is within one step (half a
        # step, plus half where the zero point's rounding clamps the group's edge).
        orig = original_weight(module).numpy()
        assert (np.abs(w - orig) <= 1.001 * s + 1e-6).all(), f"{variant} {module}"
        assert got_type in VARIANTS[variant][0]
        ours = ours.reshape(w.shape)
        err = np.abs(ours - w)
        if got_type == "Q4_1":
            tol = 2.0**-10 * np.abs(w).max()  # m = -s z in f16: 2^-11 |m|, |m| <= 2 max|w|
        elif variant in REQUANTIZED:
            amax = np.abs(w.reshape(w.shape[0], -1, 32)).max(axis=2, keepdims=True)
            tol = np.broadcast_to(0.5 * 1.01 * amax / 127, (w.shape[0], w.shape[1] // 32, 32))
            tol = tol.reshape(w.shape)
            rel = np.sqrt((err**2).mean() / (w**2).mean())
            step = np.sqrt(((w - orig) ** 2).mean() / (w**2).mean())
            print(f"{variant} {name}: requantized Q8_0 RMS error {rel:.3g} of RMS weight "
                  f"(the {variant} codes' own RMS error: {step:.3g})")
        else:
            tol = 0
        print(f"{variant} {name}: {got_type}, max |pagoda - reference| = {err.max():.3g}")
        assert (err <= tol).all()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logits_agree_with_transformers(folders, variant):
    ref = reference(reference_model, folders[variant])
    for f in compare_logits(folders[variant], ref):
        print(f"{variant}: max |pagoda - transformers| {f['err']:.3g} of the range, "
              f"KLD {f['kld']:.3g}, argmax agrees {f['agree']:.2f}")
        assert f["err"] < VARIANTS[variant][1]
        assert f["kld"] < VARIANTS[variant][2]
        assert f["agree"] >= 0.6  # measured 0.67 at the lowest (4-bit on random ids)


@pytest.mark.parametrize("variant", ["awq_g64", "gptq4_sym", "gptq8_sym", "gptq4_act"])
def test_greedy_text_is_sensible(folders, variant):
    out, ref_text = greedy_texts(folders[variant], reference(reference_model, folders[variant]))
    print(f"{variant}: pagoda {out!r}, transformers {ref_text!r}")
    assert out.split()[:2] == ref_text.split()[:2]


def edited(folder, tmp_path, edit):
    dst = tmp_path / "edited"
    shutil.copytree(folder, dst)
    cfg = json.loads((dst / "config.json").read_text())
    edit(cfg["quantization_config"])
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("variant,edit,named", [
    ("awq_g64", lambda q: q.update(version="gemv"), "gemv"),
    ("awq_g64", lambda q: q.update(version="marlin"), "marlin"),
    ("awq_g64", lambda q: q.update(zero_point=False), "zero_point false"),
    ("awq_g64", lambda q: q.update(bits=8), "bits 8"),
    ("awq_g64", lambda q: q.update(modules_to_not_convert=["mlp"]), "modules_to_not_convert"),
    ("gptq4_asym", lambda q: q.update(bits=3), "bits 3"),
    ("gptq4_asym", lambda q: q.update(bits=2), "bits 2"),
    ("gptq4_asym", lambda q: q.update(lm_head=True), "lm_head"),
    ("gptq4_asym", lambda q: q.update(checkpoint_format="marlin"), "marlin"),
    ("gptq4_asym", lambda q: q.update(dynamic={r"-:.*down": {}}), "dynamic"),
    ("gptq4_asym", lambda q: q.update(pack_dtype="int16"), "pack_dtype"),
    ("gptq4_asym", lambda q: q.update(some_new_option=True), "some_new_option"),
    ("gptq4_asym", lambda q: q.update(group_size=64), "scales"),
    ("gptq4_asym", lambda q: q.update(quant_method="bitsandbytes"), "bitsandbytes"),
])
def test_unsupported_configs_are_refused_by_name(folders, tmp_path, variant, edit, named):
    r = run_pagoda("info", "-m", edited(folders[variant], tmp_path, edit), check=False)
    assert r.returncode != 0
    assert named in r.stderr, r.stderr


@pytest.mark.parametrize("variant,param,change,named", [
    ("gptq4_asym", "scales", lambda t: t[:, :-8], "scales"),
    ("gptq4_asym", "qzeros", lambda t: t[:-1], "qzeros"),
    ("gptq4_asym", "g_idx", lambda t: t + 5, "g_idx"),
    ("gptq4_asym", "qweight", lambda t: t.to(torch.int16), "qweight"),
    ("awq_g64", "scales", lambda t: t[:-1], "scales"),
    ("awq_g64", "g_idx", None, "g_idx"),
])
def test_corrupt_tensors_are_refused_by_name(folders, tmp_path, variant, param, change, named):
    from safetensors.torch import load_file, save_file
    dst = tmp_path / "corrupt"
    shutil.copytree(folders[variant], dst)
    t = load_file(str(dst / "model.safetensors"))
    key = "model.layers.2.mlp.up_proj." + param
    if change is None:  # a stray tensor
        t[key] = torch.zeros(576, dtype=torch.int32)
    else:
        t[key] = change(t[key]).contiguous()
    save_file(t, str(dst / "model.safetensors"), metadata={"format": "pt"})
    r = run_pagoda("info", "-m", dst, check=False)
    assert r.returncode != 0
    assert "model.layers.2.mlp.up_proj" in r.stderr and named in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["awq_g64", "gptq4_sym", "gptq4_asym", "gptq8_sym", "gptq4_act"])
def test_plan_counts_the_loaded_bytes(folders, name):
    # `pagoda plan` counts each layer as the type it converts to; the issue asks for 2%.
    # Measured: equal to the byte on the CPU, and on an H100 (bench/RESULTS.md).
    planned, loaded = plan_and_loaded_weight_bytes(str(folders[name]))
    assert abs(planned - loaded) <= 0.02 * loaded, (planned, loaded)
