#!/usr/bin/env python3
"""Writes tokenizers/tok_unicode.c: the Unicode tables of the tokenizers, as sorted code point
ranges.

1. The classes that the GPT-2 pre-tokenizer regex needs (\\p{L}, \\p{N}, \\s). HF `tokenizers`
   matches the regex with Oniguruma, whose tables are Unicode 16.0 (tokenizers 0.23). Python's
   own unicodedata is older (3.11 has 14.0), so this script reads the categories from the
   `unicodedata2` backport pinned to 16.0.0. \\s in Oniguruma is the White_Space property, which
   unicodedata does not expose; its 25 code points are listed below (unchanged since Unicode 6.3).

2. What BERT's normalizer and pre-tokenizer (HF BertNormalizer + BertPreTokenizer) do to each
   code point: dropped by clean_text, mapped to a space by clean_text, split on as whitespace,
   isolated as punctuation, spaced as a CJK ideograph, removed by strip_accents (a nonspacing
   mark), decomposed by strip_accents (NFD less the marks), changed by lowercase. These are NOT
   read from one Unicode version: HF mixes several (the `unicode_categories` crate's old tables
   for control/format/punctuation/Mn, Rust's std for lowercase and White_Space, the
   `unicode-normalization` crate for NFD, and a CJK range list with its own quirk at
   U+2B820..U+2B91F). So this script asks HF itself, code point by code point, with each
   normalizer option alone (~15 s); the rules the tables follow are those of tok_wordpiece.c.
   unicodedata2 is only used to report how far HF is from Unicode 16.

    pip install unicodedata2==16.0.0 tokenizers==0.23.3
    python3 tokenizers/gen_tok_unicode.py            # rewrites tokenizers/tok_unicode.c
    python3 tokenizers/gen_tok_unicode.py --check-hf # also probes every code point through
                                                     # HF's ByteLevel pre-tokenizer (~20 s)
"""
import os
import sys

import unicodedata2 as ud

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3
NAMES = {OTHER: "TOK_CC_OTHER", LETTER: "TOK_CC_LETTER", NUMBER: "TOK_CC_NUMBER", SPACE: "TOK_CC_SPACE"}
WHITE_SPACE = set([0x9, 0xA, 0xB, 0xC, 0xD, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F,
                   0x205F, 0x3000] + list(range(0x2000, 0x200B)))


def cls(cp):
    if cp in WHITE_SPACE:
        return SPACE
    if 0xD800 <= cp < 0xE000:
        return OTHER
    cat = ud.category(chr(cp))
    if cat[0] == "L":
        return LETTER
    if cat[0] == "N":
        return NUMBER
    return OTHER


def check_hf():
    from tokenizers import pre_tokenizers
    pt = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def probe(c):
        if len(pt.pre_tokenize_str("a" + c)) == 1:
            return LETTER
        if len(pt.pre_tokenize_str("1" + c)) == 1:
            return NUMBER
        if c == " " or len(pt.pre_tokenize_str("!" + c + "!")) == 3:
            return SPACE
        return OTHER

    bad = [cp for cp in range(0x110000) if not (0xD800 <= cp < 0xE000) and probe(chr(cp)) != cls(cp)]
    print(f"HF probe: {len(bad)} code points differ", [hex(b) for b in bad[:20]])
    return not bad


# ---- BERT (HF BertNormalizer + BertPreTokenizer), probed from HF ----

B_DROP, B_CLEAN_SPACE, B_SPLIT, B_PUNCT, B_CJK, B_MARK, B_DECOMP, B_LOWER = (1 << i for i in range(8))
B_NAMES = ["TOK_BC_DROP", "TOK_BC_CLEAN_SPACE", "TOK_BC_SPLIT", "TOK_BC_PUNCT", "TOK_BC_CJK", "TOK_BC_MARK",
           "TOK_BC_DECOMP", "TOK_BC_LOWER"]


