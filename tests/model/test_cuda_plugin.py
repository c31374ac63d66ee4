"""The CUDA backend is a plugin (build/libpagoda_cuda.so) that only `--device cuda` opens.

On a machine without a GPU (CI) this still proves the plugin links and loads against the
executable (every symbol it takes from it resolves) and that the failure is the GPU's
absence, reported as a clear error; with a GPU it runs. The CPU path never loads it
(tests/server/test_memory_ledger.py checks the server's mappings)."""
import json
import os

import pytest

from pagoda_util import PAGODA, SHARED, run_pagoda

PLUGIN = os.path.join(os.path.dirname(PAGODA), "libpagoda_cuda.so")
STORIES = os.path.join(SHARED, "models", "stories260K.gguf")


def generate(tmp_path, *flags, env=None):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text(json.dumps({"id": "a", "prompt": "Once upon a time", "max_tokens": 8,
                               "temperature": 0}) + "\n")
    old = dict(os.environ)
    try:
        os.environ.update(env or {})
        return run_pagoda("generate", "-m", STORIES, "--input", inp, "--output", out,
                          "--quiet", "--kv-cache-memory", "16MiB", *flags, check=False), out
    finally:
        os.environ.clear()
        os.environ.update(old)


@pytest.mark.skipif(not os.path.exists(PLUGIN), reason="built without CUDA")
def test_plugin_loads_and_reports_the_gpu(tmp_path):
    proc, out = generate(tmp_path, "--device", "cuda")
    if proc.returncode == 0:  # a GPU is present: greedy output equals the CPU's
        (tmp_path / "cpu").mkdir()
        cpu_proc, cpu_out = generate(tmp_path / "cpu")
        assert cpu_proc.returncode == 0, cpu_proc.stderr
        assert json.loads(out.read_text())["token_ids"] == json.loads(cpu_out.read_text())["token_ids"]
        return
    err = proc.stderr
    assert "cannot load the CUDA backend" not in err and "undefined symbol" not in err, err
    assert "plugin is missing" not in err, err
    # cudaErrorNoDevice / cudaErrorInsufficientDriver, through the plugin's memory query.
    assert "cuda" in err.lower() and ("device" in err.lower() or "driver" in err.lower()), err


@pytest.mark.skipif(not os.path.exists(PLUGIN), reason="built without CUDA")
def test_a_broken_plugin_is_a_clear_error(tmp_path):
    bad = tmp_path / "libpagoda_cuda.so"
    bad.write_bytes(b"not an ELF file")
    proc, _ = generate(tmp_path, "--device", "cuda", env={"PAGODA_CUDA_PLUGIN": str(bad)})
    assert proc.returncode != 0
    assert "cannot load the CUDA backend " + str(bad) in proc.stderr, proc.stderr


def test_unknown_device_is_rejected(tmp_path):
    proc, _ = generate(tmp_path, "--device", "tpu")
    assert proc.returncode != 0
    assert "--device must be cpu, cuda or cuda:N" in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag, value, message", [
    ("--kv-cache-dtype", "fp8",
     "--kv-cache-dtype fp8: the CPU backend keeps the KV cache in fp16 or q8_0; FP8 needs "
     "--device cuda"),
    ("--kv-cache-dtype", "int4", "--kv-cache-dtype int4 is not built"),
    ("--kv-cache-dtype", "fp4", "unknown --kv-cache-dtype 'fp4'"),
    ("--quantization", "fp8", "--quantization fp8 needs --device cuda"),
    ("--quantization", "awq", "unknown --quantization 'awq'"),
])
def test_storage_the_cpu_cannot_honour_is_refused(tmp_path, flag, value, message):
    proc, out = generate(tmp_path, flag, value)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert not out.exists() or out.read_text() == ""


def test_fp16_kv_cache_is_the_cpu_default(tmp_path):
    proc, out = generate(tmp_path, "--kv-cache-dtype", "fp16")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "auto").mkdir()
    auto_proc, auto_out = generate(tmp_path / "auto")
    assert auto_proc.returncode == 0, auto_proc.stderr
    assert json.loads(out.read_text())["token_ids"] == json.loads(auto_out.read_text())["token_ids"]


def test_bench_refuses_fp8_kv_on_the_cpu():
    proc = run_pagoda("bench", "-m", STORIES, "--kv-cache-dtype", "fp8", "-p", "8", "-n", "8",
                      check=False)
    assert proc.returncode != 0
    assert "FP8 needs --device cuda" in proc.stderr, proc.stderr


