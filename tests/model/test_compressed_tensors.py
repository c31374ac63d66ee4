"""compressed-tensors checkpoints (llm-compressor's format) against the package itself.

scripts/hf_compressed.py writes one folder per scheme from models/SmolLM2-135M-Instruct-hf
with the compressed-tensors package's own schemes, qparams and ModelCompressor (so the
packing is the package's). Then:
  - every weight matrix Pagoda loads (`pagoda info --dequantize`, the converted Q8_0 /
    Q4_0 / Q4_1 / BF16 tensor dequantized) equals the package's own decompress of that
    layer (its ModelCompressor.decompress_model on the model transformers loads);
  - Pagoda's logits agree with transformers (float32) running those decompressed weights;
  - greedy text is the same as transformers' for a few tokens; unsupported configs are
    refused by name.

Measured (x86-64, AVX2/AVX-512, stated per scheme in LOGIT_BOUND): max |diff| over the
range of the reference logits on 2 x 24 random ids.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pagoda_util import (all_logits, compare_logits, greedy_texts,
                         plan_and_loaded_weight_bytes, reference, ROOT, run_pagoda)

import compressed_tensors as ct  # noqa: E402  (scripts/setup.sh installs it)
import torch  # noqa: E402

SCRIPT = os.path.join(ROOT, "scripts", "hf_compressed.py")
SRC = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct-hf")
# scheme -> (the type Pagoda stores its matrices as, logit bound as a fraction of range).
# Bounds are 1.5x the measured max over 2 x 24 random ids (AVX2 host): Q8_0 4.9e-2 and
# 6.8e-2 (int8 activations per 32-block), Q4_0 9.5e-2 / 3.7e-2 (group / channel), Q4_1
# 3.7e-2, BF16 1.3e-2 / 1.2e-2. Not yet compared with the Q8_0 GGUF tests' own bound.
# The 4-bit schemes keep their groups as Q4_G64 (group 64; a row of 576 columns) or
# Q4_G128 (a row of 1536).
SCHEMES = {
    "w8a8_int8": ({"Q8_0"}, 7.5e-2),
    "w8a8_int8_tensor": ({"Q8_0"}, 0.1),
    "w4a16": ({"Q4_G64"}, 0.15),
    "w4a16_asym": ({"Q4_G64"}, 6e-2),
    "w4a16_channel": ({"Q4_G64", "Q4_G128"}, 6e-2),
    "fp8": ({"FP8_E4M3"}, 2e-2),
    "fp8_tensor": ({"FP8_E4M3"}, 2e-2),
}
MATRICES = ["blk.0.attn_q.weight", "blk.3.attn_k.weight", "blk.7.ffn_down.weight",
            "blk.29.ffn_gate.weight", "blk.12.attn_output.weight"]
HF = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_output":
      "self_attn.o_proj", "ffn_down": "mlp.down_proj", "ffn_gate": "mlp.gate_proj"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = tmp_path_factory.mktemp("ct")
    subprocess.run([sys.executable, SCRIPT, SRC, str(out), *SCHEMES], check=True,
                   capture_output=True, text=True)
    return {s: str(out / s) for s in SCHEMES}


def package_weight(folder, module):
    """The package's own decompress of one layer (its unpacking and dequantize), from the
    folder's tensors with the scales in float32, so the products are exact."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors import safe_open
    qc = QuantizationConfig.model_validate(
        json.load(open(os.path.join(folder, "config.json")))["quantization_config"])
    scheme = qc.config_groups["group_0"]
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        sd = {k[len(module) + 1:]: f.get_tensor(k) for k in f.keys()
              if k.startswith(module + ".")}
    sd["weight_scale"] = sd["weight_scale"].float()
    comp = BaseCompressor.get_value_from_registry(scheme.format or qc.format)
    return comp.decompress(sd, scheme)["weight"].float()


def decompressed_model(folder):
    """transformers (float32) running the dense model with every quantized layer's weight
    replaced by the package's decompress of it."""
    from transformers import AutoModelForCausalLM
    from safetensors import safe_open
    m = AutoModelForCausalLM.from_pretrained(SRC, dtype=torch.float32).eval()
    params = dict(m.named_parameters())
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        for k in f.keys():  # the folder's own 16-bit tensors (embedding, norms)
            if k in params and f.get_slice(k).get_dtype() in ("BF16", "F16", "F32"):
                params[k].data.copy_(f.get_tensor(k).float())
    for name, mod in m.named_modules():
        if isinstance(mod, torch.nn.Linear) and name != "lm_head":
            mod.weight.data.copy_(package_weight(folder, name))
    return m


def hf_weight(folder, gguf):
    _, layer, name, _ = gguf.split(".")
    return package_weight(folder, f"model.layers.{layer}.{HF[name]}").numpy()


