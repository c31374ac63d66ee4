"""--chat-template and key order: a chat request with tools and a tool-call turn is rendered
with the request's key order, byte for byte as transformers' jinja2 renders it, and the
server runs exactly that prompt."""
import json
import os
import sys
from pathlib import Path

import pytest

from server_util import ROOT, SMOLLM2, ServerProcess

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "model"))
from jinja_reference import chat_context, render  # noqa: E402
from test_chat_templates import gguf_template_and_tokens  # noqa: E402

TEMPLATES = Path(os.environ.get("PAGODA_CHAT_TEMPLATES",
                                ROOT.parent / "shared" / "testdata" / "chat-templates"))
TEMPLATE = TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja"  # renders tools and tool calls

# Keys deliberately out of sorted order at every level, so a sorted `tojson` differs.
TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "required": ["city"],
            "properties": {
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "city": {"type": "string", "description": "The city, e.g. Paris"},
            },
        },
        "description": "Current weather in a city",
    },
}, {
    "type": "function",
    "function": {"name": "zone_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}, "as_24h": {"type": "boolean"}}},
        "description": "The time in a zone"},
}]
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{
        "type": "function", "id": "call_1",
        "function": {"name": "get_weather", "arguments": {"unit": "celsius", "city": "Paris"}},
    }]},
    {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
]


def sort_keys(x):
    return json.loads(json.dumps(x, sort_keys=True))


@pytest.fixture(scope="module")
def tserver():
    s = ServerProcess("--chat-template", TEMPLATE)
    yield s
    assert s.stop() == 0


def jinja2_prompt(messages, tools):
    _, special = gguf_template_and_tokens(str(SMOLLM2))  # the server passes these too
    out, err = render(TEMPLATE.read_text(),
                      chat_context(messages, tools=tools, add_generation_prompt=True, **special))
    assert err is None, err
    return out


def tokenize(server, body):
    st, _, payload = server.request("POST", "/tokenize", body)
    assert st == 200, payload
    return payload["tokens"]


def test_chat_with_tools_runs_jinja2s_prompt_with_request_key_order(tserver):
    prompt = jinja2_prompt(MESSAGES, TOOLS)
    assert '{"type": "function", "function": {"name": "get_weather"' in prompt
    assert '"arguments": {"unit": "celsius", "city": "Paris"}' in prompt
    sorted_prompt = jinja2_prompt(sort_keys(MESSAGES), sort_keys(TOOLS))
    assert sorted_prompt != prompt
    want = tokenize(tserver, {"prompt": prompt})
    sorted_tokens = tokenize(tserver, {"prompt": sorted_prompt})
    # The data is chosen so that even the token count tells the two orders apart.
    assert len(sorted_tokens) != len(want)

    # /tokenize renders the chat the way the chat route does.
    assert tokenize(tserver, {"messages": MESSAGES, "tools": TOOLS}) == want

    common = {"model": "smollm2", "temperature": 0, "max_tokens": 16, "ignore_eos": True}
    st, _, chat = tserver.request("POST", "/v1/chat/completions",
                                  {**common, "messages": MESSAGES, "tools": TOOLS})
    assert st == 200, chat
    assert chat["usage"]["prompt_tokens"] == len(want)
    st, _, comp = tserver.request("POST", "/v1/completions", {**common, "prompt": prompt})
    assert st == 200, comp
    assert comp["usage"]["prompt_tokens"] == len(want)
    assert chat["usage"]["completion_tokens"] == comp["usage"]["completion_tokens"] == 16
    assert chat["choices"][0]["message"]["content"] == comp["choices"][0]["text"]


def test_tool_call_arguments_sent_as_a_json_string_reach_the_template_as_an_object(tserver):
    # The OpenAI wire format: arguments are a JSON string. The template must see the
    # object (as vLLM passes it), key order kept.
    as_string = json.loads(json.dumps(MESSAGES))
    fn = as_string[2]["tool_calls"][0]["function"]
    fn["arguments"] = json.dumps(fn["arguments"])
    want = tokenize(tserver, {"prompt": jinja2_prompt(MESSAGES, TOOLS)})
    assert tokenize(tserver, {"messages": as_string, "tools": TOOLS}) == want
    # Not an object: passed through as the string.
    fn["arguments"] = "not json"
    raw = tokenize(tserver, {"prompt": jinja2_prompt(as_string, TOOLS)})
    assert tokenize(tserver, {"messages": as_string, "tools": TOOLS}) == raw


def test_chat_template_flag_errors(tmp_path):
    empty = tmp_path / "empty.jinja"
    empty.write_text("")
    for bad in (tmp_path / "missing.jinja", empty):
        with pytest.raises(AssertionError, match="chat-template"):
            ServerProcess("--chat-template", bad)
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    with pytest.raises(AssertionError, match="chat template"):
        ServerProcess("--chat-template", broken)
