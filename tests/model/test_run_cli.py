"""`pagoda run` end to end on the default model: seeds, streaming, stopping."""
import json

from pagoda_util import model_path, pagoda_json, run_pagoda

SMOL = "models/SmolLM2-135M-Instruct.Q4_1.gguf"


def test_same_seed_same_text_and_different_seeds_differ():
    m = model_path(SMOL)
    runs = [pagoda_json("run", "-m", m, "-p", "Once upon a time", "-n", 24, "--seed", s,
                        "--temperature", 1.0, "--top-k", 0, "--top-p", 1, "--min-p", 0, "--json")
            for s in (5, 5, 6)]
    assert runs[0]["tokens"] == runs[1]["tokens"]
    assert runs[0]["tokens"] != runs[2]["tokens"]


def test_streamed_text_equals_json_text():
    m = model_path(SMOL)
    args = ["run", "-m", m, "-p", "List three colors:", "-n", 40, "--temperature", 0]
    streamed = run_pagoda(*args).stdout
    j = pagoda_json(*args, "--json")
    assert streamed == j["text"] + "\n"
    assert len(j["tokens"]) == 40 and j["finish_reason"] == "length"


def test_chat_stops_at_end_of_turn():
    m = model_path(SMOL)
    out = pagoda_json("run", "-m", m, "--chat", "-p", "What is the tallest mountain in the world?",
                      "-n", 200, "--temperature", 0,
                      "--json")
    assert out["finish_reason"] == "stop"
    im_end = json.loads(run_pagoda("tokenize", "-m", m, "-p", "<|im_end|>", "--parse-special",
                                   "--json").stdout)["ids"]
    assert out["tokens"][-1] == im_end[0]
    assert "<|im_end|>" not in out["text"]


def test_stop_token_ids_and_zero_tokens():
    m = model_path(SMOL)
    first = pagoda_json("run", "-m", m, "-p", "The capital of France is", "-n", 8,
                        "--temperature", 0, "--json")["tokens"]
    stopped = pagoda_json("run", "-m", m, "-p", "The capital of France is", "-n", 8,
                          "--temperature", 0, "--json", "--stop-token-ids", str(first[2]))
    assert stopped["tokens"] == first[:3] and stopped["finish_reason"] == "stop"
    none = pagoda_json("run", "-m", m, "-p", "Hi", "-n", 0, "--json")
    assert none["tokens"] == [] and none["text"] == ""