def pagoda_weight(folder, gguf, tmp_path):
    out = tmp_path / (gguf + ".f32")
    r = run_pagoda("info", "-m", folder, "--dequantize", gguf, "--out", str(out))
    return r.stdout.split()[1], np.fromfile(out, np.float32)


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_weights_equal_the_package_decompress(folders, scheme, tmp_path):
    for name in MATRICES:
        kind, ours = pagoda_weight(folders[scheme], name, tmp_path)
        assert kind in SCHEMES[scheme][0]
        ref = hf_weight(folders[scheme], name)
        # Scales are bf16 (the model's dtype), which f16 holds exactly: Q8_0, Q4_0 and
        # the Q4_G types are exact; Q4_1's m = -s (z + 8) rounds to f16 (2^-11 of |m| at most); fp8 x
        # scale rounds to bf16 (8 significant bits: 2^-8 of the value at most); FP8_E4M3
        # keeps the fp8 bytes and scales, so its f32 product is the package's.
        ours = ours.reshape(ref.shape)
        if kind == "Q4_1":
            tol = 2.0**-11 * np.abs(ref).max() * 16 / 15
        elif kind == "BF16":
            tol = 2.0**-8 * np.abs(ref)
        else:
            tol = 0
        err = np.abs(ours - ref)
        print(f"{scheme} {name}: {kind}, max |pagoda - decompress| = {err.max():.3g}, "
              f"relative {(err / np.maximum(np.abs(ref), 1e-30)).max():.3g}")
        assert (err <= tol).all()


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_logits_agree_with_transformers(folders, scheme):
    for f in compare_logits(folders[scheme], reference(decompressed_model, folders[scheme])):
        print(f"{scheme}: max |pagoda - transformers| = {f['max_abs']:.3g}, "
              f"{f['err']:.3g} of the range, KLD {f['kld']:.3g}, argmax agrees {f['agree']:.2f}")
        assert f["err"] < SCHEMES[scheme][1]
        assert f["agree"] >= 0.75


@pytest.mark.parametrize("scheme", ["w8a8_int8", "w4a16", "fp8"])
def test_greedy_text_is_sensible(folders, scheme):
    out, ref_text = greedy_texts(folders[scheme], reference(decompressed_model, folders[scheme]))
    print(f"{scheme}: pagoda {out!r}, transformers {ref_text!r}")
    assert "Paris" in out
    # The first tokens are the same (later ones may part where two logits are close).
    assert out.split()[:2] == ref_text.split()[:2]


@pytest.mark.parametrize("edit,named", [
    (lambda q: q["config_groups"]["group_0"].update(format="marlin-24"), "marlin-24"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(actorder="group"), "actorder"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(group_size=48), "group_size 48"),
    (lambda q: q.update(kv_cache_scheme={"num_bits": 8, "type": "int"}), "kv_cache_scheme"),
    (lambda q: q.update(quant_method="hqq"), "hqq"),
    (lambda q: q["config_groups"]["group_0"]["weights"].update(num_bits=3), "3-bit"),
    (lambda q: q.update(ignore=["Embedding"]), "Embedding"),
    # An unreadable pattern is refused when the config is read, named, whether or not a
    # module would have reached it.
    (lambda q: q.update(ignore=["lm_head", "re:model.layers.(3"]),
     "ignore entry 're:model.layers.(3' is not a pattern"),
    (lambda q: q["config_groups"]["group_0"].update(targets=["re:.*_proj[", "Linear"]),
     "targets entry 're:.*_proj[' is not a pattern"),
    # A pattern reaches the module it names: the ignored layer's packed tensors are refused.
    (lambda q: q.update(ignore=["lm_head", r"re:.*layers\.3\.self_attn\.o_proj$"]),
     "model.layers.3.self_attn.o_proj"),
])
def test_unsupported_configs_are_refused_by_name(folders, tmp_path, edit, named):
    folder = tmp_path / "edited"
    shutil.copytree(folders["w4a16"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    edit(cfg["quantization_config"])
    (folder / "config.json").write_text(json.dumps(cfg))
    r = run_pagoda("info", "-m", folder, check=False)
    assert r.returncode != 0
    assert named in r.stderr, r.stderr


def test_pattern_targets_load_as_linear_does(folders, tmp_path):
    # "re:" targets (compressed-tensors' re.match from the start of the name) place the same
    # layers as "Linear": the same types, the same logits.
    folder = tmp_path / "re_targets"
    shutil.copytree(folders["w4a16"], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["quantization_config"]["config_groups"]["group_0"]["targets"] = [
        r"re:model\.layers\.\d+\.self_attn\.", r"re:.*mlp\.(gate|up|down)_proj$"]
    (folder / "config.json").write_text(json.dumps(cfg))
    tokens = np.random.default_rng(5).integers(0, 49152, 8).tolist()
    assert np.array_equal(all_logits(str(folder), tokens), all_logits(folders["w4a16"], tokens))


@pytest.mark.parametrize("scheme", ["w8a8_int8", "w4a16_asym", "fp8"])
def test_plan_counts_the_loaded_bytes(folders, scheme):
    # The issue asks for 2%; the plan counts the converted types' own bytes (Q8_0,
    # Q4_G64, FP8_E4M3), so the two agree exactly on the CPU.
    planned, loaded = plan_and_loaded_weight_bytes(folders[scheme])
    assert abs(planned - loaded) <= 0.02 * loaded, (planned, loaded)
    if scheme == "fp8":  # FP8_E4M3's packed bytes, counted alike
        assert planned == loaded, (planned, loaded)
    want = {"w8a8_int8": " Q8_0 ", "w4a16_asym": " Q4_G64 ", "fp8": " FP8_E4M3 "}[scheme]
    assert want in run_pagoda("info", "-m", folders[scheme], "--tensors").stdout
