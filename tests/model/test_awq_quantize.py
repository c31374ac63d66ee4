"""`pagoda quantize FOLDER OUT awq`: the AWQ GEMM checkpoint format, read back with AutoAWQ's
own unpacking (awq/utils/packing_utils.py, as tests/model/test_awq_gptq.py loads it), run by
transformers (float32) with those weights and the folder's norm weights against Pagoda's
logits on the folder, and weighed against plain round-to-nearest AWQ of the same group
size (scripts/hf_awq_gptq.py awq_g64: AutoAWQ's packer, no search) by `pagoda perplexity
--kl-base` on text the calibration never saw.

SmolLM2-135M's 576-wide inputs are not whole groups of 128, so the folder uses 64.
"""
import json
import os
import time

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from pagoda_util import (CALIBRATION_TEXT as TEXT, SMOL_HF, awq_packing_utils, compare_logits,
                         model_path, quantize_folder, run_pagoda)
SAMPLES, SEQ, GROUP = 8, 256, 64  # calibration: the first 2048 tokens of tinyshakespeare
PRODUCTS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
NORMS = ("input_layernorm", "post_attention_layernorm")


@pytest.fixture(scope="module")
def awq(tmp_path_factory):
    t0 = time.perf_counter()
    out, stderr = quantize_folder(tmp_path_factory, "awq", "awq", "--group-size", GROUP,
                                  "--samples", SAMPLES, "--seq-len", SEQ, "--calibration", TEXT)
    print(f"pagoda quantize awq: {time.perf_counter() - t0:.1f} s; "
          f"{stderr.strip().splitlines()[-1]}")
    return out


@pytest.fixture(scope="module")
def rtn(awq_gptq_folders):
    # scripts/hf_awq_gptq.py's awq_g64, written once a session (test_awq_gptq reads it too).
    return awq_gptq_folders("awq_g64")["awq_g64"]


def source():
    return load_file(os.path.join(model_path(SMOL_HF), "model.safetensors"))


def n_layers():
    return json.load(open(os.path.join(model_path(SMOL_HF), "config.json")))["num_hidden_layers"]


def autoawq_weight(t, base):
    """The float32 [out, in] weight of an AWQ GEMM layer by AutoAWQ's dequantize_gemm, and
    its integer codes and zeros by AutoAWQ's unpack_awq + reverse_awq_order."""
    pu = awq_packing_utils()
    qw, qz = torch.from_numpy(t[base + ".qweight"]), torch.from_numpy(t[base + ".qzeros"])
    s = torch.from_numpy(t[base + ".scales"]).float()
    w = pu.dequantize_gemm(qw, qz, s, 4, GROUP).T.contiguous().numpy()
    iw, iz = pu.reverse_awq_order(*pu.unpack_awq(qw, qz, 4), 4)
    return w, (iw & 15).numpy(), (iz & 15).numpy(), s.numpy()


