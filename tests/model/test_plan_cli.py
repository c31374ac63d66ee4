"""pagoda plan: GGUF weight bytes equal the file's tensor sizes (read independently with the
gguf package), the --json keys, the seed's 70B example, computed suggestions, and clear errors
for bad input."""
import json
import os
import shlex

import pytest
from gguf import GGUFReader

from pagoda_util import SHARED, model_path, pagoda_json, run_pagoda

STORIES = os.path.join(SHARED, "models", "stories260K.gguf")
SMOLLM2 = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN3 = "models/qwen3-random.gguf"  # head size 64 over width 128 / 4 heads, q/k norms

KEYS = ["weight_bytes", "kv_bytes_per_token", "kv_pool_bytes", "max_concurrent_sequences",
        "max_context_tokens", "fits", "overheads", "kv_bytes_per_sequence",
        "mha_equivalent_kv_bytes_per_token", "budget_bytes", "kv_pool_blocks", "suggestions",
        "notes", "stages", "device", "shape"]
OVERHEAD_KEYS = ["activations_bytes", "fp8_activations_bytes", "logits_bytes",
                 "runtime_context_bytes", "total_bytes"]
CATALOG = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b", "llama-3.2-1b", "qwen2.5-7b",
           "qwen2.5-72b", "qwen3-8b", "qwen3-32b", "qwen3-235b-a22b", "mistral-7b",
           "mixtral-8x7b", "deepseek-v3", "gemma-3-27b", "smollm2-135m"]


def field(reader, key):
    f = reader.fields[key]
    return int(f.parts[f.data[0]][0])


def gguf_facts(path):
    """Tensor bytes and the KV formula's numbers, read with the gguf package."""
    r = GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    layers = field(r, f"{arch}.block_count")
    heads = field(r, f"{arch}.attention.head_count")
    kv_heads = field(r, f"{arch}.attention.head_count_kv") \
        if f"{arch}.attention.head_count_kv" in r.fields else heads
    key = f"{arch}.attention.key_length"
    head_dim = field(r, key) if key in r.fields else field(r, f"{arch}.embedding_length") // heads
    return {"tensor_bytes": sum(int(t.n_bytes) for t in r.tensors), "heads": heads,
            "kv_per_token": layers * 2 * kv_heads * head_dim * 2}


@pytest.mark.parametrize("rel", [STORIES, SMOLLM2, QWEN3],
                         ids=["stories260K", "SmolLM2-Q4_1", "qwen3-random"])
def test_gguf_weight_bytes_are_the_tensor_sizes(rel):
    path = rel if os.path.isabs(rel) else model_path(rel)
    facts = gguf_facts(path)
    tensor_bytes, kv_per_token = facts["tensor_bytes"], facts["kv_per_token"]
    plan = pagoda_json("plan", path, "--json", "--device", "cpu", "--device-memory", "4GiB")
    assert plan["weight_bytes"] == tensor_bytes
    assert plan["kv_bytes_per_token"] == kv_per_token
    assert plan["source"]["kind"] == "gguf"
    # fp16 K and V, as the engine's KvStorage keeps them: the same bytes as bf16.
    plan16 = pagoda_json("plan", path, "--json", "--kv-cache-dtype", "fp16", "--device", "cpu",
                         "--device-memory", "4GiB")
    assert plan16["kv_bytes_per_token"] == kv_per_token
    # Tensor-parallel ranks split the matrices and replicate the norms.
    tp = 2 if facts["heads"] % 2 == 0 else 3
    split = pagoda_json("plan", path, "--json", "-tp", tp, "--device-memory", "4GiB")
    assert tensor_bytes / tp <= split["weight_bytes"] < tensor_bytes / tp * 1.05


def test_a_recipe_cuda_does_not_run_is_noted():
    # Qwen3's q/k norms run on the CPU only: the plan says so rather than just "fits".
    plan = pagoda_json("plan", model_path(QWEN3), "--json", "--device-memory", "4GiB")
    assert any("CUDA backend does not run this model (q/k norms" in n for n in plan["notes"]), \
        plan["notes"]
    smol = pagoda_json("plan", model_path(SMOLLM2), "--json", "--device-memory", "4GiB")
    assert not any("CUDA backend" in n for n in smol["notes"]), smol["notes"]


