"""Varied tokenizer inputs for comparing against a reference tokenizer.

Deterministic for a given seed. Each case is bytes (a few are deliberately not valid UTF-8).
"""
import random

ASCII_WORDS = ("the quick brown fox jumps over lazy dog Hello World HELLO hello tokenizer "
               "GPU inference engine llama Qwen2 Phi3 x y z a I e.g. i.e. etc").split()
CONTRACTIONS = ["don't", "DON'T", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "she'll",
                "SHE'LL", "he'd", "HE'D", "it's", "IT'S", "'s", "'S", "'t", "'T", "'re", "'Re",
                "'ve", "'vE", "'m", "'ll", "'lL", "'d", "'D", "o'clock", "rock'n'roll", "''",
                "'''", "' s", "y'all"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["...", "--", "—", "–", "…", "«»", "¿¡",
                                                      "“quoted”", "‘x’", "•", "·", "§", "¶"]
WHITESPACE = [" ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\n ", " \t ", "\u00a0",
              "\u3000", "\u2009", "\u200b", "\u2028", "\u0085", "\f", "\v", "        "]
CODE = [
    "def f(x):\n    return x ** 2  # square\n",
    "int main(void) {\n\treturn 0;\n}\n",
    "for (int i = 0; i < n; ++i) a[i] += b[i];",
    "{\"key\": [1, 2.5, -3e10, null], \"s\": \"a\\\"b\"}",
    "SELECT * FROM users WHERE id=42 AND name LIKE '%bob%';",
    "#include <vector>\nstd::vector<int> v{1,2,3};",
    "x = lambda a, b: a if a > b else b",
    "<div class=\"c\">&nbsp;&amp;</div>",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    if (x) {\n        y();\n    }\n",
    "$ ls -la | grep '^d' > out.txt 2>&1",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f**=6;g//=7",
]
SCRIPTS = [
    (0x4E00, 0x9FFF),    # CJK
    (0x3041, 0x3096),    # Hiragana
    (0x30A1, 0x30FA),    # Katakana
    (0xAC00, 0xD7A3),    # Hangul
    (0x0410, 0x044F),    # Cyrillic
    (0x0391, 0x03C9),    # Greek
    (0x05D0, 0x05EA),    # Hebrew
    (0x0627, 0x064A),    # Arabic
    (0x0905, 0x0939),    # Devanagari
    (0x0E01, 0x0E30),    # Thai
    (0x00C0, 0x00FF),    # Latin-1 letters
    (0x0100, 0x017F),    # Latin Extended-A
    (0x1E00, 0x1EFF),    # Latin Extended Additional (Vietnamese)
    (0x0300, 0x036F),    # combining marks
    (0x2070, 0x209F),    # super/subscripts
    (0x2150, 0x218B),    # number forms (Nl/No)
    (0x0660, 0x0669),    # Arabic-Indic digits
    (0xFF01, 0xFF5E),    # fullwidth forms
    (0x2200, 0x22FF),    # math symbols
    (0x1F300, 0x1F5FF),  # pictographs
    (0x1F600, 0x1F64F),  # emoticons
    (0x1F900, 0x1F9FF),  # supplemental symbols
    (0x10400, 0x1044F),  # Deseret (4-byte letters)
    (0x1D400, 0x1D4FF),  # math alphanumerics
    (0x0378, 0x0379),    # unassigned
    (0xE000, 0xE010),    # private use
]
EMOJI_SEQ = ["😶‍🌫️", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "✅", "🦙", "🇫🇷", "1️⃣", "🚀"]
ACCENTED = ["café", "naïve", "Äpfel", "Ångström", "façade", "résumé", "Crème brûlée",
            "São Paulo", "Zürich", "Łódź", "İstanbul", "ǅ", "ﬁ", "Straße", "e\u0301",
            "Cộng hòa", "Tiếng Việt"]
INVALID = [b"\x80", b"\xff", b"\xe2\x82", b"abc\xc3", b"\xc3(", b"\xed\xa0\x80x", b"\xf0\x9f\x98",
           b"\xc0\xaf", b"x\xfe\xfey"]


def _rand_script(rng, n):
    lo, hi = rng.choice(SCRIPTS)
    return "".join(chr(rng.randint(lo, hi)) for _ in range(n))


def _digits(rng):
    n = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 20])
    s = "".join(rng.choice("0123456789") for _ in range(n))
    return rng.choice([s, s + "." + s[:3], "-" + s, s + "%", "$" + s, s + "," + s, "v" + s])


def _fragment(rng, specials):
    kind = rng.randrange(12)
    if kind == 0:
        return " ".join(rng.choice(ASCII_WORDS) for _ in range(rng.randint(1, 6)))
    if kind == 1:
        return rng.choice(CONTRACTIONS)
    if kind == 2:
        return "".join(rng.choice(PUNCT) for _ in range(rng.randint(1, 4)))
    if kind == 3:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 4)))
    if kind == 4:
        return rng.choice(CODE)
    if kind == 5:
        return _rand_script(rng, rng.randint(1, 8))
    if kind == 6:
        return "".join(rng.choice(EMOJI_SEQ) for _ in range(rng.randint(1, 3)))
    if kind == 7:
        return rng.choice(ACCENTED)
    if kind == 8:
        return _digits(rng)
    if kind == 9 and specials:
        return rng.choice(specials)
    if kind == 10:
        w = rng.choice(ASCII_WORDS)
        return rng.choice([w.upper(), w.capitalize(), w.lower()])
    return rng.choice(["\n", " ", "  ", ". ", ", ", "\t"])


def ascii_cases():
    """Every printable ASCII character in a few contexts: category edge cases (which
    characters count as punctuation or symbol) hide in specific neighbourhoods."""
    out = []
    for code in range(0x20, 0x7F):
        c = chr(code)
        for t in (" {c}{c}", "x{c}y", "({c}", "{c}(", "/{c}", " {c}\n", "9{c}9", "{c}'s"):
            out.append(t.format(c=c).encode())
    out.append(bytes(range(0x20, 0x7F)))
    return out


def make_cases(seed, specials, count=300):
    """`count` generated cases, then ascii_cases(); `specials` are texts of special tokens
    of the vocabulary under test."""
    rng = random.Random(seed)
    cases = [b"", b" ", b"\n", b"  \n\n  ", b"a", b"A", b"1"]
    for text in specials[:8]:
        cases += [text.encode(), (" " + text + " ").encode(), ("x" + text + "\n").encode(),
                  (text + text).encode()]
    while len(cases) < count:
        n = rng.choice([1, 1, 2, 3, 4, 6, 10])
        s = "".join(_fragment(rng, specials) for _ in range(n))
        b = s.encode("utf-8")
        if rng.random() < 0.04:
            pos = rng.randint(0, len(b))
            b = b[:pos] + rng.choice(INVALID) + b[pos:]
        if b"\n__ggml_vocab_test__\n" in b:
            continue
        cases.append(b)
    return cases[:count] + ascii_cases()
