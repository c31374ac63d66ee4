"""Every chat template in shared/testdata/chat-templates renders byte-identical to jinja2
(configured as Hugging Face configures it) for a set of conversations; where jinja2 raises,
`pagoda template` fails with the message."""
import glob
import json
import os
import subprocess

import pytest

from jinja_reference import chat_context, render
from pagoda_util import PAGODA, SHARED

TEMPLATES = sorted(glob.glob(os.path.join(SHARED, "testdata", "chat-templates", "*.jinja")))
BOS, EOS = "<s>", "</s>"

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "The city, e.g. Zürich"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
                "days": {"type": "integer", "description": "Forecast days", "default": 1},
            },
            "required": ["location"],
        },
    }},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object",
                       "properties": {"query": {"type": "string", "description": "Query"},
                                      "tags": {"type": "array", "items": {"type": "string"},
                                               "description": "Tags"}},
                       "required": ["query"]},
    }},
]


def tool_call(args, as_string):
    return {"id": "call12345", "type": "function",
            "function": {"name": "get_weather",
                         "arguments": json.dumps(args, ensure_ascii=False) if as_string
                         else args}}


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "And of Germany?"}

CONVERSATIONS = {
    "system_user": ([SYSTEM, USER], None),
    "user_only": ([USER], None),
    "multi_turn": ([SYSTEM, USER, ASSISTANT, USER2], None),
    "multi_turn_no_system": ([USER, ASSISTANT, USER2], None),
    "ends_with_assistant": ([USER, ASSISTANT], None),
    "non_ascii": ([{"role": "system", "content": "Réponds en français, s'il te plaît."},
                   {"role": "user", "content": "  Grüße! 日本語で「こんにちは」🎉 <b>&\"quotes\"</b>\n"},
                   {"role": "assistant", "content": "Bonjour ! Ça va ? — ok\t"},
                   {"role": "user", "content": "Merci 🙏"}], None),
    "thinking": ([USER, {"role": "assistant",
                         "content": "<think>\nParis is the capital.\n</think>\n\nParis."},
                  USER2], None),
    "tools_defined": ([SYSTEM, USER], TOOLS),
    "tool_calls": ([USER, {"role": "assistant", "content": "",
                           "tool_calls": [tool_call({"location": "Paris", "days": 2}, False)]},
                    {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                     "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
                    {"role": "assistant", "content": "It is 21°C and clear in Paris."},
                    USER2], TOOLS),
    "tool_calls_string_args": ([SYSTEM, USER,
                                {"role": "assistant", "content": None,
                                 "tool_calls": [tool_call({"location": "Zürich"}, True)]},
                                {"role": "tool", "tool_call_id": "call12345",
                                 "content": "sunny"}], TOOLS),
}

# Variables some templates read that HF users pass as extra kwargs.
TEMPLATE_KWARGS = {
    "fireworks-ai-llama-3-firefunction-v2": {"functions": json.dumps(TOOLS),
                                             "datetime": "2024-07-26"},
}


def cases():
    for path in TEMPLATES:
        name = os.path.basename(path)[:-len(".jinja")]
        for conv in CONVERSATIONS:
            for agp in (False, True):
                yield pytest.param(path, conv, agp, id=f"{name}-{conv}-{'agp' if agp else 'noagp'}")


def run_template(tmp_path, path, messages, tools, agp, kwargs):
    mfile = tmp_path / "messages.json"
    mfile.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    cmd = [PAGODA, "template", "--template", path, "--messages", str(mfile),
           "--bos-token", BOS, "--eos-token", EOS]
    if tools is not None:
        tfile = tmp_path / "tools.json"
        tfile.write_text(json.dumps(tools, ensure_ascii=False), encoding="utf-8")
        cmd += ["--tools", str(tfile)]
    if agp:
        cmd.append("--add-generation-prompt")
    if kwargs:
        cmd += ["--kwargs", json.dumps(kwargs)]
    return subprocess.run(cmd, capture_output=True, timeout=60)


def test_all_templates_present():
    assert len(TEMPLATES) == 24


@pytest.mark.parametrize("path,conv,agp", list(cases()))
def test_template_matches_jinja2(tmp_path, path, conv, agp):
    messages, tools = CONVERSATIONS[conv]
    name = os.path.basename(path)[:-len(".jinja")]
    kwargs = TEMPLATE_KWARGS.get(name, {})
    source = open(path, encoding="utf-8").read()
    expected, error = render(source, chat_context(messages, tools, agp, BOS, EOS, **kwargs))
    proc = run_template(tmp_path, path, messages, tools, agp, kwargs)
    stderr = proc.stderr.decode("utf-8", "replace")
    if error is not None:
        assert proc.returncode == 1, f"jinja2 raised {error!r} but pagoda printed {proc.stdout!r}"
        if error.startswith("TemplateError: "):  # raise_exception: the template's own message
            assert error[len("TemplateError: "):] in stderr, stderr
        return
    assert proc.returncode == 0, f"pagoda failed where jinja2 rendered:\n{stderr}"
    assert proc.stdout.decode("utf-8") == expected
