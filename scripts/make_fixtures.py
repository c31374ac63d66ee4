#!/usr/bin/env python3
"""Reference fixtures from llama.cpp (through llama-cpp-python) for Pagoda's model tests.

For each model and prompt it records the prompt's token ids (llama.cpp's tokenizer), the
top-20 logits at every prompt position, and a 64-token greedy continuation (argmax of the
logits, end-of-generation tokens not special-cased) with the top-5 logits at every step.

It also records how far llama.cpp agrees with itself: the greedy steps are evaluated a
second time as one batch (prompt + continuation), which takes other kernels (batched
matrix products instead of matrix-vector ones) and so other summation orders. The largest
logit difference between the two ("self_noise") is the width of llama.cpp's own
numerical noise for that model and type; the tests allow Pagoda the same band.

The tests (tests/model/test_llamacpp_fixtures.py) compare Pagoda against these files.

    .venv/bin/pip install llama-cpp-python==0.3.36
    .venv/bin/python scripts/make_fixtures.py            # all models in models/

Settings: 2 threads, flash attention off (llama.cpp then keeps the softmax'ed attention
weights in f32 before the f16 product with V), the whole prompt in one batch.
"""
import argparse, hashlib, json, os, sys
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(ROOT, "..", "shared")

STORIES_PROMPTS = [
    ("Once upon a time", False),
    ("Lily and Tom went to the park. They saw a big", False),
    ("The little dog was sad because", False),
    ("One day, a girl named Sue found a shiny", False),
    ("Tim liked to play with his red ball. One day,", False),
    ("The sun was hot and the", False),
    ("Mom said, \"Let's go to the store.\"", False),
    ("There was a big tree in the garden. A bird", False),
    ("Ben had a toy car.", False),
    ("Once upon a time, there was a little girl named Lily. She loved to play outside. "
     "One day, she saw a cat in the tree. The cat was scared and could not come down. "
     "Lily wanted to help the cat, so she", False),
]

def general_prompts():
    with open(os.path.join(SHARED, "testdata", "text", "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakespeare = f.read()[:1500]
    return [
        ("The capital of France is", False),
        ("def fibonacci(n):\n    ", False),
        ("<|im_start|>user\nWhat is the tallest mountain in the world?<|im_end|>\n<|im_start|>assistant\n", True),
        ("Once upon a time, in a small village nestled between two mountains,", False),
        ("1, 1, 2, 3, 5, 8, 13,", False),
        ("Les pagodes japonaises sont construites en bois. Elles", False),
        ("東京は日本の首都です。", False),
        ("Translate to German: Good morning, how are you?\nGerman:", False),
        ("   leading spaces,\ttabs and\n\nnewlines: it's DON'T-stop 2024!", False),
        (shakespeare, False),
    ]

MODELS = {
    # name: (file under models/ or shared path, prompts, n_ctx)
    "stories260K": (os.path.join(SHARED, "models", "stories260K.gguf"), STORIES_PROMPTS, 512),
    "SmolLM2-Q4_1": (os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"), None, 1024),
    "SmolLM2-Q8_0": (os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q8_0.gguf"), None, 1024),
    "SmolLM2-F16": (os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.F16.gguf"), None, 1024),
    "qwen2-random": (os.path.join(ROOT, "models", "qwen2-random.gguf"), None, 1024),
    "qwen3-random": (os.path.join(ROOT, "models", "qwen3-random.gguf"), None, 1024),
    "llama3-rope-random": (os.path.join(ROOT, "models", "llama3-rope-random.gguf"), None, 1024),
}

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

def top(row, k):
    idx = np.argsort(-row, kind="stable")[:k]
    return [int(i) for i in idx], [round(float(row[i]), 4) for i in idx]

def make(name, path, prompts, n_ctx, n_gen=64):
    import llama_cpp
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2,
                n_threads_batch=2, logits_all=True, flash_attn=False, verbose=False)
    cases = []
    noise = {"max_abs_diff": 0.0, "argmax_flips": 0, "steps": 0}
    for text, special in prompts:
        toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
        llm.reset()
        llm.eval(toks)
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        prompt_top = [top(scores[i], 20) for i in range(len(toks))]
        gen, gen_top = [], []
        for _ in range(n_gen):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            ids, vals = top(row, 5)
            gen_top.append({"ids": ids, "values": vals})
            gen.append(ids[0])
            llm.eval([ids[0]])
        # The same tokens as one batch: llama.cpp's own batched-vs-sequential difference.
        llm.reset()
        llm.eval(toks + gen)
        batched = np.array(llm.scores[: len(toks) + n_gen], dtype=np.float32)
        for i, gt in enumerate(gen_top):
            row = batched[len(toks) - 1 + i]
            noise["max_abs_diff"] = max(noise["max_abs_diff"], max(
                abs(float(row[t]) - v) for t, v in zip(gt["ids"], gt["values"])))
            noise["argmax_flips"] += int(np.argmax(row)) != gt["ids"][0]
            noise["steps"] += 1
        cases.append({
            "prompt": text, "parse_special": special, "tokens": [int(t) for t in toks],
            "logits": [{"ids": i, "values": v} for i, v in prompt_top],
            "greedy": gen, "greedy_top": gen_top,
            "greedy_text": llm.detokenize(gen).decode("utf-8", errors="replace"),
        })
        print(f"  {name}: {len(toks)} prompt tokens, greedy starts {gen[:8]}", file=sys.stderr)
    return {
        "model": os.path.relpath(path, ROOT), "sha256": sha256(path),
        "reference": f"llama-cpp-python {llama_cpp.__version__}",
        "settings": {"n_threads": 2, "flash_attn": False, "n_batch": n_ctx, "n_gen": n_gen},
        "self_noise": {**noise, "max_abs_diff": round(noise["max_abs_diff"], 4)},
        "cases": cases,
    }

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(MODELS))
    args = ap.parse_args()
    out_dir = os.path.join(ROOT, "tests", "fixtures")
    os.makedirs(out_dir, exist_ok=True)
    for name in args.names:
        path, prompts, n_ctx = MODELS[name]
        data = make(name, path, prompts or general_prompts(), n_ctx)
        with open(os.path.join(out_dir, f"llamacpp_{name}.json"), "w") as f:
            json.dump(data, f, separators=(",", ":"))
        print(f"wrote tests/fixtures/llamacpp_{name}.json", file=sys.stderr)

if __name__ == "__main__":
    main()
