#!/usr/bin/env python3
"""Writes AWQ and GPTQ checkpoints of a Hugging Face folder, one per variant, quantized by
plain round-to-nearest (min-max per group, no calibration data), for the tests.

  hf_awq_gptq.py SRC_FOLDER OUT_DIR [VARIANT ...]

AWQ folders are packed by AutoAWQ's own WQLinear_GEMM.from_linear (the package's packer,
loaded from the installed autoawq without its package __init__, which needs datasets and
a GPU stack). GPTQ folders are packed here, in the documented GPTQ layout (qweight
[in * bits / 32, out] with input i in bits (i % (32/bits)) * bits of word i / (32/bits);
qzeros [groups, out * bits / 32] packed along the output; checkpoint_format "gptq"
storing z - 1); tests/model/test_awq_gptq.py reads them back with GPTQModel's own
unpacking to check that.

Variants (SmolLM2-135M's 576 input columns are not whole groups of 128: AWQ, which needs
whole groups, uses 64; GPTQ's last group of 128 holds 64 columns, as GPTQ allows):
  awq_g64           AWQ gemm 4-bit, zero points, group 64; o_proj in modules_to_not_convert
  gptq4_sym         GPTQ 4-bit sym, group 128, v1 zeros
  gptq4_asym        GPTQ 4-bit asym, group 128, v1 zeros
  gptq4_asym_v2     the same, checkpoint_format gptq_v2
  gptq4_channel     GPTQ 4-bit sym, group_size -1 (one group per row)
  gptq8_sym         GPTQ 8-bit sym, group 128
  gptq8_asym        GPTQ 8-bit asym, group 128
  gptq4_act         GPTQ 4-bit asym, desc_act: a shuffled g_idx, groups mixed in blocks
  gptq4_act_blocks  GPTQ 4-bit asym, desc_act: g_idx shuffled in whole 32-column blocks
"""
import importlib
import importlib.util
import json
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

VARIANTS = {
    "awq_g64": dict(awq=True, bits=4, group=64, sym=False),
    "gptq4_sym": dict(bits=4, group=128, sym=True),
    "gptq4_asym": dict(bits=4, group=128, sym=False),
    "gptq4_asym_v2": dict(bits=4, group=128, sym=False, v2=True),
    "gptq4_channel": dict(bits=4, group=-1, sym=True),
    "gptq8_sym": dict(bits=8, group=128, sym=True),
    "gptq8_asym": dict(bits=8, group=128, sym=False),
    "gptq4_act": dict(bits=4, group=128, sym=False, act="columns"),
    "gptq4_act_blocks": dict(bits=4, group=128, sym=False, act="blocks"),
}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def awq_module(name):
    """A module of the installed autoawq, loaded without running awq/__init__.py."""
    if name in sys.modules:
        return sys.modules[name]
    root = importlib.util.find_spec("awq").submodule_search_locations[0]
    parts = name.split(".")
    for i in range(1, len(parts)):
        pkg = ".".join(parts[:i])
        if pkg not in sys.modules:
            m = types.ModuleType(pkg)
            m.__path__ = [os.path.join(root, *parts[1:i])]
            sys.modules[pkg] = m
    sys.modules.setdefault("accelerate", types.ModuleType("accelerate"))  # unused by gemm
    return importlib.import_module(name)


def rtn(w, bits, group, sym, g_idx):
    """Round-to-nearest codes of w [out, in] by the groups g_idx [in]: q [out, in] ints,
    z and s [groups, out] (s as f16, the value the checkpoint stores)."""
    maxq = 2**bits - 1
    n = int(g_idx.max()) + 1
    z = torch.zeros(n, w.shape[0])
    s = torch.zeros(n, w.shape[0])
    for g in range(n):
        cols = w[:, g_idx == g]
        lo = torch.clamp(cols.amin(dim=1), max=0)
        hi = torch.clamp(cols.amax(dim=1), min=0)
        if sym:
            amax = torch.maximum(-lo, hi)
            sc = 2 * amax / maxq
            zz = torch.full_like(sc, (maxq + 1) / 2)
        else:
            sc = (hi - lo) / maxq
            sc = torch.where(sc == 0, torch.ones_like(sc), sc)
            zz = torch.clamp(torch.round(-lo / sc.half().float()), 0, maxq)
        sc = torch.where(sc == 0, torch.ones_like(sc), sc)
        s[g], z[g] = sc.half().float(), zz
    sf, zf = s[g_idx].T, z[g_idx].T  # [out, in]
    q = torch.clamp(torch.round(w / sf) + zf, 0, maxq)
    return q.to(torch.int64), z.to(torch.int64), s.half()