def test_bench_refuses_pipelined_decode_on_the_cpu():
    # The CPU runner runs each step as it is called: there is nothing to pipeline.
    proc = run_pagoda("bench", "-m", STORIES, "--async-scheduling", "-p", "8", "-n", "8",
                      check=False)
    assert proc.returncode != 0
    assert "--async-scheduling need --device cuda" in proc.stderr, proc.stderr


@pytest.mark.parametrize("name,value", [("PAGODA_CUDA_FUSE", "x"), ("PAGODA_CUDA_FUSE", "29"),
                                        ("PAGODA_CUDA_OMIT", "everything"),
                                        ("PAGODA_CUDA_SPLIT_KEYS", "256k"),
                                        ("PAGODA_CUDA_GRAPHS", "off"), ("PAGODA_CUDA_PDL", "no"),
                                        ("PAGODA_CUDA_PROFILE", "2"),
                                        ("PAGODA_CUDA_Q8_UNROLL", "3"), ("PAGODA_ISA", "avx3"),
                                        ("PAGODA_LOG", "loud")])
def test_mistyped_switches_are_refused_at_start_up(monkeypatch, name, value):
    # These were read with atoi / a first-character test, so a typo ran (and timed) another
    # configuration. Every PAGODA_* variable is read once, before any command runs, so no
    # model or GPU is needed to see the error.
    monkeypatch.setenv(name, value)
    proc = run_pagoda("bench", "-m", STORIES, "--device", "cuda", "-p", "8", "-n", "8",
                      check=False)
    assert proc.returncode == 2
    assert f"{name}={value}: expected" in proc.stderr, proc.stderr


def test_info_env_lists_every_switch_with_the_value_in_force(monkeypatch):
    monkeypatch.setenv("PAGODA_CUDA_FUSE", "rope,quant")
    monkeypatch.setenv("PAGODA_CUDA_SPLIT_KEYS", "512")
    out = run_pagoda("info", "--env").stdout
    rows = dict(line.split(None, 1) for line in out.splitlines() if line.startswith("PAGODA_"))
    assert rows["PAGODA_CUDA_FUSE"].strip() == "rope,quant"
    assert rows["PAGODA_CUDA_SPLIT_KEYS"].strip() == "512"
    assert rows["PAGODA_CUDA_GRAPHS"].strip() == "1"
    # The table names every PAGODA_* variable the sources mention as a switch.
    for name in ("PAGODA_LOG", "PAGODA_ISA", "PAGODA_CUDA_PLUGIN", "PAGODA_CUDA_OMIT",
                 "PAGODA_DEVICE_SAMPLING", "PAGODA_FAULT_INJECT", "PAGODA_API_KEY",
                 "PAGODA_FP8_FAST_ACCUM", "PAGODA_CUDA_PDL", "PAGODA_CUDA_Q8_UNROLL"):
        assert name in rows, name


def test_mistyped_device_sampling_switch_is_refused(tmp_path):
    proc, _ = generate(tmp_path, env={"PAGODA_DEVICE_SAMPLING": "off"})
    assert proc.returncode != 0
    assert "PAGODA_DEVICE_SAMPLING=off: expected 0 or 1" in proc.stderr, proc.stderr
    ok, out = generate(tmp_path, env={"PAGODA_DEVICE_SAMPLING": "0"})
    assert ok.returncode == 0, ok.stderr
    assert json.loads(out.read_text())["token_ids"]


@pytest.mark.skipif(not os.path.exists(PLUGIN), reason="built without CUDA")
def test_omitted_op_kinds_are_checked_before_the_load(monkeypatch):
    # PAGODA_CUDA_OMIT (timing experiments) names kinds of op; a misspelt one is an error.
    monkeypatch.setenv("PAGODA_CUDA_OMIT", "norm,rop")
    proc = run_pagoda("bench", "-m", STORIES, "--device", "cuda", "-p", "8", "-n", "8",
                      check=False)
    assert proc.returncode != 0
    assert "PAGODA_CUDA_OMIT=rop: expected names from: norm, qkv" in proc.stderr, proc.stderr
    monkeypatch.setenv("PAGODA_CUDA_OMIT", "norm,wo")  # valid: fails later, for want of a GPU
    proc = run_pagoda("bench", "-m", STORIES, "--device", "cuda", "-p", "8", "-n", "8",
                      check=False)
    assert "expected names" not in proc.stderr, proc.stderr
    assert "the outputs are wrong" in proc.stderr, proc.stderr
