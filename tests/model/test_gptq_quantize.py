"""`pagoda quantize FOLDER OUT gptq`: the GPTQ checkpoint format ("gptq", v1), checked
against a numpy decoder written here from the format's documentation, against transformers
running the decoded weights, and against a plain round-to-nearest quantization.

The layout (AutoGPTQ's QuantLinear.pack, GPTQModel's dequantize_weight, vLLM's gptq
config): qweight int32 [in/8, out], input column i of a word in bits 4*(i%8); qzeros int32
[groups, out/8], output o of a word in bits 4*(o%8), holding zero - 1; scales f16
[groups, out]; g_idx int32 [in], each input column's group. w[o, i] = scales[g, o] *
(q[i, o] - zero[g, o]) with g = g_idx[i]. (GPTQModel 7.7's own torch kernel, run from its
sdist on these folders by hand, decoded the same weights within f16 rounding; it is not
installed here, so the test does not use it.)
"""
import functools
import json
import os

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from pagoda_util import (CALIBRATION_TEXT as TEXT, SMOL_HF, all_logits, eval_ids,
                         kld_of_log_probs as kld, log_probs, model_path, quantize_folder,
                         run_pagoda)

LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SAMPLES, SEQ = 16, 256  # calibration: the first 4096 tokens of tinyshakespeare


def quantize(tmp_path_factory, name, *flags):
    return quantize_folder(tmp_path_factory, name, "gptq", "--samples", SAMPLES, "--seq-len",
                           SEQ, *flags)[0]


@pytest.fixture(scope="module")
def asym(tmp_path_factory):
    return quantize(tmp_path_factory, "gptq-asym")


@pytest.fixture(scope="module")
def sym_act_order(tmp_path_factory):
    return quantize(tmp_path_factory, "gptq-sym-ao", "--sym", "--act-order")


@pytest.fixture(scope="module")
def act_static(tmp_path_factory):
    return quantize(tmp_path_factory, "gptq-ao-static", "--act-order", "--static-groups")


@pytest.fixture(scope="module", autouse=True)
def _forget_cached():
    yield  # the tensors and log-probs kept below: 0.5 GB
    source.cache_clear()
    reference_log_probs.cache_clear()


@functools.lru_cache(maxsize=None)
def source():
    """The 16-bit folder's tensors (read once; the tests only read them)."""
    return load_file(os.path.join(model_path(SMOL_HF), "model.safetensors"))


def linear_names(tensors):
    return [n[:-len(".weight")] for n in tensors
            if n.startswith("model.layers.") and n.endswith("_proj.weight")]


def unpack4(words, axis):
    """int32 words -> their eight 4-bit fields, field j (bits 4j..4j+3) at index 8k + j
    along `axis`."""
    u = words.view(np.uint32)
    fields = np.stack([(u >> np.uint32(4 * j)) & np.uint32(15) for j in range(8)], axis=axis + 1)
    shape = list(words.shape)
    shape[axis] *= 8
    return fields.reshape(shape).astype(np.int32)


def decode(t, base):
    """The float32 [out, in] weight a GPTQ v1 layer stands for."""
    q = unpack4(t[base + ".qweight"], 0)          # [in, out]
    z = unpack4(t[base + ".qzeros"], 1) + 1       # [groups, out]; v1 stores zero - 1
    s = t[base + ".scales"].astype(np.float32)    # [groups, out]
    g = t[base + ".g_idx"]
    return (s[g] * (q - z[g]).astype(np.float32)).T


def rtn(w, sym=False, group=128):
    """Round-to-nearest 4-bit per row and group of 128 input columns, min/max (GPTQ's
    quantizer without the error feedback): the baseline GPTQ must beat. Asymmetric: the
    range [min(x, 0), max(x, 0)] in 15 steps; symmetric: [-max|x|, max|x|], zero 8."""
    w = w.astype(np.float32)
    out = np.empty_like(w)
    for c0 in range(0, w.shape[1], group):
        x = w[:, c0:c0 + group]
        lo = np.minimum(x.min(1, keepdims=True), 0)
        hi = np.maximum(x.max(1, keepdims=True), 0)
        if sym:
            hi = np.maximum(hi, -lo)
            lo = -hi
        s = (hi - lo) / 15
        s[s == 0] = 1
        z = np.full_like(s, 8) if sym else np.round(-lo / s)
        out[:, c0:c0 + group] = s * (np.clip(np.round(x / s) + z, 0, 15) - z)
    return out