def test_json_keys_and_arithmetic():
    p = pagoda_json("plan", "llama-3.1-8b", "--json", "--context", "8192", "--concurrency", "4")
    for k in KEYS:
        assert k in p, k
    for k in OVERHEAD_KEYS:
        assert k in p["overheads"], k
    assert isinstance(p["fits"], bool)
    o = p["overheads"]
    assert o["total_bytes"] == o["activations_bytes"] + o["fp8_activations_bytes"] + \
        o["logits_bytes"] + o["runtime_context_bytes"]
    assert o["fp8_activations_bytes"] == 0  # bf16 weights
    assert p["kv_pool_bytes"] == p["budget_bytes"] - p["weight_bytes"] - o["total_bytes"]
    assert p["kv_bytes_per_sequence"] == p["kv_bytes_per_token"] * 8192
    assert p["max_concurrent_sequences"] == p["kv_pool_bytes"] // p["kv_bytes_per_sequence"]
    assert p["fits"] == (p["max_concurrent_sequences"] >= 4)
    # The device named by the issue, memory as nvidia-smi reports it.
    assert p["device"]["name"] == "H100-80G"
    assert p["device"]["memory_bytes"] == 81559 * 2**20


def test_fp8_weights_count_their_activation_scratch():
    # Llama-3.1-8B (hidden 4096, q 4096, k and v 1024, FFN 14336) at 8192 batched tokens:
    # the CUDA backend quantizes the batch's activations to one byte at the widest input
    # (14336), plus a 16-token fp32 tile at the widest output (gate and up, 2 x 14336).
    want = 8192 * 14336 + 16 * 28672 * 4
    args = ["plan", "llama-3.1-8b", "--dtype", "fp8", "--max-num-batched-tokens", "8192"]
    p = pagoda_json(*args, "--json")
    o = p["overheads"]
    assert o["fp8_activations_bytes"] == want
    assert o["total_bytes"] == o["activations_bytes"] + want + o["logits_bytes"] + \
        o["runtime_context_bytes"]
    assert p["kv_pool_bytes"] == p["budget_bytes"] - p["weight_bytes"] - o["total_bytes"]
    text = run_pagoda(*args).stdout
    assert "fp8 activations (8,192 tokens)" in text
    assert f"{want:,}" in text
    # bf16 weights, or fp8 on the CPU: no such line.
    assert "fp8 activations" not in run_pagoda("plan", "llama-3.1-8b").stdout
    cpu = pagoda_json(*args, "--device", "cpu", "--device-memory", "64GiB", "--json")
    assert cpu["overheads"]["fp8_activations_bytes"] == 0


def test_seed_example_70b_at_128k():
    text = run_pagoda("plan", "llama-3.1-70b", "--context", "131072").stdout
    assert "327,680 bytes" in text
    assert "42,949,672,960 bytes (40.0 GiB) at 131,072 tokens" in text
    assert "2,621,440 bytes/token (2.5 MiB)" in text  # the MHA-equivalent figure
    assert "(320.0 GiB) at 131,072 tokens" in text
    p = pagoda_json("plan", "llama-3.1-70b", "--context", "131072", "--json")
    assert p["kv_bytes_per_token"] == 2 * 80 * 8 * 128 * 2
    assert p["kv_bytes_per_sequence"] == 40 * 2**30
    assert p["mha_equivalent_kv_bytes_per_token"] == 2 * 80 * 8192 * 2
    assert p["mha_equivalent_kv_bytes_per_sequence"] == 320 * 2**30


def test_list_names_every_catalog_model():
    text = run_pagoda("plan", "--list").stdout
    for name in CATALOG:
        assert name in text
    listed = pagoda_json("plan", "--list", "--json")
    assert [m["name"] for m in listed] == CATALOG
    for name in CATALOG:
        p = pagoda_json("plan", name, "--json", "--context", "4096")
        assert p["weight_bytes"] > 0 and p["kv_bytes_per_token"] > 0


def apply(args, flags):
    """Replaces or appends each --flag value pair of a suggestion."""
    words = shlex.split(flags)
    out = list(args)
    for flag, value in zip(words[::2], words[1::2]):
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out


@pytest.mark.parametrize("args", [
    ["llama-3.1-70b", "--context", "131072"],
    ["llama-3.1-8b", "--device-memory", "RTX4090-24G", "--context", "131072",
     "--concurrency", "8"],
    ["qwen3-235b-a22b", "--device-memory", "H200-141G", "--context", "32768"],
    ["llama-3.1-8b", "--device", "cpu", "--device-memory", "48GiB", "--context", "32768",
     "--concurrency", "8"],
])
def test_suggestions_fit_when_applied(args):
    p = pagoda_json("plan", *args, "--json")
    assert not p["fits"]
    assert p["suggestions"], p["notes"]
    for s in p["suggestions"]:
        again = pagoda_json("plan", *apply(args, s["flags"]), "--json")
        assert again["fits"], s
        assert again["max_concurrent_sequences"] == s["max_concurrent_sequences"]


