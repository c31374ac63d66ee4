"""Every chat template in shared/testdata/chat-templates renders byte-identical to jinja2
(configured as Hugging Face configures it) for a set of conversations; where jinja2 raises,
`pagoda template` fails with the message."""
import functools
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

ASSISTANT_TOOL_CALLS = {"role": "assistant", "content": "",
                        "tool_calls": [tool_call({"location": "Paris", "days": 2}, False)]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}

# name: (messages, tools, extra template variables)
CONVERSATIONS = {
    "system_user": ([SYSTEM, USER], None, {}),
    "user_only": ([USER], None, {}),
    "multi_turn": ([SYSTEM, USER, ASSISTANT, USER2], None, {}),
    "multi_turn_no_system": ([USER, ASSISTANT, USER2], None, {}),
    "ends_with_assistant": ([USER, ASSISTANT], None, {}),
    "non_ascii": ([{"role": "system", "content": "Réponds en français, s'il te plaît."},
                   {"role": "user",
                    "content": "  Grüße! 日本語で「こんにちは」🎉 <b>&\"quotes\"</b>\n"},
                   {"role": "assistant", "content": "Bonjour ! Ça va ? — ok\t"},
                   {"role": "user", "content": "Merci 🙏"}], None, {}),
    "thinking": ([USER, {"role": "assistant",
                         "content": "<think>\nParis is the capital.\n</think>\n\nParis."},
                  USER2], None, {}),
    "thinking_disabled": ([SYSTEM, USER, ASSISTANT, USER2], None, {"enable_thinking": False}),
    "tools_defined": ([SYSTEM, USER], TOOLS, {}),
    "tools_empty_list": ([SYSTEM, USER], [], {}),
    "tool_calls": ([USER, ASSISTANT_TOOL_CALLS, TOOL_RESULT,
                    {"role": "assistant", "content": "It is 21°C and clear in Paris."},
                    USER2], TOOLS, {}),
    "tool_calls_pending": ([SYSTEM, USER, ASSISTANT_TOOL_CALLS, TOOL_RESULT], TOOLS, {}),
    "parallel_tool_calls": ([USER, {"role": "assistant", "content": "Checking both.",
                                    "tool_calls": [tool_call({"location": "Paris"}, False),
                                                   tool_call({"location": "Rome"}, False)]},
                             TOOL_RESULT, dict(TOOL_RESULT, content="cloudy")], TOOLS, {}),
    "tool_calls_string_args": ([SYSTEM, USER,
                                {"role": "assistant", "content": "",
                                 "tool_calls": [tool_call({"location": "Zürich"}, True)]},
                                {"role": "tool", "tool_call_id": "call12345",
                                 "content": "sunny"}], TOOLS, {}),
    "tool_calls_content_none": ([USER,
                                 {"role": "assistant", "content": None,
                                  "tool_calls": [tool_call({"location": "Zürich"}, True)]},
                                 {"role": "tool", "tool_call_id": "call12345",
                                  "content": "sunny"}], TOOLS, {}),
    "template_kwargs": ([SYSTEM, USER], TOOLS,
                        {"builtin_tools": ["browser", "python", "code_interpreter"],
                         "reasoning_effort": "high", "date_string": "01 Jan 2025",
                         "documents": [{"doc_id": 1, "text": "Paris is in France."}]}),
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
    messages, tools, extra = CONVERSATIONS[conv]
    name = os.path.basename(path)[:-len(".jinja")]
    kwargs = dict(TEMPLATE_KWARGS.get(name, {}), **extra)
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


@functools.lru_cache(maxsize=None)
def gguf_template_and_tokens(path):
    """tokenizer.chat_template and the bos/eos token texts, read with the gguf package."""
    from gguf import GGUFReader
    reader = GGUFReader(path)

    def field(name):
        return reader.fields.get(name)

    f = field("tokenizer.chat_template")
    template = bytes(f.parts[f.data[0]]).decode("utf-8")
    tokens = field("tokenizer.ggml.tokens")
    out = {}
    for key in ("bos", "eos"):
        idf = field(f"tokenizer.ggml.{key}_token_id")
        if idf is not None:
            tid = int(idf.parts[idf.data[0]][0])
            out[f"{key}_token"] = bytes(tokens.parts[tokens.data[tid]]).decode("utf-8")
    return template, out


GGUF_MODELS = [
    os.path.join("models", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    os.path.join("models", "qwen2-random.gguf"),
    os.path.join(SHARED, "testdata", "tokenizer", "ggml-vocab-phi-3.gguf"),
    os.path.join(SHARED, "testdata", "tokenizer", "ggml-vocab-qwen2.gguf"),
]


@pytest.mark.parametrize("rel", GGUF_MODELS, ids=os.path.basename)
@pytest.mark.parametrize("conv", ["system_user", "multi_turn", "non_ascii"])
def test_template_from_gguf(tmp_path, rel, conv):
    from pagoda_util import model_path
    path = model_path(rel) if not os.path.isabs(rel) else rel
    template, special = gguf_template_and_tokens(path)
    special = dict(special)
    messages = CONVERSATIONS[conv][0]
    expected, error = render(template, chat_context(messages, None, True, **special))
    assert error is None, error
    mfile = tmp_path / "messages.json"
    mfile.write_text(json.dumps(messages, ensure_ascii=False), encoding="utf-8")
    proc = subprocess.run([PAGODA, "template", "-m", path, "--messages", str(mfile),
                           "--add-generation-prompt"], capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode("utf-8") == expected


def test_cli_errors(tmp_path):
    mfile = tmp_path / "m.json"
    mfile.write_text("[{\"role\": \"user\", \"content\": \"hi\"}]")
    bad = tmp_path / "bad.jinja"
    bad.write_text("line one\n{% for x in messages %}\n{{ x.content + 1 }}\n{% endfor %}")
    proc = subprocess.run([PAGODA, "template", "--template", str(bad), "--messages", str(mfile)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "line 3" in proc.stderr and "concatenate" in proc.stderr
    syntax = tmp_path / "syntax.jinja"
    syntax.write_text("ok\n\n{% if messages %}\nunclosed")
    proc = subprocess.run([PAGODA, "template", "--template", str(syntax), "--messages",
                           str(mfile)], capture_output=True, text=True)
    assert proc.returncode == 1 and "syntax error" in proc.stderr and "endif" in proc.stderr
    unsupported = tmp_path / "unsupported.jinja"
    unsupported.write_text("{% extends 'base.html' %}")
    proc = subprocess.run([PAGODA, "template", "--template", str(unsupported), "--messages",
                           str(mfile)], capture_output=True, text=True)
    assert proc.returncode == 1 and "not supported" in proc.stderr and "extends" in proc.stderr
    notjson = tmp_path / "notjson.json"
    notjson.write_text("[{")
    proc = subprocess.run([PAGODA, "template", "--template", str(bad), "--messages",
                           str(notjson)], capture_output=True, text=True)
    assert proc.returncode == 1 and "not valid JSON" in proc.stderr
    proc = subprocess.run([PAGODA, "template", "--messages", str(mfile)], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and "--template" in proc.stderr
    proc = subprocess.run([PAGODA, "template", "-m", os.path.join(
        SHARED, "testdata", "tokenizer", "ggml-vocab-gpt-2.gguf"), "--messages", str(mfile)],
        capture_output=True, text=True)
    assert proc.returncode == 1 and "chat_template" in proc.stderr


def test_mutated_templates_match_jinja2(tmp_path):
    """Hostile and broken input: the sample templates with random edits (stray delimiters,
    cut tags, spliced fragments) must never crash Pagoda, and must fail exactly where jinja2
    fails and otherwise render what it renders."""
    import random
    import re
    rng = random.Random(7)
    sources = [open(p, encoding="utf-8").read() for p in TEMPLATES]
    pieces = list("{}%#-+ \n'\"()[]|.,~=:") + [
        "{%", "%}", "{{", "}}", "{#", "#}", "-%}", "{%-", "endif", "endfor", " if ", " else ",
        "not ", "loop.", "|trim", "[0]", "\\n"]
    cases = []
    for _ in range(600):
        s = rng.choice(sources)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(s) + 1)
            op = rng.randrange(3)
            if op == 0:
                s = s[:i] + rng.choice(pieces) + s[i:]
            elif op == 1:
                s = s[:i] + s[i + rng.randrange(1, 6):]
            else:
                j = rng.randrange(len(s) + 1)
                s = s[:i] + s[j:j + rng.randrange(1, 30)] + s[i:]
        messages, tools, extra = CONVERSATIONS[rng.choice(sorted(CONVERSATIONS))]
        cases.append((s, chat_context(messages, tools, rng.random() < 0.5, BOS, EOS, **extra)))
    path = tmp_path / "cases.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for template, ctx in cases:
            f.write(json.dumps({"template": template, "context": ctx}, ensure_ascii=False) + "\n")
    proc = subprocess.run([PAGODA, "template", "--batch", str(path)], capture_output=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    results = [json.loads(x) for x in proc.stdout.decode("utf-8").splitlines()]
    assert len(results) == len(cases)
    failures = []
    for (template, ctx), got in zip(cases, results):
        expected, error = render(template, ctx)
        if error is not None:
            if "error" not in got:
                failures.append(f"jinja2 raised {error!r}; pagoda rendered:\n{template}")
        elif not re.search(r" at 0x[0-9a-fA-F]+>", expected) and got.get("output") != expected:
            failures.append(f"differs ({got}):\n{template}")
    assert not failures, f"{len(failures)} differ:\n" + "\n----\n".join(failures[:5])