def pack(values, bits, dim):
    """32/bits codes to an int32 word along `dim` (0: rows, 1: columns), code k of a word
    in bits k * bits."""
    per = 32 // bits
    v = values.to(torch.int64) & (2**bits - 1)
    if dim == 0:
        v = v.reshape(v.shape[0] // per, per, v.shape[1])
        words = sum(v[:, k, :] << (bits * k) for k in range(per))
    else:
        v = v.reshape(v.shape[0], v.shape[1] // per, per)
        words = sum(v[:, :, k] << (bits * k) for k in range(per))
    return torch.from_numpy(words.numpy().astype(np.uint32).view(np.int32))


def make_g_idx(n_in, group, act, rng):
    g = n_in if group < 0 else group
    base = torch.arange(n_in) // g
    if act == "columns":
        return base[torch.from_numpy(rng.permutation(n_in))].to(torch.int32)
    if act == "blocks":
        perm = rng.permutation(n_in // 32)
        return base.reshape(-1, 32)[torch.from_numpy(perm)].reshape(-1).to(torch.int32)
    return base.to(torch.int32)


def quantize_layer(w, v, rng):
    """The checkpoint tensors of one nn.Linear weight w [out, in] for variant v."""
    bits, group, sym = v["bits"], v["group"], v["sym"]
    g_idx = make_g_idx(w.shape[1], group, v.get("act"), rng)
    q, z, s = rtn(w, bits, group, sym, g_idx.long())
    if v.get("awq"):
        gemm = awq_module("awq.modules.linear.gemm")
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        # from_linear rounds (w + z s) / s back to q: give it the codes' own weights.
        lin.weight.data = ((q - z[g_idx.long()].T) * s.float()[g_idx.long()].T).float()
        m = gemm.WQLinear_GEMM.from_linear(lin, 4, group, scales=s, zeros=z.to(torch.int32))
        return {"qweight": m.qweight, "qzeros": m.qzeros, "scales": m.scales}
    stored_z = z if v.get("v2") else (z - 1) & (2**bits - 1)
    return {"qweight": pack(q.T.contiguous(), bits, 0), "qzeros": pack(stored_z, bits, 1),
            "scales": s, "g_idx": g_idx}


def quant_config(v):
    if v.get("awq"):
        return {"quant_method": "awq", "version": "gemm", "bits": 4, "group_size": v["group"],
                "zero_point": True, "modules_to_not_convert": ["self_attn.o_proj"]}
    return {"quant_method": "gptq", "bits": v["bits"], "group_size": v["group"],
            "desc_act": "act" in v, "sym": v["sym"], "true_sequential": True,
            "damp_percent": 0.01, "lm_head": False,
            "checkpoint_format": "gptq_v2" if v.get("v2") else "gptq"}


def make(src, out, name):
    from safetensors import safe_open
    v = VARIANTS[name]
    rng = np.random.default_rng(7)
    tensors = {}
    with safe_open(str(src / "model.safetensors"), "pt") as f:
        for k in f.keys():
            t = f.get_tensor(k)
            module = k[: -len(".weight")]
            quantize = k.endswith(".weight") and module.split(".")[-1] in LINEARS
            if v.get("awq") and "self_attn.o_proj" in module:
                quantize = False
            if not quantize:
                tensors[k] = t
                continue
            for p, val in quantize_layer(t.float(), v, rng).items():
                tensors[f"{module}.{p}"] = val.contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = quant_config(v)
    cfg["torch_dtype"] = "float16"
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors") and f.is_file():
            shutil.copy(f, out / f.name)


def main():
    src, out = Path(sys.argv[1]), Path(sys.argv[2])
    for name in sys.argv[3:] or VARIANTS:
        make(src, out / name, name)
        print(out / name)


if __name__ == "__main__":
    main()