def test_fp8_kv_is_suggested_only_where_it_runs():
    # 8 sequences of 32K tokens of Llama-3.1-8B: bf16 KV does not fit in 48 GiB, FP8 KV
    # would; the CPU backend keeps its KV cache in fp16 or int8 (q8_0), so a CPU plan offers
    # int8 and never fp8 or int4.
    args = ["plan", "llama-3.1-8b", "--context", "32768", "--concurrency", "8",
            "--device-memory", "48GiB", "--json"]
    gpu = pagoda_json(*args)
    assert not gpu["fits"]
    assert "--kv-cache-dtype fp8" in [s["flags"] for s in gpu["suggestions"]]
    cpu = pagoda_json(*args, "--device", "cpu")
    assert not cpu["fits"]
    assert cpu["kv_cache_dtype"] == "fp16"
    assert cpu["suggestions"], cpu["notes"]
    assert "--kv-cache-dtype int8" in [s["flags"] for s in cpu["suggestions"]]
    for s in cpu["suggestions"]:
        assert not any(f"--kv-cache-dtype {t}" in s["flags"] for t in ("fp8", "int4")), s
    # A GGUF model the CPU engine runs.
    small = pagoda_json("plan", model_path(SMOLLM2), "--device", "cpu", "--device-memory",
                        "1GiB", "--context", "8192", "--concurrency", "4", "--json")
    assert not small["fits"]
    assert small["suggestions"], small["notes"]
    for s in small["suggestions"]:
        assert not any(f"--kv-cache-dtype {t}" in s["flags"] for t in ("fp8", "int4")), s


def test_config_json_and_checkpoint_folder(tmp_path):
    config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
              "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 131072,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    from_json = pagoda_json("plan", tmp_path / "config.json", "--json", "--context", "4096")
    catalog = pagoda_json("plan", "llama-3.1-8b", "--json", "--context", "4096")
    assert from_json["weight_bytes"] == catalog["weight_bytes"]
    assert from_json["kv_bytes_per_token"] == catalog["kv_bytes_per_token"]
    total = 16_060_522_496
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": {}}))
    folder = pagoda_json("plan", tmp_path, "--json", "--context", "4096")
    assert folder["weight_bytes"] == total
    assert folder["source"]["kind"] == "checkpoint"


def expect_error(args, *fragments):
    proc = run_pagoda(*args, check=False)
    assert proc.returncode in (1, 2), f"exit {proc.returncode}: {proc.stderr}"
    assert proc.stdout == ""
    for f in fragments:
        assert f in proc.stderr, f"expected '{f}' in: {proc.stderr}"


def test_errors_are_clear(tmp_path):
    expect_error(["plan", "llama-3.1-7b"], "unknown model 'llama-3.1-7b'", "llama-3.1-8b",
                 "--list")
    expect_error(["plan"], "missing MODEL")
    expect_error(["plan", "llama-3.1-8b", "--frob"], "unknown flag '--frob'")
    expect_error(["plan", "llama-3.1-8b", "--dtype", "int3"], "unknown weight type 'int3'",
                 "int4-g128")
    expect_error(["plan", "llama-3.1-8b", "--kv-cache-dtype", "fp4"], "unknown KV cache type")
    expect_error(["plan", "llama-3.1-8b", "--device-memory", "80XB"], "80XB")
    expect_error(["plan", "llama-3.1-8b", "--device-memory", "H300"], "H100-80G")
    expect_error(["plan", "llama-3.1-8b", "--context", "long"], "expects an integer")
    expect_error(["plan", "llama-3.1-8b", "--context", "0"], "--context")
    expect_error(["plan", "llama-3.1-8b", "--gpu-memory-utilization", "1.5"],
                 "--gpu-memory-utilization")
    expect_error(["plan", "llama-3.1-70b", "--tensor-parallel-size", "3"], "does not divide")
    expect_error(["plan", "smollm2-135m", "--pipeline-parallel-size", "64"], "exceeds")
    expect_error(["plan", "llama-3.1-8b", "--device", "tpu"], "--device")
    expect_error(["plan", "llama-3.1-8b", "--kv-cache-memory", "-1"], "--kv-cache-memory")
    # Bad files.
    data = open(STORIES, "rb").read()
    trunc = tmp_path / "trunc.gguf"
    trunc.write_bytes(data[:1000])
    expect_error(["plan", trunc], "truncated")
    bad_json = tmp_path / "config.json"
    bad_json.write_text("{not json")
    expect_error(["plan", bad_json], "not a JSON object")
    bad_json.write_text(json.dumps({"hidden_size": 64}))
    expect_error(["plan", bad_json], "num_hidden_layers")
    empty = tmp_path / "empty"
    empty.mkdir()
    expect_error(["plan", empty], "no config.json")
    vocab = os.path.join(SHARED, "testdata", "tokenizer", "ggml-vocab-llama-spm.gguf")
    expect_error(["plan", vocab], "no tensors")


def test_help():
    proc = run_pagoda("plan", "--help")
    assert "usage: pagoda plan" in proc.stdout
    assert "--kv-cache-dtype" in proc.stdout
