"""Hugging Face checkpoint folders (config.json + safetensors) against the GGUF files they
were written from and against transformers running the same folder.

The folders are written by scripts/hf_from_gguf.py (gguf's reader, numpy, the safetensors
package), which undoes llama.cpp's Q/K permutation for Llama as transformers' GGUF loader
does; test_script_matches_transformers_gguf_conversion checks that against transformers'
own conversion. Pagoda runs an HF Llama with rotate-half (NeoX) RoPE on the unpermuted
rows, a GGUF Llama with adjacent-pair RoPE on the permuted ones: the same numbers, so the
folder's logits must equal the GGUF's up to the order of a few float sums.

Tolerances (measured on the CPU, x86-64 AVX2, stated in each test, as max |diff| over
the range of the reference logits): a Qwen2 folder equals its GGUF bitwise; a Llama
folder, whose Q/K rows are ordered otherwise, agrees with its GGUF to ~1e-3, about as
well as either agrees with transformers in float32 (Pagoda keeps the KV cache in fp16).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from pagoda_util import all_logits, MODELS, ROOT, model_path, run_pagoda

SCRIPT = os.path.join(ROOT, "scripts", "hf_from_gguf.py")
SMOL_F16 = "models/SmolLM2-135M-Instruct.F16.gguf"
SMOL_HF = "models/SmolLM2-135M-Instruct-hf"
QWEN2 = "models/qwen2-random.gguf"
QWEN3 = "models/qwen3-random.gguf"
LLAMA3 = "models/llama3-rope-random.gguf"
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
PROMPT = "The capital of France is Paris, and the capital of Italy is"


def write_folder(gguf, out, *flags):
    return write_folders([(gguf, out, *flags)])[0]


def write_folders(jobs):
    """SCRIPT on each (gguf, out, *flags) at once (each is one Python process, mostly
    reading the GGUF: the cores share them); returns the folders."""
    procs = [subprocess.Popen([sys.executable, SCRIPT, gguf, str(out), "--no-tokenizer",
                               *map(str, flags)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for gguf, out, *flags in jobs]
    for p in procs:
        _, err = p.communicate()
        assert p.returncode == 0, f"{' '.join(p.args)} failed ({p.returncode}):\n{err}"
    return [str(out) for _, out, *_ in jobs]


logits = all_logits


def prompt_tokens(gguf):
    return json.loads(run_pagoda("logits", "-m", gguf, "-p", PROMPT, "--json", "--top", 1)
                      .stdout)["tokens"]


def random_tokens(n_vocab, n, seed):
    return np.random.default_rng(seed).integers(0, n_vocab, n).tolist()


def rel_err(a, b):
    """Largest |a - b| over the range of b's logits."""
    return float(np.abs(a - b).max() / (b.max() - b.min()))


