"""Random templates from a small grammar of the Jinja that chat templates use, for
differential testing against jinja2 (test_jinja_semantics.py runs a fixed-seed sample)."""
import random

NAMES = ["s", "n", "l", "d", "u", "t", "f", "e", "x", "i", "missing", "messages", "ns"]
STRS = ["''", "'a'", "'Hello'", "' pad '", "'é'", "'<b>'", "'a,b'", "'\\n'", "\"q'\""]
FILTERS = ["trim", "upper", "lower", "length", "first", "last", "string", "list", "tojson",
           "int", "float", "abs", "capitalize", "title", "reverse", "sort", "unique",
           "default('D')", "default('D', true)", "join(',')", "replace('a', 'b')", "items",
           "indent(2)", "round", "safe", "count", "wordcount", "center(5)", "batch(2)",
           "map('upper')", "select('odd')", "reject('none')", "dictsort", "sum", "min", "max",
           "tojson(indent=2)", "trim('a')", "truncate(5, true)", "format(1)"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping",
         "iterable", "sequence", "boolean", "true", "false", "odd", "even", "divisibleby 2",
         "equalto 1", "callable", "lower", "upper", "in [1, 'a']"]
METHODS = ["strip()", "upper()", "lower()", "split(',')", "split()", "startswith('a')",
           "endswith('b')", "replace('a', 'x')", "title()", "lstrip()", "rstrip('\\n')",
           "find('a')", "count('a')", "get('a')", "items()", "keys()", "values()",
           "get('zz', 1)", "index(1)", "format(1)", "capitalize()", "isdigit()"]
BINOPS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in",
          "not in", "and", "or"]


def expr(r, depth=0):
    k = r.randrange(12 if depth < 3 else 4)
    if k == 0:
        return r.choice(NAMES)
    if k == 1:
        return r.choice(STRS)
    if k == 2:
        return str(r.choice([0, 1, 2, -3, 7, 2.5, 1e16, 0.1, True, False, None])).replace(
            "True", "true").replace("False", "false").replace("None", "none")
    if k == 3:
        return r.choice(NAMES) + r.choice([".a", "[0]", "['a']", ".content", "[-1]", "[1:]",
                                           "[::-1]", ".role", ".x.y", "[:2]"])
    if k == 4:
        return f"({expr(r, depth + 1)} {r.choice(BINOPS)} {expr(r, depth + 1)})"
    if k == 5:
        return f"{expr(r, depth + 1)}|{r.choice(FILTERS)}"
    if k == 6:
        return f"({expr(r, depth + 1)} is {r.choice(['', 'not '])}{r.choice(TESTS)})"
    if k == 7:
        return f"({expr(r, depth + 1)} if {expr(r, depth + 1)} else {expr(r, depth + 1)})"
    if k == 8:
        return "[" + ", ".join(expr(r, depth + 1) for _ in range(r.randrange(3))) + "]"
    if k == 9:
        return "{" + ", ".join(f"{r.choice(STRS)}: {expr(r, depth + 1)}"
                               for _ in range(r.randrange(3))) + "}"
    if k == 10:
        return f"({expr(r, depth + 1)}).{r.choice(METHODS)}"
    return f"not {expr(r, depth + 1)}"


def ws(r):
    return r.choice(["", "", " ", "\n", "  \n  ", "\n\n", "\t"])


def dash(r):
    return r.choice(["", "", "-", "+"]) if r.random() < 0.5 else ""


def stmt(r, depth=0):
    k = r.randrange(15 if depth < 2 else 3)
    if k == 0:
        return ws(r) + r.choice(["text", "a b", "x", ""]) + ws(r)
    if k == 1:
        return "{{" + dash(r).replace("+", "") + " " + expr(r) + " " + dash(r).replace("+", "") + "}}"
    if k == 2:
        return "{#" + dash(r) + " c " + dash(r).replace("+", "") + "#}" + ws(r)
    if k == 3:
        return (f"{{%{dash(r)} if {expr(r)} %}}{body(r, depth)}{{% elif {expr(r)} {dash(r)}%}}"
                f"{body(r, depth)}{{% else %}}{body(r, depth)}{{%{dash(r)} endif %}}")
    if k == 4:
        return (f"{{%{dash(r)} for v in {expr(r)} %}}{ws(r)}{{{{ loop.index }}}}{body(r, depth)}"
                f"{{% else %}}E{{% endfor {dash(r).replace('+', '')}%}}")
    if k == 5:
        return f"{{% set {r.choice(['v', 'x', 's', 'w'])} = {expr(r)} %}}{ws(r)}"
    if k == 6:
        return f"{{% set ns.a = {expr(r)} %}}{{{{ ns.a }}}}"
    if k == 7:
        return (f"{{% macro m(p, q=1) %}}{body(r, depth)}{{{{ p }}}}{{% endmacro %}}"
                f"{{{{ m({expr(r)}) }}}}")
    if k == 8:
        return f"{{% filter {r.choice(['upper', 'trim', 'indent(1)'])} %}}{body(r, depth)}{{% endfilter %}}"
    if k == 9:
        return f"{ws(r)}{{%{dash(r)} raw {dash(r).replace('+', '')}%}}{ws(r)}{{{{ raw }}}}{ws(r)}{{%{dash(r)} endraw %}}"
    if k == 10:
        return (f"{{% macro w(a) %}}<{{{{ a }}}}|{{{{ caller(a) }}}}>{{% endmacro %}}"
                f"{{% call(z) w({expr(r)}) %}}{body(r, depth)}[{{{{ z }}}}]{{% endcall %}}")
    if k == 11:
        return (f"{{% for k, v in {r.choice(['d.items()', 'd|dictsort', '[(1, 2), (3, 4)]', 'messages|items'])} %}}"
                f"{{{{ k }}}}={{{{ v }}}}{{% if loop.index > 1 %}}{{% break %}}{{% endif %}}"
                f"{{{{ loop.previtem|default('-') }}}}{{% continue %}}x{{% endfor %}}")
    if k == 12:
        return f"{{% with q = {expr(r)} %}}{body(r, depth)}{{{{ q }}}}{{% endwith %}}"
    if k == 13:
        return f"{{% set blk %}}{body(r, depth)}{{% endset %}}[{{{{ blk }}}}]"
    return (ws(r) + r.choice(["  ", "\t", "", "x "]) + "{%" + dash(r) + " if " + expr(r) + " "
            + dash(r).replace("+", "") + "%}" + ws(r) + "y" + ws(r) + "{%" + dash(r)
            + " endif " + dash(r).replace("+", "") + "%}" + ws(r))


def body(r, depth):
    return "".join(stmt(r, depth + 1) for _ in range(r.randrange(1, 4)))


def template(r):
    return "{% set ns = namespace(a=0) %}" + body(r, 0) + ws(r)


CONTEXT = {
    "s": " Hi, there ", "n": None, "l": [3, 1, 2], "d": {"a": 1, "b": [1, 2]}, "u": "Grüße 🎉",
    "t": True, "f": False, "e": "", "x": 2.5, "i": 7,
    "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
}


def cases(seed, count):
    r = random.Random(seed)
    return [template(r) for _ in range(count)]
