"""The official openai client against `pagoda serve` on SmolLM2: completions and chat,
streaming and not, n, stop strings, seeds, logprobs, and pagoda run's greedy output."""
import pytest

from server_util import SMOLLM2
from pagoda_run import run_greedy

PROMPT = "The capital of France is"


def test_models(client, model):
    models = client.models.list()
    assert [m.id for m in models.data] == [model]


def test_completion(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.id.startswith("cmpl-") and r.model == model
    assert len(r.choices) == 1 and r.choices[0].index == 0
    assert r.choices[0].finish_reason in ("stop", "length")
    assert 1 <= r.usage.completion_tokens <= 8
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r.choices[0].text


def test_greedy_matches_pagoda_run(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 24
    ref = run_greedy(SMOLLM2, PROMPT, 24)
    assert r.choices[0].text == ref["text"]
    assert r.usage.prompt_tokens == len(ref["prompt_tokens"])


def test_chat_greedy_matches_pagoda_run_on_the_jinja2_rendering(client, model):
    """Chat uses the model's own template: the prompt jinja2 renders from the GGUF's
    tokenizer.chat_template, run through `pagoda run`, gives the same greedy reply."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "model"))
    from jinja_reference import chat_context, render
    from test_chat_templates import gguf_template_and_tokens
    msgs = [{"role": "user", "content": "Name a colour."}]
    template, special = gguf_template_and_tokens(str(SMOLLM2))
    prompt, err = render(template, chat_context(msgs, add_generation_prompt=True, **special))
    assert err is None, err
    assert "<|im_start|>assistant" in prompt
    r = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    ref = run_greedy(SMOLLM2, prompt, 12, chat=False, ignore_eos=False)
    assert r.choices[0].message.content == ref["text"]
    assert r.choices[0].finish_reason == ref["finish_reason"]
    assert r.usage.prompt_tokens == len(ref["prompt_tokens"])


def test_completion_stream_equals_non_stream(client, model):
    full = client.completions.create(model=model, prompt=PROMPT, max_tokens=16, temperature=0)
    chunks = list(client.completions.create(model=model, prompt=PROMPT, max_tokens=16,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == full.choices[0].text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and
              c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        full.usage.completion_tokens


def test_chat_stream_equals_non_stream(client, model):
    msgs = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"}]
    full = client.chat.completions.create(model=model, messages=msgs, max_tokens=16,
                                          temperature=0)
    assert full.object == "chat.completion" and full.choices[0].message.role == "assistant"
    chunks = list(client.chat.completions.create(model=model, messages=msgs, max_tokens=16,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_n2_and_seed_reproducible(client, model):
    kw = dict(model=model, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=1234,
              n=2, extra_body={"ignore_eos": True})
    a = client.completions.create(**kw)
    b = client.completions.create(**kw)
    assert [c.index for c in a.choices] == [0, 1]
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.usage.completion_tokens == 24
    c = client.completions.create(**{**kw, "seed": 99})
    assert [x.text for x in c.choices] != [x.text for x in a.choices]


def test_n2_streaming_chat(client, model):
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=6, n=2,
        temperature=0.8, seed=5, stream=True))
    done = {c.choices[0].index for c in chunks if c.choices and c.choices[0].finish_reason}
    assert done == {0, 1}


def test_prompt_list_and_token_ids(server, client, model):
    ids = server.request("POST", "/tokenize", {"prompt": PROMPT})[2]["tokens"]
    r = client.completions.create(model=model, prompt=[PROMPT, ids], max_tokens=5,
                                  temperature=0)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.choices[0].text == r.choices[1].text
    assert r.usage.prompt_tokens == 2 * len(ids)
    r2 = client.completions.create(model=model, prompt=[ids, ids], max_tokens=5, temperature=0)
    assert r2.choices[1].text == r.choices[0].text


@pytest.mark.parametrize("stream", [False, True])
def test_stop_string(client, model, stream):
    base = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    words = base.split()
    assert len(words) >= 3, base
    stop = " " + words[2]
    expected = base[:base.index(stop)]
    kw = dict(model=model, prompt=PROMPT, max_tokens=24, temperature=0, stop=[stop, "zzzz"],
              extra_body={"ignore_eos": True})
    if stream:
        chunks = list(client.completions.create(stream=True, **kw))
        text = "".join(c.choices[0].text for c in chunks)
        reasons = [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason]
        # No chunk ever carried a piece of the stop string.
        assert all(stop not in c.choices[0].text for c in chunks)
    else:
        r = client.completions.create(**kw)
        text, reasons = r.choices[0].text, [r.choices[0].finish_reason]
    assert text == expected
    assert reasons == ["stop"]


def test_completion_logprobs(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=6, temperature=0,
                                  logprobs=3, extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert "".join(lp.tokens) == r.choices[0].text
    for tok, l, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert l <= 0 and 1 <= len(top) <= 3
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(l, abs=1e-4)
    assert lp.text_offset[0] == 0


def test_chat_logprobs(client, model):
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        assert bytes(t.bytes) == t.token.encode()
    chunks = list(client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=5,
        temperature=0, logprobs=True, top_logprobs=2, stream=True))
    streamed = [t.token for c in chunks if c.choices and c.choices[0].logprobs
                for t in c.choices[0].logprobs.content]
    assert streamed == [t.token for t in content]


def test_echo_and_max_completion_tokens(client, model):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=4, temperature=0,
                                  echo=True)
    assert r.choices[0].text.startswith(PROMPT)
    c = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Hi"}],
                                       max_completion_tokens=3, temperature=0,
                                       extra_body={"ignore_eos": True}, user="u1")
    assert c.usage.completion_tokens == 3 and c.choices[0].finish_reason == "length"


def test_sampling_parameters_accepted(client, model):
    r = client.completions.create(
        model=model, prompt=PROMPT, max_tokens=4, temperature=0.7, top_p=0.9, seed=3,
        presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "priority": 0})
    assert r.usage.completion_tokens >= 1


def test_tokenize_detokenize(server):
    st, _, t = server.request("POST", "/tokenize", {"prompt": PROMPT})
    assert st == 200 and t["count"] == len(t["tokens"]) and t["max_model_len"] == 2048
    st, _, d = server.request("POST", "/detokenize", {"tokens": t["tokens"]})
    assert st == 200 and d["prompt"] == PROMPT
    st, _, c = server.request("POST", "/tokenize",
                              {"messages": [{"role": "user", "content": "Hi"}]})
    assert st == 200 and c["count"] > 3


def test_health(server):
    st, _, _ = server.request("GET", "/health")
    assert st == 200