def greedy(model, tokens, steps):
    """`steps` greedy tokens, each the argmax of the last position's logits (`pagoda logits
    --top 1`: the largest, the lowest id among equals, as numpy's argmax; only the top-1
    is printed, not every position's whole vocabulary)."""
    tokens = list(tokens)
    for _ in range(steps):
        out = json.loads(run_pagoda("logits", "-m", model, "--tokens", " ".join(map(str, tokens)),
                                    "--top", 1, "--json").stdout)
        tokens.append(out["logits"][-1]["ids"][0])
    return tokens[-steps:]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Folders the tests share, written once (the reference SmolLM2 folder comes from
    scripts/fetch_models.sh)."""
    d = tmp_path_factory.mktemp("hf")
    smol = model_path(SMOL_F16)
    jobs = {
        "smol_sharded": (smol, d / "smol3", "--shards", "3"),
        "smol_f32": (smol, d / "smol32", "--dtype", "f32"),
        "smol_bf16": (smol, d / "smolbf", "--dtype", "bf16"),
        "qwen2": (model_path(QWEN2), d / "qwen2"),
        "qwen3": (model_path(QWEN3), d / "qwen3"),
        "llama3": (model_path(LLAMA3), d / "llama3", "--rope-scaling",
                   json.dumps(LLAMA3_SCALING)),
    }
    return {"smol": model_path(SMOL_HF), **dict(zip(jobs, write_folders(list(jobs.values()))))}


def test_reference_folder_is_complete():
    d = model_path(SMOL_HF)
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json"):
        assert os.path.isfile(os.path.join(d, f)), f
    cfg = json.load(open(os.path.join(d, "config.json")))
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["tie_word_embeddings"]


def test_folder_logits_equal_the_f16_gguf(folders, tmp_path):
    # The same F16 matrices and F32 norms, but Q/K rows in another order (and RoPE on
    # halves rather than pairs), so each q.k sums in another order; SmolLM2 amplifies
    # those last-bit differences to measured 5.5e-4 (prompt) and 1.4e-3 (random ids) of
    # the logits' range, about as far as either is from transformers (1.2e-3 to 1.5e-3).
    # Bound 4e-3, the same top token everywhere; Qwen2, not permuted, agrees bitwise.
    gguf = model_path(SMOL_F16)
    for tokens in (prompt_tokens(gguf), random_tokens(49152, 40, 1)):
        ref = logits(gguf, tokens)
        ours = logits(folders["smol"], tokens)
        assert rel_err(ours, ref) < 4e-3
        assert (ours.argmax(1) == ref.argmax(1)).all()
    # A control: left in llama.cpp's row order, the checkpoint is wrong, and it shows.
    wrong = write_folder(gguf, tmp_path / "wrong", "--keep-gguf-qk-order")
    tokens = random_tokens(49152, 40, 1)
    assert rel_err(logits(wrong, tokens), logits(gguf, tokens)) > 0.05


def test_folder_greedy_equals_the_f16_gguf(folders):
    gguf = model_path(SMOL_F16)
    tokens = prompt_tokens(gguf)
    assert greedy(folders["smol"], tokens, 8) == greedy(gguf, tokens, 8)


def test_sharded_folder_equals_single(folders):
    # The same bytes from three shards and an index: identical logits.
    tokens = random_tokens(49152, 24, 2)
    np.testing.assert_array_equal(logits(folders["smol_sharded"], tokens),
                                  logits(folders["smol"], tokens))
    assert len([f for f in os.listdir(folders["smol_sharded"]) if f.endswith(".safetensors")]) == 3


def test_f32_and_bf16_folders_load(folders):
    # F32: the F16 values widened, multiplied in f32 (not f16): measured 4e-4 of the
    # range; BF16: every weight rounded to 8 mantissa bits: measured ~2e-2. Bounds 3e-3
    # and 1e-1, and the same top token at most positions.
    gguf = model_path(SMOL_F16)
    tokens = prompt_tokens(gguf)
    ref = logits(gguf, tokens)
    f32 = logits(folders["smol_f32"], tokens)
    bf16 = logits(folders["smol_bf16"], tokens)
    assert rel_err(f32, ref) < 3e-3
    assert (f32.argmax(1) == ref.argmax(1)).mean() >= 0.9
    assert rel_err(bf16, ref) < 1e-1
    assert (bf16.argmax(1) == ref.argmax(1)).mean() >= 0.7


def test_qwen2_folder_equals_its_gguf(folders):
    # Qwen2 is not permuted and has q/k/v biases: the same F16 bytes, the same sums,
    # bitwise the same logits.
    gguf = model_path(QWEN2)
    tokens = random_tokens(151936, 32, 3)
    np.testing.assert_array_equal(logits(folders["qwen2"], tokens), logits(gguf, tokens))
    assert greedy(folders["qwen2"], tokens[:8], 6) == greedy(gguf, tokens[:8], 6)


def test_qwen3_folder_equals_its_gguf(folders):
    # Qwen3's q/k norm weights (self_attn.q_norm / k_norm) and a head size (64) that is not
    # width / heads: the same bytes as the GGUF, bitwise the same logits.
    gguf = model_path(QWEN3)
    tokens = random_tokens(151936, 32, 3)
    np.testing.assert_array_equal(logits(folders["qwen3"], tokens), logits(gguf, tokens))
    assert greedy(folders["qwen3"], tokens[:8], 6) == greedy(gguf, tokens[:8], 6)


def test_llama3_bf16_folder_equals_its_gguf(folders):
    # BF16 weights; the llama3 RoPE factors computed from config.json's rope_scaling must
    # be the rope_freqs.weight the GGUF holds, here checked against numpy's reading of
    # transformers' _compute_llama3_parameters, then through the logits.
    from gguf import GGUFReader
    r = GGUFReader(model_path(LLAMA3))
    stored = next(np.asarray(t.data, np.float32) for t in r.tensors if t.name == "rope_freqs.weight")
    s = LLAMA3_SCALING
    head_dim, theta = 32, 500000.0
    inv_freq = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
    wavelen = 2 * np.pi / inv_freq
    low, high = (s["original_max_position_embeddings"] / s["low_freq_factor"],
                 s["original_max_position_embeddings"] / s["high_freq_factor"])
    scaled = np.where(wavelen > low, inv_freq / s["factor"], inv_freq)
    smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
        s["high_freq_factor"] - s["low_freq_factor"])
    medium = ~(wavelen < high) & ~(wavelen > low)
    scaled = np.where(medium, (1 - smooth) * scaled / s["factor"] + smooth * scaled, scaled)
    np.testing.assert_allclose(inv_freq / scaled, stored, rtol=1e-6)

    gguf = model_path(LLAMA3)
    tokens = random_tokens(128256, 32, 4)
    ref = logits(gguf, tokens)
    ours = logits(folders["llama3"], tokens)
    assert rel_err(ours, ref) < 4e-3  # permuted Q/K, as SmolLM2
    assert (ours.argmax(1) == ref.argmax(1)).all()


def torch_or_skip():
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("torch is not installed: transformers cannot run the folder")


def transformers_logits(folder, tokens):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    m.eval()
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0].numpy()


@pytest.mark.parametrize("name,vocab,bound", [
    # Measured max |diff| / range over two sets of 24 ids (AVX2): SmolLM2 F16 1.5e-3 and
    # 8.8e-4, Qwen2 F16 2.5e-4 and 2.6e-4, Qwen3 F16 6.0e-4 and 3.8e-4, llama3-scaled BF16
    # 2.7e-3 and 3.3e-3.
    ("smol", 49152, 5e-3), ("qwen2", 151936, 2e-3), ("qwen3", 151936, 2e-3),
    ("llama3", 128256, 1e-2)])
def test_logits_agree_with_transformers(folders, name, vocab, bound):
    torch_or_skip()
    folder = folders[name]
    for seed in (5, 6):
        tokens = random_tokens(vocab, 24, seed)
        ref = transformers_logits(folder, tokens)
        ours = logits(folder, tokens)
        err = rel_err(ours, ref)
        print(f"{name}: max |pagoda - transformers| = {np.abs(ours - ref).max():.3g}, "
              f"{err:.3g} of the range")
        assert err < bound
        assert (ours.argmax(1) == ref.argmax(1)).mean() >= 0.9


def test_script_matches_transformers_gguf_conversion():
    # transformers' own GGUF reader (load_gguf_checkpoint, which needs torch; the
    # from_pretrained(gguf_file=) around it also wants accelerate) against our script's
    # folder: every tensor the same, so the Q/K reverse permutation is transformers' own.
    torch_or_skip()
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
    folder = model_path(SMOL_HF)
    skeleton = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    theirs = load_gguf_checkpoint(model_path(SMOL_F16), return_tensors=True,
                                  model_to_load=skeleton)["tensors"]
    ours = load_file(os.path.join(folder, "model.safetensors"))
    assert set(ours) == set(theirs)
    for k, v in ours.items():
        np.testing.assert_array_equal(v.astype(np.float32),
                                      theirs[k].float().numpy(), err_msg=k)


def test_cli_takes_a_folder(folders, tmp_path):
    folder = folders["smol"]
    gguf = model_path(SMOL_F16)
    info = run_pagoda("info", "-m", folder, "--tensors").stdout
    assert "LlamaForCausalLM" not in info and "llama, 30 layers, dim 576" in info
    assert "model.layers.0.self_attn.q_proj.weight" in info and "as blk.0.attn_q.weight" in info
    # The plan counts the engine's bytes: those of the F16 GGUF (same matrices, F32 norms).
    plan = lambda m: json.loads(run_pagoda("plan", m, "--json", "--device", "cpu",
                                           "--device-memory", "4GiB").stdout)
    p_folder, p_gguf = plan(folder), plan(gguf)
    assert p_folder["source"]["kind"] == "checkpoint"
    assert p_folder["weight_bytes"] == p_gguf["weight_bytes"]
    bench = lambda m: json.loads(run_pagoda("bench", "-m", m, "--prompt-len", 8, "--gen-len", 2,
                                            "--json").stdout)
    assert bench(folder)["weight_bytes"] == bench(gguf)["weight_bytes"]
    # --kl-base: the folder as the reference model of the GGUF's text.
    text = tmp_path / "t.txt"
    text.write_text(PROMPT * 40)
    kl = json.loads(run_pagoda("perplexity", "-m", gguf, "-f", text, "-c", 64, "--chunks", 1,
                               "--kl-base", folder, "--json").stdout)
    assert abs(kl["kld"]["mean"]) < 1e-4  # measured 3.1e-6 nats (the ~1e-3 logit noise above)
    assert kl["same_top"] == 1.0


def test_text_commands_run_from_the_folder(folders):
    # The folder's tokenizer.json and chat template drive run and logits: the same text as
    # the F16 GGUF gives the same greedy continuation, in plain and chat form.
    gguf = model_path(SMOL_F16)
    for extra in ([], ["--chat", "--system", "Answer in one word."]):
        outs = [json.loads(run_pagoda("run", "-m", m, "-p", PROMPT, "-n", 12, "--temperature", 0,
                                      "--json", *extra).stdout) for m in (folders["smol"], gguf)]
        assert outs[0]["prompt_tokens"] == outs[1]["prompt_tokens"], (extra, outs)
        assert outs[0]["text"] == outs[1]["text"], (extra, outs)
        assert outs[0]["text"].strip()


def test_broken_folders_are_refused(folders, tmp_path):
    def refused(folder, *fragments):
        p = run_pagoda("logits", "-m", folder, "--tokens", "1 2", check=False)
        assert p.returncode != 0
        for f in fragments:
            assert f in p.stderr, p.stderr

    src = folders["qwen2"]
    d = tmp_path / "broken"
    shutil.copytree(src, d)
    st = d / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(data[: len(data) - 100])
    refused(d, "model.safetensors", "outside the data section")
    st.write_bytes(data[:4])
    refused(d, "too short")
    st.write_bytes((1 << 40).to_bytes(8, "little") + data[8:])
    refused(d, "over the cap")
    st.write_bytes(data)
    cfg = json.loads((d / "config.json").read_text())
    for change, fragment in [({"architectures": ["GPT2LMHeadModel"]}, "'GPT2LMHeadModel'"),
                             ({"use_sliding_window": True}, "use_sliding_window"),
                             ({"rope_scaling": {"rope_type": "yarn", "factor": 4}}, "'yarn'"),
                             ({"num_hidden_layers": 4}, "model.layers.3.input_layernorm.weight"),
                             ({"hidden_size": 64}, "shape")]:
        (d / "config.json").write_text(json.dumps({**cfg, **change}))
        refused(d, fragment)
    (d / "config.json").write_text(json.dumps(cfg))
    os.remove(st)
    refused(d, "neither model.safetensors nor model.safetensors.index.json")
    # Qwen3: biases the recipe does not add, sliding windows, and a Qwen2 config over
    # Qwen3's q/k norm weights (tensors no recipe reads) are refused by name.
    q3 = tmp_path / "qwen3"
    shutil.copytree(folders["qwen3"], q3)
    cfg = json.loads((q3 / "config.json").read_text())
    for change, fragment in [({"attention_bias": True}, "attention_bias"),
                             ({"use_sliding_window": True}, "use_sliding_window"),
                             ({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2"},
                              "_norm.weight' in")]:
        (q3 / "config.json").write_text(json.dumps({**cfg, **change}))
        refused(q3, fragment)
