"""OpenAI content as a list of parts, sent with the official openai client: a template that
loops over a message's content gets the parts, any other gets their text joined with "\\n"
(vLLM's "content format"), and the server runs exactly jinja2's rendering of that. Parts
that are not text are refused with a 400 naming their type."""
import copy
import os
import sys
from pathlib import Path

import openai
import pytest

from server_util import ROOT, SMOLLM2, ServerProcess

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "model"))
from jinja_reference import chat_context, render  # noqa: E402
from test_chat_templates import gguf_template_and_tokens  # noqa: E402

TEMPLATES = Path(os.environ.get("PAGODA_CHAT_TEMPLATES",
                                ROOT.parent / "shared" / "testdata" / "chat-templates"))
# (template, what it takes): Devstral's loops over content blocks; Qwen2.5's adds content
# to strings, and fails on a list.
CASES = [("unsloth-mistral-Devstral-Small-2507.jinja", "parts"),
         ("Qwen-Qwen2.5-7B-Instruct.jinja", "string")]

MESSAGES = [
    {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
    {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"},
                                 {"type": "text", "text": "Answer in one word."}]},
    {"role": "assistant", "content": "Four."},
    {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}]},
]


def joined(messages):
    """The messages as a string template sees them: each list's text parts joined."""
    out = copy.deepcopy(messages)
    for m in out:
        if isinstance(m["content"], list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
    return out


@pytest.fixture(scope="module", params=CASES, ids=[c[1] for c in CASES])
def case(request):
    name, takes = request.param
    server = ServerProcess("--chat-template", TEMPLATES / name)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=120)
    yield TEMPLATES / name, takes, server, client
    assert server.stop() == 0


def jinja2_prompt(template, messages):
    _, special = gguf_template_and_tokens(str(SMOLLM2))  # the server passes these too
    return render(template.read_text(),
                  chat_context(messages, add_generation_prompt=True, **special))


def tokenize(server, body):
    st, _, payload = server.request("POST", "/tokenize", body)
    assert st == 200, payload
    return payload["tokens"]


def test_list_content_renders_as_jinja2_renders_it(case):
    template, takes, server, client = case
    seen = MESSAGES if takes == "parts" else joined(MESSAGES)
    prompt, err = jinja2_prompt(template, seen)
    assert err is None, err
    # The two readings differ, so the tokens tell which one the server took.
    other, _ = jinja2_prompt(template, joined(MESSAGES) if takes == "parts" else MESSAGES)
    assert other != prompt
    if takes == "string":
        assert other is None  # the template cannot take a list at all
    want = tokenize(server, {"prompt": prompt})
    assert tokenize(server, {"messages": MESSAGES}) == want

    chat = client.chat.completions.create(model="smollm2", messages=MESSAGES, max_tokens=8,
                                          temperature=0, extra_body={"ignore_eos": True})
    assert chat.usage.prompt_tokens == len(want)
    comp = client.completions.create(model="smollm2", prompt=prompt, max_tokens=8, temperature=0,
                                     extra_body={"ignore_eos": True})
    assert comp.usage.prompt_tokens == len(want)
    assert chat.choices[0].message.content == comp.choices[0].text


def test_parts_that_are_not_text_are_refused_by_type(case):
    _, _, server, client = case
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}]
    with pytest.raises(openai.BadRequestError, match="image_url"):
        client.chat.completions.create(model="smollm2", messages=messages, max_tokens=4)
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    st, _, payload = server.request("POST", "/tokenize",
                                    {"messages": [{"role": "user", "content": [audio]}]})
    assert st == 400, payload
    assert "input_audio" in payload["error"]["message"]
