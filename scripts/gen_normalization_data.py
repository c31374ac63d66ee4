#!/usr/bin/env python3
"""Generates src/tokenizer/normalization_data.cpp: the Unicode data behind the tokenizer.json
normalizers NFC, NFD, NFKC, NFKD (UAX #15) and Lowercase, as sorted arrays for binary search.

Usage: scripts/gen_normalization_data.py > src/tokenizer/normalization_data.cpp

The source is Python's `unicodedata` module (UnicodeData.txt cannot be fetched on the build
machines, and Debian 12's python3 carries Unicode 14.0). The rest of the tokenizer follows
Unicode 15.1 (unicode_data.cpp), so the normalization-relevant entries of the characters added
in 15.0 are applied on top when the module is older (UNICODE_15_0_*): ten combining classes and
62 compatibility mappings (Cyrillic Extended-D superscripts). Unicode 15.1 added only CJK
Extension I and ideographic description characters: no decompositions, no combining classes,
no case mappings. 15.0 added no canonical decompositions and no case mappings, so composition
pairs, exclusions and Lowercase need nothing on top. (These lists were checked against ICU 72,
which implements Unicode 15.0.)

Tables written:
  kNormRuns       runs of code points sharing a canonical combining class and quick-check bits
  kDecompositions one-level decomposition mappings (Hangul syllables are left to the code)
  kDecompPool     the mapped code points, indexed by kDecompositions
  kCompositions   (first, second) -> primary composite, for canonical composition
  kLowercase      one-to-one lowercase mappings; kLowercaseLong the longer ones
"""
import sys
import unicodedata as ud

MAX_CODEPOINTS = 0x110000

# Quick-check bits; keep in sync with src/tokenizer/normalization_tables.h (NormQc).
NFD_NO, NFKD_NO, NFC_NO, NFC_MAYBE, NFKC_NO, NFKC_MAYBE = 1, 2, 4, 8, 16, 32

UNICODE_15_0_CCC = {
    0x10EFD: 220, 0x10EFE: 220, 0x10EFF: 220,  # Arabic small low word marks
    0x11F41: 9, 0x11F42: 9,  # Kawi sign killer, conjoiner
    0x1E08F: 230,  # combining Cyrillic small letter Byelorussian-Ukrainian i
    0x1E4EC: 232, 0x1E4ED: 232, 0x1E4EE: 220, 0x1E4EF: 230,  # Nag Mundari signs
}
# Modifier letters U+1E030..U+1E06D: <super> mappings to these Cyrillic letters, in order.
UNICODE_15_0_SUPER_TARGETS = [
    0x0430, 0x0431, 0x0432, 0x0433, 0x0434, 0x0435, 0x0436, 0x0437, 0x0438, 0x043A, 0x043B,
    0x043C, 0x043E, 0x043F, 0x0440, 0x0441, 0x0442, 0x0443, 0x0444, 0x0445, 0x0446, 0x0447,
    0x0448, 0x044B, 0x044D, 0x044E, 0xA689, 0x04D9, 0x0456, 0x0458, 0x04E9, 0x04AF, 0x04CF,
    0x0430, 0x0431, 0x0432, 0x0433, 0x0434, 0x0435, 0x0436, 0x0437, 0x0438, 0x043A, 0x043B,
    0x043E, 0x043F, 0x0441, 0x0443, 0x0444, 0x0445, 0x0446, 0x0447, 0x0448, 0x044A, 0x044B,
    0x0491, 0x0456, 0x0455, 0x045F, 0x04AB, 0xA651, 0x04B1,
]

S_BASE, L_BASE, V_BASE, T_BASE = 0xAC00, 0x1100, 0x1161, 0x11A7
L_COUNT, V_COUNT, T_COUNT = 19, 21, 28
S_COUNT = L_COUNT * V_COUNT * T_COUNT


def is_surrogate(c):
    return 0xD800 <= c <= 0xDFFF


def module_is_older_than_15():
    return tuple(int(x) for x in ud.unidata_version.split(".")) < (15, 0)