def test_layout_and_config(awq):
    src = source()
    out = load_file(os.path.join(awq, "model.safetensors"))
    config = json.load(open(os.path.join(awq, "config.json")))
    qc = config.pop("quantization_config")
    assert config == json.load(open(os.path.join(model_path(SMOL_HF), "config.json")))
    assert qc == {"quant_method": "awq", "zero_point": True, "group_size": GROUP, "bits": 4,
                  "version": "gemm", "modules_to_not_convert": None}
    bases = [f"model.layers.{l}.{p}" for l in range(n_layers()) for p in PRODUCTS]
    for b in bases:
        n_out, n_in = src[b + ".weight"].shape
        assert out[b + ".qweight"].dtype == np.int32 and out[b + ".qweight"].shape == (n_in, n_out // 8)
        assert out[b + ".qzeros"].dtype == np.int32 and out[b + ".qzeros"].shape == (n_in // GROUP, n_out // 8)
        assert out[b + ".scales"].dtype == np.float16 and out[b + ".scales"].shape == (n_in // GROUP, n_out)
    norms = {f"model.layers.{l}.{n}.weight" for l in range(n_layers()) for n in NORMS}
    assert set(out) == (set(src) - {b + ".weight" for b in bases}) | {
        b + k for b in bases for k in (".qweight", ".qzeros", ".scales")}
    for name, w in src.items():
        if name in out and name not in norms:
            assert np.array_equal(out[name], w), name  # embeddings, final norm: as they were
    changed = sum(not np.array_equal(out[n], src[n]) for n in norms)
    assert changed >= len(norms) // 2, changed  # the scales folded into the norms
    for f in os.listdir(model_path(SMOL_HF)):
        if f not in ("config.json", "model.safetensors"):
            assert open(os.path.join(awq, f), "rb").read() == \
                open(os.path.join(model_path(SMOL_HF), f), "rb").read(), f


@pytest.mark.parametrize("layer", [0, 14, 29])
def test_autoawq_reads_the_intended_weights(awq, layer):
    """AutoAWQ's reading: codes and zeros 4-bit, every group s (q - z) with at most 16
    values; and with the folded factors undone (s = the norm's old weight over its new
    one) the weights are the source's within 4-bit rounding."""
    src = source()
    out = load_file(os.path.join(awq, "model.safetensors"))
    p = f"model.layers.{layer}."
    factors = {n: src[p + n + ".weight"].astype(np.float32) / out[p + n + ".weight"].astype(np.float32)
               for n in NORMS}
    for prod in PRODUCTS:
        w, iw, iz, s = autoawq_weight(out, p + prod)
        assert iw.min() >= 0 and iw.max() <= 15 and iz.min() >= 0 and iz.max() <= 15
        n_out, n_in = w.shape
        groups = w.reshape(n_out, n_in // GROUP, GROUP)
        assert max(len(np.unique(g)) for row in groups for g in row) <= 16
        codes = w.T / s.repeat(GROUP, 0) + iz.repeat(GROUP, 0)  # [in, out]
        assert np.abs(codes - np.round(codes)).max() < 1e-3 and codes.min() > -1e-3 \
            and codes.max() < 15 + 1e-3
        orig = src[p + prod + ".weight"].astype(np.float32)
        norm = {"self_attn.q_proj": "input_layernorm", "self_attn.k_proj": "input_layernorm",
                "mlp.gate_proj": "post_attention_layernorm"}.get(prod)
        if norm is None:
            continue  # v, o, up, down: scaled by factors a norm does not show
        back = w / factors[norm][None, :]
        rel = np.linalg.norm(back - orig) / np.linalg.norm(orig)
        print(f"layer {layer} {prod}: factors {factors[norm].min():.3g}..{factors[norm].max():.3g},"
              f" weight error {rel:.3f} of the source's")
        # 4-bit g64 rounding of the scaled weights: measured 0.10-0.18 (the scales trade
        # weight error for output error; round-to-nearest gives about 0.1).
        assert rel < 0.3, rel


def reference_model(awq):
    """transformers (float32) running AutoAWQ's dequantization of every product, with the
    folder's norm weights."""
    from transformers import AutoModelForCausalLM
    out = load_file(os.path.join(awq, "model.safetensors"))
    m = AutoModelForCausalLM.from_pretrained(model_path(SMOL_HF), dtype=torch.float32).eval()
    params = dict(m.named_parameters())
    for l in range(n_layers()):
        for prod in PRODUCTS:
            base = f"model.layers.{l}.{prod}"
            params[base + ".weight"].data.copy_(torch.from_numpy(autoawq_weight(out, base)[0]))
        for n in NORMS:
            name = f"model.layers.{l}.{n}.weight"
            params[name].data.copy_(torch.from_numpy(out[name].astype(np.float32)))
    return m


def test_logits_agree_with_transformers(awq):
    for f in compare_logits(awq, reference_model(awq)):
        print(f"awq: max |pagoda - transformers| {f['err']:.3g} of the range, "
              f"KLD {f['kld']:.3g}, argmax agrees {f['agree']:.2f}")
        # test_awq_gptq.py's bounds for AWQ g64 folders (Pagoda's int8 activations).
        assert f["err"] < 0.1
        assert f["kld"] < 0.045
        assert f["agree"] >= 0.6


def kld_vs_16bit(folder, held):
    r = run_pagoda("perplexity", "-m", folder, "-f", held, "--kl-base", model_path(SMOL_HF),
                   "-c", 256, "--chunks", 8, "--json")
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_awq_beats_round_to_nearest(awq, rtn, tmp_path):
    """KL divergence from the 16-bit model on tinyshakespeare's second half (the calibration
    read its first 2048 tokens): the searched folder below round-to-nearest's."""
    text = open(TEXT, encoding="utf-8").read()
    held = tmp_path / "held.txt"
    held.write_text(text[len(text) // 2:], encoding="utf-8")
    a, r = kld_vs_16bit(awq, held), kld_vs_16bit(rtn, held)
    print(f"KLD vs 16-bit: awq {a['kld']['mean']:.4f} +/- {a['kld']['error']:.4f} "
          f"(PPL {a['ppl']:.3f}), round-to-nearest {r['kld']['mean']:.4f} +/- "
          f"{r['kld']['error']:.4f} (PPL {r['ppl']:.3f})")
    assert a["kld"]["mean"] < 0.9 * r["kld"]["mean"]


@pytest.mark.parametrize("flags,named", [
    (["--group-size", "128"], "--group-size 64"),
    (["--bits", "8"], "--bits"),
    (["--bits", "3"], "--bits"),
    (["--sym"], "--sym"),
    (["--act-order"], "--act-order"),
    (["--static-groups"], "--static-groups"),
    (["--damp", "0.1"], "--damp"),
    (["--alpha", "0.5"], "--alpha"),
    (["--group-size", "-1"], "--group-size"),
    (["--group-size", "48"], "--group-size"),
    (["--kv-cache-scales"], "--kv-cache-scales"),
])
def test_refusals(tmp_path, flags, named):
    """Refused by name, before the calibration run, leaving no output folder."""
    r = run_pagoda("quantize", model_path(SMOL_HF), tmp_path / "x", "awq", *flags, check=False)
    assert r.returncode != 0 and named in r.stderr, (flags, r.stderr)
    assert "calibration:" not in r.stderr
    assert not os.path.exists(tmp_path / "x")
    if named == "--group-size 64":  # the first layer that is not whole groups, by name
        assert "model.layers.0." in r.stderr and "576" in r.stderr, r.stderr


def test_quantized_input_is_refused_before_calibrating(rtn, tmp_path):
    r = run_pagoda("quantize", rtn, tmp_path / "x", "awq", "--group-size", GROUP, check=False)
    assert r.returncode != 0 and "already quantized" in r.stderr, r.stderr
    assert "calibration:" not in r.stderr
