"""The reference renderer: Python's jinja2 set up the way Hugging Face transformers sets it
up for chat templates (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, the loop
controls, the {% generation %} tag, raise_exception, strftime_now and HF's tojson)."""
import copy
import json
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class _Generation(Extension):
    # HF's AssistantTracker: {% generation %}...{% endgeneration %} renders its body.
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


ENV = make_env()


def render(source, context):
    """(output, None) or (None, error message)."""
    try:
        # A copy: some jinja2 filters change their input in place (indent on a list).
        return ENV.from_string(source).render(**copy.deepcopy(context)), None
    except Exception as e:  # noqa: BLE001 - any jinja2 failure is an expected outcome
        return None, f"{type(e).__name__}: {e}"


def chat_context(messages, tools=None, add_generation_prompt=False, bos_token=None,
                 eos_token=None, **kwargs):
    """What transformers' apply_chat_template passes to render()."""
    ctx = {"messages": messages, "tools": tools, "documents": None,
           "add_generation_prompt": add_generation_prompt}
    if bos_token is not None:
        ctx["bos_token"] = bos_token
    if eos_token is not None:
        ctx["eos_token"] = eos_token
    ctx.update(kwargs)
    return ctx