def load():
    """(ccc, decompositions) with decompositions {cpt: (compat, [mapped])}."""
    ccc = {}
    decomp = {}
    for c in range(MAX_CODEPOINTS):
        if is_surrogate(c):
            continue
        ch = chr(c)
        k = ud.combining(ch)
        if k:
            ccc[c] = k
        d = ud.decomposition(ch)
        if d:
            parts = d.split()
            compat = parts[0].startswith("<")
            decomp[c] = (compat, [int(p, 16) for p in (parts[1:] if compat else parts)])
    if module_is_older_than_15():
        for c, k in UNICODE_15_0_CCC.items():
            assert c not in ccc
            ccc[c] = k
        for k, target in enumerate(UNICODE_15_0_SUPER_TARGETS):
            assert 0x1E030 + k not in decomp
            decomp[0x1E030 + k] = (True, [target])
        assert 0x1E030 + len(UNICODE_15_0_SUPER_TARGETS) - 1 == 0x1E06D
    return ccc, decomp


def full_decomposition(c, decomp, compat, out):
    if S_BASE <= c < S_BASE + S_COUNT:
        s = c - S_BASE
        out.append(L_BASE + s // (V_COUNT * T_COUNT))
        out.append(V_BASE + (s % (V_COUNT * T_COUNT)) // T_COUNT)
        if s % T_COUNT:
            out.append(T_BASE + s % T_COUNT)
        return
    d = decomp.get(c)
    if d is None or (d[0] and not compat):
        out.append(c)
        return
    for m in d[1]:
        full_decomposition(m, decomp, compat, out)


def compositions(ccc, decomp):
    """Primary composites: canonical pair mappings whose first character is a starter, minus
    the composition exclusions. Python's NFC is the oracle for exclusions (an excluded
    character is exactly one that NFC does not give back); the script-specific and
    post-composition-version exclusions of CompositionExclusions.txt are all of that kind."""
    pairs = []
    for c, (compat, m) in decomp.items():
        if compat or len(m) != 2 or ccc.get(m[0], 0) != 0:
            continue
        if ud.normalize("NFC", chr(c)) != chr(c):
            continue  # a composition exclusion
        pairs.append((m[0], m[1], c))
    pairs.sort()
    return pairs


def quick_check_bits(decomp, pairs):
    """NFx_Quick_Check, as UAX #15 defines it: No where the character never appears in that
    form, Maybe where it may combine with a character before it (the second of a composition
    pair, Hangul vowels and trailing consonants). Checked against Python's normalize."""
    composites = {p[2] for p in pairs}
    composites.update(range(S_BASE, S_BASE + S_COUNT))
    second = {p[1] for p in pairs}
    second.update(range(V_BASE, V_BASE + V_COUNT))
    second.update(range(T_BASE + 1, T_BASE + T_COUNT))
    bits = {}
    for c in range(MAX_CODEPOINTS):
        if is_surrogate(c):
            continue
        canon, compat = [], []
        full_decomposition(c, decomp, False, canon)
        full_decomposition(c, decomp, True, compat)
        b = 0
        if canon != [c]:
            b |= NFD_NO
            if c not in composites:
                b |= NFC_NO
        if compat != [c]:
            b |= NFKD_NO
            if compat != canon or b & NFC_NO:
                b |= NFKC_NO
        if c in second:
            b |= (0 if b & NFC_NO else NFC_MAYBE) | (0 if b & NFKC_NO else NFKC_MAYBE)
        if not 0x1E030 <= c <= 0x1E06D:
            for form, bit in (("NFD", NFD_NO), ("NFKD", NFKD_NO), ("NFC", NFC_NO),
                              ("NFKC", NFKC_NO)):
                assert (ud.normalize(form, chr(c)) != chr(c)) == bool(b & bit), (hex(c), form)
        if b:
            bits[c] = b
    return bits


def runs(ccc, bits):
    out = [(0, 0, 0)]
    for c in range(MAX_CODEPOINTS):
        v = (ccc.get(c, 0), bits.get(c, 0))
        if v != out[-1][1:]:
            out.append((c, *v))
    return out


def lowercase():
    """Full lowercase mappings character by character, as Rust's char::to_lowercase (which is
    what `tokenizers` applies: no final-sigma context)."""
    single, long = [], []
    for c in range(MAX_CODEPOINTS):
        if is_surrogate(c):
            continue
        low = chr(c).lower()
        if low == chr(c):
            continue
        if len(low) == 1:
            single.append((c, ord(low)))
        else:
            long.append((c, [ord(x) for x in low]))
    return single, long


def write_rows(out, items, per_row):
    for k in range(0, len(items), per_row):
        out.write("  " + " ".join(items[k:k + per_row]) + "\n")


def main():
    ccc, decomp = load()
    pairs = compositions(ccc, decomp)
    bits = quick_check_bits(decomp, pairs)
    norm_runs = runs(ccc, bits)
    single, long = lowercase()

    pool = []
    entries = []
    for c in sorted(decomp):
        compat, m = decomp[c]
        entries.append((c, len(pool), len(m), int(compat)))
        pool.extend(m)
    assert len(pool) < 0x10000 and max(e[2] for e in entries) < 0x100
    assert max(len(m) for _, m in long) <= 3

    out = sys.stdout
    out.write("// Generated by scripts/gen_normalization_data.py from Python's unicodedata (Unicode "
              "%s)\n" % ud.unidata_version)
    if module_is_older_than_15():
        out.write("// with the Unicode 15.0 additions the script lists: Unicode 15.1 data.\n")
    out.write("// Do not edit by hand; clang-format is off for the tables.\n")
    out.write('#include "tokenizer/normalization_tables.h"\n\n')
    out.write("namespace pagoda::unicode {\n\n")
    out.write("// clang-format off\n")
    out.write("// {first code point of a run, combining class, quick-check bits}; a run ends where\n")
    out.write("// the next begins, the last at U+10FFFF.\n")
    out.write("const NormRun kNormRuns[] = {\n")
    write_rows(out, ["{0x%05X, %d, 0x%02X}," % r for r in norm_runs], 5)
    out.write("};\n")
    out.write("const size_t kNormRunCount = sizeof(kNormRuns) / sizeof(kNormRuns[0]);\n\n")
    out.write("// {code point, offset in kDecompPool, length, compatibility mapping}\n")
    out.write("const Decomposition kDecompositions[] = {\n")
    write_rows(out, ["{0x%05X, %d, %d, %d}," % e for e in entries], 4)
    out.write("};\n")
    out.write("const size_t kDecompositionCount = sizeof(kDecompositions) / "
              "sizeof(kDecompositions[0]);\n\n")
    out.write("const uint32_t kDecompPool[] = {\n")
    write_rows(out, ["0x%05X," % p for p in pool], 10)
    out.write("};\n\n")
    out.write("// {first, second, composite}, sorted by (first, second)\n")
    out.write("const Composition kCompositions[] = {\n")
    write_rows(out, ["{0x%05X, 0x%05X, 0x%05X}," % p for p in pairs], 4)
    out.write("};\n")
    out.write("const size_t kCompositionCount = sizeof(kCompositions) / "
              "sizeof(kCompositions[0]);\n\n")
    out.write("// {code point, its lowercase}\n")
    out.write("const CaseMapping kLowercase[] = {\n")
    write_rows(out, ["{0x%05X, 0x%05X}," % p for p in single], 6)
    out.write("};\n")
    out.write("const size_t kLowercaseCount = sizeof(kLowercase) / sizeof(kLowercase[0]);\n\n")
    out.write("// {code point, length, lowercase}\n")
    out.write("const LongCaseMapping kLowercaseLong[] = {\n")
    for c, m in long:
        out.write("  {0x%05X, %d, {%s}},\n" % (c, len(m), ", ".join("0x%05X" % x for x in m)))
    out.write("};\n")
    out.write("const size_t kLowercaseLongCount = sizeof(kLowercaseLong) / "
              "sizeof(kLowercaseLong[0]);\n")
    out.write("// clang-format on\n\n")
    out.write("}  // namespace pagoda::unicode\n")


if __name__ == "__main__":
    main()