def test_layout_and_config(asym):
    src = source()
    out = load_file(os.path.join(asym, "model.safetensors"))
    config = json.load(open(os.path.join(asym, "config.json")))
    qc = config.pop("quantization_config")
    assert config == json.load(open(os.path.join(model_path(SMOL_HF), "config.json")))
    assert (qc["quant_method"], qc["bits"], qc["group_size"], qc["desc_act"], qc["sym"],
            qc["checkpoint_format"]) == ("gptq", 4, 128, False, False, "gptq")
    bases = linear_names(src)
    assert len(bases) == 7 * 30
    for name, w in src.items():
        if name[:-len(".weight")] not in bases:
            assert np.array_equal(out[name], w), name  # embeddings, norms: copied as they were
    for f in os.listdir(model_path(SMOL_HF)):
        if f not in ("config.json", "model.safetensors"):
            assert open(os.path.join(asym, f), "rb").read() == \
                open(os.path.join(model_path(SMOL_HF), f), "rb").read(), f
    errs = []
    for b in bases:
        n_out, n_in = src[b + ".weight"].shape
        groups = -(-n_in // 128)  # 576 inputs: four groups of 128 and one of 64
        assert out[b + ".qweight"].dtype == np.int32 and out[b + ".qweight"].shape == (n_in // 8, n_out)
        assert out[b + ".qzeros"].dtype == np.int32 and out[b + ".qzeros"].shape == (groups, n_out // 8)
        assert out[b + ".scales"].dtype == np.float16 and out[b + ".scales"].shape == (groups, n_out)
        assert np.array_equal(out[b + ".g_idx"], np.arange(n_in, dtype=np.int32) // 128)
        # Stored zeros stay within 0..14, so a reader's +1 never carries into the next field.
        assert unpack4(out[b + ".qzeros"], 1).max() <= 14, b
        w = src[b + ".weight"].astype(np.float32)
        errs.append(np.linalg.norm(decode(out, b) - w) / np.linalg.norm(w))
    assert set(out) == {n for n in src if n[:-len(".weight")] not in bases} | {
        b + k for b in bases for k in (".qweight", ".qzeros", ".scales", ".g_idx")}
    # GPTQ trades weight error for output error: the weights are as far from the source as
    # 4-bit rounding puts them (measured mean 0.11), not more.
    assert 0.05 < np.mean(errs) < 0.2, np.mean(errs)


def calibration_ids():
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(model_path(SMOL_HF))
    return tok(open(TEXT).read(), return_tensors="pt").input_ids[0][:SAMPLES * SEQ]


def input_power(layers):
    """sum x^2 of each input column of q_proj and down_proj over the calibration chunks:
    diag(H), from transformers running the 16-bit model."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_path(SMOL_HF), dtype=torch.float32)
    seen = {}

    def hook(name):
        def f(_mod, args):
            p = args[0].detach().double().pow(2).reshape(-1, args[0].shape[-1]).sum(0)
            seen[name] = seen[name] + p if name in seen else p
        return f
    for l in layers:
        model.model.layers[l].self_attn.q_proj.register_forward_pre_hook(hook(f"{l}.self_attn.q_proj"))
        model.model.layers[l].mlp.down_proj.register_forward_pre_hook(hook(f"{l}.mlp.down_proj"))
    ids = calibration_ids()
    with torch.no_grad():
        for c in range(SAMPLES):
            model(ids[c * SEQ:(c + 1) * SEQ][None])
    return {k: v.numpy() for k, v in seen.items()}


def test_sym_act_order(sym_act_order):
    """--sym: every zero 8 (stored 7); --act-order: columns grouped by descending diag(H),
    the Hessian diagonal measured here through transformers on the same chunks."""
    out = load_file(os.path.join(sym_act_order, "model.safetensors"))
    qc = json.load(open(os.path.join(sym_act_order, "config.json")))["quantization_config"]
    assert qc["desc_act"] is True and qc["sym"] is True
    for b in linear_names(source()):
        assert (out[b + ".qzeros"].view(np.uint32) == 0x77777777).all(), b
    layers = [0, 11, 29]
    power = input_power(layers)
    for key, p in power.items():
        g = out[f"model.layers.{key}.g_idx"]
        assert np.array_equal(np.bincount(g), [128] * (len(g) // 128) + ([len(g) % 128] if len(g) % 128 else [])), key
        # The group each column would get from transformers' diag(H) in descending order;
        # near-equal diagonals may swap across a boundary (the two runs' float sums differ).
        order = np.argsort(-p, kind="stable")
        want = np.empty_like(g)
        want[order] = np.arange(len(g)) // 128
        agree = (want == g).mean()
        assert agree > 0.97, (key, agree)


def with_weights(weights):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_path(SMOL_HF), dtype=torch.float32)
    params = dict(m.named_parameters())
    for base, w in weights.items():
        params[base + ".weight"].data.copy_(torch.from_numpy(w))
    return m


def test_static_groups(act_static):
    """--static-groups with --act-order: columns still go in act order, but every group is
    the plain 128 contiguous columns (g_idx = i // 128), so Pagoda's loader keeps the
    layers' groups as they are (Q4_G64 for the 576-column rows, whose last group holds 64
    columns; Q4_G128 for the 1536-column ones) rather than requantizing them to Q8_0 as it
    must for scattered act-order groups."""
    out = load_file(os.path.join(act_static, "model.safetensors"))
    qc = json.load(open(os.path.join(act_static, "config.json")))["quantization_config"]
    assert qc["desc_act"] is True and qc["static_groups"] is True and qc["sym"] is False
    for b in linear_names(source()):
        g = out[b + ".g_idx"]
        assert np.array_equal(g, np.arange(len(g)) // 128), b
    r = run_pagoda("info", "-m", act_static, "--tensors")
    types = [line.split()[1] for line in r.stdout.splitlines()
             if line.split() and line.split()[0].endswith("_proj.weight")]
    assert len(types) == 7 * 30 and set(types) == {"Q4_G64", "Q4_G128"}, types


# The lengths of eval_ids() the tests measure on: test_gptq_beats_round_to_nearest all 256,
# test_pagoda_loads_what_it_wrote the first 128.
EVAL_LENGTHS = (256, 128)


@functools.lru_cache(maxsize=None)
def reference_log_probs(kind):
    """{n: log-probs on eval_ids()[:, :n]} for n in EVAL_LENGTHS, of transformers (float32)
    running the 16-bit model ("16-bit") or every layer rounded to nearest ("rtn", "rtn_sym").
    Each model is built once for the module: the three variants and the loader test
    measure against the same ones."""
    src = source()
    weights = {} if kind == "16-bit" else {
        b: rtn(src[b + ".weight"], kind == "rtn_sym") for b in linear_names(src)}
    model = with_weights(weights)
    return {n: log_probs(model, eval_ids()[:, :n]) for n in EVAL_LENGTHS}


@pytest.mark.parametrize("variant", ["asym", "sym_act_order", "act_static"])
def test_gptq_beats_round_to_nearest(request, variant):
    """transformers (float32) running the decoded weights: closer to the 16-bit model than
    the same run with every layer rounded to nearest (4-bit, group 128), on text the
    calibration never saw."""
    folder = request.getfixturevalue(variant)
    out = load_file(os.path.join(folder, "model.safetensors"))
    src = source()
    bases = linear_names(src)
    ids = eval_ids()
    lr = reference_log_probs("16-bit")[256]
    k_gptq = kld(lr, log_probs(with_weights({b: decode(out, b) for b in bases}), ids))
    k_rtn = kld(lr, reference_log_probs("rtn_sym" if variant == "sym_act_order" else "rtn")[256])
    print(f"{variant}: KLD vs 16-bit: gptq {k_gptq:.4f}, round-to-nearest {k_rtn:.4f}")
    # Measured on 256 tokens: asym gptq 0.184, rtn 0.244; sym + act-order gptq 0.209, rtn
    # (sym) 0.519. 4096 calibration tokens are few for GPTQ (the paper takes 128 x 2048):
    # with 2048, the 1536-column down_proj layers overfit and asym gptq was 0.237; with
    # 16384, 0.173.
    assert k_gptq < 0.85 * k_rtn, (k_gptq, k_rtn)


def test_pagoda_loads_what_it_wrote(asym, tmp_path):
    """When Pagoda's GPTQ loader is there: the weights it loads are the decoded ones, and
    it runs the folder about as close to the 16-bit model as transformers does."""
    r = run_pagoda("info", "-m", asym, check=False)
    if r.returncode != 0:
        assert "gptq" in r.stderr, r.stderr
        pytest.skip("pagoda does not load GPTQ folders yet: " + r.stderr.strip().splitlines()[-1])
    out = load_file(os.path.join(asym, "model.safetensors"))
    for gguf, base in [("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj"),
                       ("blk.7.ffn_down.weight", "model.layers.7.mlp.down_proj"),
                       ("blk.12.attn_output.weight", "model.layers.12.self_attn.o_proj")]:
        f = tmp_path / (gguf + ".f32")
        run_pagoda("info", "-m", asym, "--dequantize", gguf, "--out", str(f))
        ref = decode(out, base)
        ours = np.fromfile(f, np.float32).reshape(ref.shape)
        # Q4_G64/Q4_G128 hold s (rounded to f16) and z as they are: exact for the f16 scales
        # this folder stores.
        tol = 0
        assert np.abs(ours - ref).max() <= tol, gguf
    ids = eval_ids()[0, :128].tolist()
    lr = reference_log_probs("16-bit")[128]
    lq = torch.log_softmax(torch.from_numpy(all_logits(asym, ids)), -1)
    k_rtn = kld(lr, reference_log_probs("rtn")[128])
    k = kld(lr, lq)
    print(f"pagoda running the gptq folder: KLD {k:.4f} (transformers, round-to-nearest: {k_rtn:.4f})")
    assert k < k_rtn, (k, k_rtn)


def test_flags_refused_where_they_do_not_apply(tmp_path):
    src = model_path(SMOL_HF)
    for scheme, flags, named in [("gptq", ["--alpha", "0.5"], "--alpha"),
                                 ("fp8", ["--sym"], "--sym"),
                                 ("smoothquant", ["--act-order"], "--act-order"),
                                 ("nf4", ["--static-groups"], "--static-groups"),
                                 ("gptq", ["--group-size", "100"], "--group-size"),
                                 ("gptq", ["--bits", "3"], "--bits")]:
        r = run_pagoda("quantize", src, tmp_path / "x", scheme, *flags, check=False)
        assert r.returncode != 0 and named in r.stderr, (scheme, flags, r.stderr)
        assert not os.path.exists(tmp_path / "x")