def bert_probe():
    """flags[cp], strip map {cp: str}, lower map {cp: str}, each from HF with one option on."""
    import tokenizers
    from tokenizers import normalizers, pre_tokenizers
    if tokenizers.__version__ != "0.23.3":
        sys.exit(f"need tokenizers==0.23.3 (have {tokenizers.__version__}) for the BERT tables")
    bn = normalizers.BertNormalizer
    clean = bn(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    cjk = bn(clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
    strip = bn(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    low = bn(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
    pt = pre_tokenizers.BertPreTokenizer()
    flags = [0] * 0x110000
    smap, lmap = {}, {}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue  # never in valid UTF-8
        c = chr(cp)
        f = 0
        r = clean.normalize_str(c)
        if r == "":
            f |= B_DROP
        elif r == " " and c != " ":
            f |= B_CLEAN_SPACE
        else:
            assert r == c, hex(cp)
        n = len(pt.pre_tokenize_str("a" + c + "a"))
        f |= {1: 0, 2: B_SPLIT, 3: B_PUNCT}[n]
        if cjk.normalize_str(c) == " " + c + " ":
            f |= B_CJK
        r = strip.normalize_str(c)
        if r == "":
            f |= B_MARK
        elif r != c:
            f |= B_DECOMP
            smap[cp] = r
        r = low.normalize_str(c)
        if r != c:
            f |= B_LOWER
            lmap[cp] = r
        flags[cp] = f
    return flags, smap, lmap


def bert_report(flags, smap, lmap):
    """How HF's tables differ from Unicode 16 (printed, for the record)."""
    diff = {"P*": 0, "Mn": 0, "lower": 0}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        c = chr(cp)
        cat = ud.category(c)
        ascii_p = cp < 128 and c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
        diff["P*"] += bool(flags[cp] & B_PUNCT) != (ascii_p or cat[0] == "P")
        diff["Mn"] += bool(flags[cp] & B_MARK) != (cat == "Mn")
        diff["lower"] += lmap.get(cp, c) != c.lower()
    print("BERT tables vs Unicode 16 (code points that differ):", diff)


def tokenizers_version():
    import tokenizers
    return tokenizers.__version__


def c_cps(s):
    return ", ".join("0x%X" % ord(x) for x in s)


def write_bert(f, flags, smap, lmap):
    ranges = []
    for cp in range(128, 0x110000):
        fl = flags[cp]
        if fl == 0:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == fl:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, fl])
    # Hangul syllables decompose by arithmetic (Unicode 3.12), done in C rather than 11172 entries
    for cp in range(0xAC00, 0xD7A4):
        si = cp - 0xAC00
        want = chr(0x1100 + si // 588) + chr(0x1161 + si % 588 // 28) + (chr(0x11A7 + si % 28) if si % 28 else "")
        assert smap.pop(cp) == want, hex(cp)
    assert max(len(v) for v in list(smap.values()) + list(lmap.values())) <= 4
    f.write("\n/* ---- BERT: what HF BertNormalizer and BertPreTokenizer do to each code point ---- */\n\n")
    f.write("const uint8_t tok_bert_ascii[128] = {")
    for cp in range(128):
        if cp % 16 == 0:
            f.write("\n   ")
        f.write(" %d," % flags[cp])
    f.write("\n};\n\n")
    f.write("typedef struct {\n    uint32_t lo, hi;\n    uint8_t flags;\n} tok_bert_range;\n\n")
    f.write("static const tok_bert_range tok_bert_ranges[%d] = {\n" % len(ranges))
    for i in range(0, len(ranges), 4):
        f.write("   " + "".join(" {0x%X, 0x%X, %d}," % tuple(r) for r in ranges[i:i + 4]) + "\n")
    f.write("};\n\n")
    f.write("unsigned tok_bert_class(uint32_t cp) {\n")
    f.write("    if (cp < 128) return tok_bert_ascii[cp];\n")
    f.write("    size_t lo = 0, hi = sizeof tok_bert_ranges / sizeof tok_bert_ranges[0];\n")
    f.write("    while (lo < hi) {\n")
    f.write("        size_t mid = (lo + hi) / 2;\n")
    f.write("        if (cp < tok_bert_ranges[mid].lo) hi = mid;\n")
    f.write("        else if (cp > tok_bert_ranges[mid].hi) lo = mid + 1;\n")
    f.write("        else return tok_bert_ranges[mid].flags;\n")
    f.write("    }\n")
    f.write("    return 0;\n}\n\n")
    f.write("/* A code point and what it becomes: up to 4 code points, 0-padded. */\n")
    f.write("typedef struct {\n    uint32_t cp, to[4];\n} tok_bert_map;\n\n")
    for name, m in (("strip", smap), ("lower", lmap)):
        keys = sorted(m)
        f.write("static const tok_bert_map tok_bert_%s_map[%d] = {\n" % (name, len(keys)))
        for i in range(0, len(keys), 3):
            f.write("   " + "".join(" {0x%X, {%s}}," % (k, c_cps(m[k])) for k in keys[i:i + 3]) + "\n")
        f.write("};\n\n")
    f.write("static size_t tok_bert_map_find(const tok_bert_map *m, size_t n, uint32_t cp, uint32_t *out) {\n")
    f.write("    size_t lo = 0, hi = n;\n")
    f.write("    while (lo < hi) {\n")
    f.write("        size_t mid = (lo + hi) / 2;\n")
    f.write("        if (cp < m[mid].cp) hi = mid;\n")
    f.write("        else if (cp > m[mid].cp) lo = mid + 1;\n")
    f.write("        else {\n")
    f.write("            size_t k = 0;\n")
    f.write("            while (k < 4 && m[mid].to[k]) {\n")
    f.write("                out[k] = m[mid].to[k];\n")
    f.write("                k++;\n")
    f.write("            }\n")
    f.write("            return k;\n")
    f.write("        }\n")
    f.write("    }\n")
    f.write("    out[0] = cp;\n")
    f.write("    return 1;\n}\n\n")
    for name in ("strip", "lower"):
        f.write("size_t tok_bert_%s(uint32_t cp, uint32_t *out) {\n" % name)
        if name == "strip":
            f.write("    if (cp >= 0xAC00 && cp <= 0xD7A3) { /* Hangul syllable -> L V (T) jamo */\n")
            f.write("        uint32_t si = cp - 0xAC00;\n")
            f.write("        out[0] = 0x1100 + si / 588;\n")
            f.write("        out[1] = 0x1161 + si % 588 / 28;\n")
            f.write("        if (si % 28 == 0) return 2;\n")
            f.write("        out[2] = 0x11A7 + si % 28;\n")
            f.write("        return 3;\n")
            f.write("    }\n")
        f.write("    return tok_bert_map_find(tok_bert_%s_map, sizeof tok_bert_%s_map / sizeof tok_bert_%s_map[0], "
                "cp, out);\n}\n" % (name, name, name))
        if name == "strip":
            f.write("\n")
    print(f"BERT: {len(ranges)} ranges, {len(smap)} strip maps, {len(lmap)} lower maps")


def main():
    if ud.unidata_version != "16.0.0":
        sys.exit(f"need unicodedata2==16.0.0 (have {ud.unidata_version}) to match HF tokenizers")
    ranges = []  # [lo, hi, class] for cp >= 128, OTHER left implicit
    for cp in range(128, 0x110000):
        c = cls(cp)
        if c == OTHER:
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == c:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp, c])
    flags, smap, lmap = bert_probe()
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tok_unicode.c")
    with open(out, "w") as f:
        f.write("/* GENERATED by tokenizers/gen_tok_unicode.py from Unicode %s: do not edit.\n" % ud.unidata_version)
        f.write(" * The classes the GPT-2 pre-tokenizer regex needs (\\p{L}, \\p{N}, \\s), and what BERT's\n")
        f.write(" * normalizer and pre-tokenizer do to each code point (probed from HF tokenizers %s). ASCII\n"
                % tokenizers_version())
        f.write(" * is a direct table because nearly all text is ASCII; the rest is a binary search over sorted\n")
        f.write(" * ranges. */\n")
        f.write('#include "tokenizers/tok_base.h"\n\n')
        f.write("const uint8_t tok_ascii_class[128] = {")
        for cp in range(128):
            if cp % 16 == 0:
                f.write("\n   ")
            f.write(" %d," % cls(cp))
        f.write("\n};\n\n")
        f.write("typedef struct {\n    uint32_t lo, hi;\n    uint8_t cls;\n} tok_cp_range;\n\n")
        f.write("static const tok_cp_range tok_ranges[%d] = {\n" % len(ranges))
        for lo, hi, c in ranges:
            f.write("    {0x%X, 0x%X, %s},\n" % (lo, hi, NAMES[c]))
        f.write("};\n\n")
        f.write("int tok_unicode_class(uint32_t cp) {\n")
        f.write("    if (cp < 128) return tok_ascii_class[cp];\n")
        f.write("    size_t lo = 0, hi = sizeof tok_ranges / sizeof tok_ranges[0];\n")
        f.write("    while (lo < hi) {\n")
        f.write("        size_t mid = (lo + hi) / 2;\n")
        f.write("        if (cp < tok_ranges[mid].lo) hi = mid;\n")
        f.write("        else if (cp > tok_ranges[mid].hi) lo = mid + 1;\n")
        f.write("        else return tok_ranges[mid].cls;\n")
        f.write("    }\n")
        f.write("    return TOK_CC_OTHER;\n}\n")
        write_bert(f, flags, smap, lmap)
    print(f"wrote {out}: {len(ranges)} ranges")
    bert_report(flags, smap, lmap)
    if "--check-hf" in sys.argv and not check_hf():
        sys.exit(1)


if __name__ == "__main__":
    main()
