#!/usr/bin/env python3
"""Generates the GLM English tokenizer goldens in tests/golden/tok/ (glm_en_*.tsv) with GLM's own
tokenizer code, FlagAI's GLMLargeEnWordPieceTokenizer (flagai/data/tokenizer/glm_large_en/: its
GLMLargeEnTokenizer text tokenizer, BERT's BasicTokenizer + WordPiece, under tokenizer.py's
GLMTokenizer.EncodeAsIds), so that tests/test_tok_glm_en.c can check tokenizers/tok_glm_en.c
without Python. The vocab is assets/bert-wordpiece/bert-base-uncased-vocab.txt, which is
bert-large-uncased's vocab too (GLM-large-en's). The texts come from tests/data/ and assets/ (the
first few lines of GLUE/SuperGLUE dev and val files): only files inside the repository are read.

Nothing is reimplemented and no FlagAI source is copied: the modules are executed straight from
FlagAI's wheel (flagai_wheel.exec_flagai_modules). FlagAI's from_pretrained reads
cache_dir/vocab.txt and downloads only when it is missing: cache_dir is a temporary folder holding
a link to the vocab. Get the wheel without installing it:

    pip download flagai==1.8.0 --no-deps -d /tmp/flagai
    /usr/bin/python3 scripts/golden/gen_glm_en_tok_golden.py /tmp/flagai/flagai-1.8.0-py3-none-any.whl

/usr/bin/python3 is Debian's, with torch (glm_large_en_tokenizer.py imports it). The text
tokenizer uses Python's unicodedata, so its version is recorded.

The tokenizer is built with FlagAI's defaults (add_block_symbols=True, add_task_mask=True,
add_decoder_mask=False, add_sentinel_token=0): the layout of GLM-large-en.

Files written (ids space-separated):
  glm_en_extra.tsv   hex(utf-8 input) TAB EncodeAsIds(input) TAB hex(DecodeIds(ids)): the 46
                     llama.cpp BERT test inputs, GLUE/SuperGLUE lines (SST-2, RTE, BoolQ, CB,
                     COPA, WiC), command tokens written in the text, accents, Chinese,
                     punctuation, Greek, the SuperGLUE verbalizers, and seeded random mixes
  glm_en_decode.tsv  ids TAB hex(DecodeIds(ids)): seeded random id runs mixing pieces, "##"
                     pieces and the command tokens
  glm_en_alt.tsv     flags TAB hex(input) TAB ids: other flag layouts (add_block_symbols=False,
                     add_task_mask=False, add_decoder_mask=True)
"""
import json
import os
import platform
import random
import sys
import tempfile
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flagai_wheel import exec_flagai_modules  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")  # test-only fixtures
ASSETS = os.path.join(ROOT, "assets")  # shipped files
OUT = os.path.join(ROOT, "tests", "golden", "tok")
VOCAB = os.path.join(ASSETS, "bert-wordpiece", "bert-base-uncased-vocab.txt")
VEC_INP = os.path.join(DATA, "tokenizer-test-vectors", "ggml-vocab-bert-bge.gguf.inp")

PKG = "flagai.data.tokenizer.glm_large_en"


def load_tokenizer_class(flagai):
    return exec_flagai_modules(flagai, [PKG], [
        ("flagai.data.tokenizer.tokenizer", "flagai/data/tokenizer/tokenizer.py"),
        (PKG + ".wordpiece", "flagai/data/tokenizer/glm_large_en/wordpiece.py"),
        (PKG + ".glm_large_en_tokenizer", "flagai/data/tokenizer/glm_large_en/glm_large_en_tokenizer.py"),
    ]).GLMLargeEnWordPieceTokenizer


def hexs(s):
    return s.encode("utf-8").hex()


def tsv_column(path, col, n):
    with open(path, encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t") for line in f][1:]
    return [r[col] for r in rows[:n]]


def jsonl_fields(path, keys, n):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in list(f)[:n]:
            d = json.loads(line)
            out += [d[k] for k in keys]
    return out


def cases(rng):
    with open(VEC_INP, encoding="utf-8") as f:
        out = f.read().split("\n__ggml_vocab_test__\n")[:-1]
    out += tsv_column(os.path.join(DATA, "glue-sst2", "dev.tsv"), 0, 12)
    out += tsv_column(os.path.join(DATA, "glue-rte", "dev.tsv"), 1, 4) + tsv_column(
        os.path.join(DATA, "glue-rte", "dev.tsv"), 2, 4)
    out += jsonl_fields(os.path.join(DATA, "superglue-boolq", "val.jsonl"), ["question", "passage"], 4)
    out += jsonl_fields(os.path.join(DATA, "superglue-cb", "val.jsonl"), ["premise", "hypothesis"], 5)
    out += jsonl_fields(os.path.join(ASSETS, "superglue-copa", "val.jsonl"), ["premise", "choice1", "choice2"], 4)
    out += jsonl_fields(os.path.join(DATA, "superglue-wic", "val.jsonl"), ["word", "sentence1", "sentence2"], 4)
    out += [
        # the SuperGLUE verbalizers GLM's cloze patterns use
        " Yes", " No", " Maybe", " true", " false", "Yes", "no", "MAYBE", "True", "FALSE",
        # command tokens written in the text
        "The capital of France is [MASK].", "[CLS] Hello [SEP] world [SEP]", "Question: is it true? Answer: [gMASK]",
        "a [sMASK] b", "x[MASK]y", "  [MASK]  ", "[MASK]", "[MASK][MASK]", "[gMASK][sMASK]", "[PAD][UNK]",
        "<|startofpiece|> generated text <|endofpiece|>", "<|startofpiece|>", "text<|endofpiece|>more",
        "[mask]", "[Mask]", "[MASK", "MASK]", "[[MASK]]", "<|startofpiece|", "[gmask]", "[dBLOCK]", "[MASK1]",
        "[unused0]", "[unused1] token", "<|endoftext|>", "<s> </s>",
        # accents and casing
        "café naïve résumé façade", "Crème Brûlée", "ÀÉÎÕÜ àéîõü", "e\u0301", "Ångström", "İstanbul",
        "Straße", "ǅungla", "ﬁne", "Ⅻ", "½", "ÆØÅ æøå", "Łódź", "Đặng Thị", "Ελληνικά", "ΣΟΦΙΑ σοφία",
        "ΟΔΥΣΣΕΥΣ", "ΣΑΣ ΣΑΣ.", "Σ", "русский ТЕКСТ", "עברית", "العربية", "हिन्दी",
        # Chinese and other CJK
        "你好世界", "Hello 世界!", "中文English混合", "日本語のテキスト", "カタカナ", "한국어", "𠀀𠀁", "龘靐齉",
        "，。！？", "（括号）", "『引用』",
        # punctuation, numbers, whitespace, symbols
        "Hello, world! How's it going?", "don't won't can't I'm you're", "e.g. i.e. U.S.A.", "3.14159",
        "1,000,000", "100%", "-42", "$100 €100 £100 ¥100", "C++ and C#", "user@example.com",
        "http://www.example.com/path?q=1&r=2", "<html><body>", "{\"k\": [1, 2]}", "a--b---c", "...", "!?!?",
        "`quoted' ``double''", "tab\tseparated\ttext", "line one\nline two", "\r\n", "  ", "\t", "", "\u3000",
        "non\u00a0breaking", "zero\u200bwidth", "soft\u00adhyphen", "ctrl\x01char", "nul\x00byte",
        "emoji 😀👍🏽", "😀", "♥ ★ ☺", "→ ← ↑", "™ © ®", "°C", "x²", "µ", "\u2028sep", "a\u0085b",
        "supercalifragilisticexpialidocious", "antidisestablishmentarianism", "a" * 101, "a" * 100,
        "unaffable", "GLM-large-en", "FlagAI's GLMLargeEnWordPieceTokenizer",
    ]
    pieces = ["the", "The", "cat", "café", "naïve", "[MASK]", "[gMASK]", "[sMASK]", "[CLS]", "[SEP]", "[PAD]",
              "[UNK]", "<|startofpiece|>", "<|endofpiece|>", " ", "  ", "\n", "\t", ",", ".", "'", "?", "!",
              "-", "(", ")", "\"", "世界", "你", "Yes", "No", "Maybe", "true", "false", "123", "4.5", "😀",
              "Straße", "ΣΑΣ", "unaffable", "running", "jumped", "##", "#", "[", "]", "<", "|", ">"]
    for _ in range(40):
        out.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 14))))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    flagai = sys.argv[1]
    Tok = load_tokenizer_class(flagai)
    cache = tempfile.mkdtemp()
    os.symlink(VOCAB, os.path.join(cache, "vocab.txt"))
    tok = Tok(cache_dir=cache)  # FlagAI's defaults
    rng = random.Random(20231123)

    rows = []
    for text in cases(rng):
        ids = list(tok.EncodeAsIds(text))
        rows.append("%s\t%s\t%s" % (hexs(text), " ".join(map(str, ids)), hexs(tok.DecodeIds(ids))))
    with open(os.path.join(OUT, "glm_en_extra.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    cmd_ids = sorted({c.Id for c in tok._command_tokens})
    sub_ids = [i for t, i in tok.text_tokenizer.vocab.items() if t.startswith("##")]
    rows = []
    for _ in range(150):
        ids = []
        for _ in range(rng.randint(1, 16)):
            r = rng.random()
            ids.append(rng.choice(cmd_ids) if r < 0.2 else rng.choice(sub_ids) if r < 0.45 else
                       rng.randint(0, 30521))
        rows.append("%s\t%s" % (" ".join(map(str, ids)), hexs(tok.DecodeIds(ids))))
    with open(os.path.join(OUT, "glm_en_decode.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    alt_texts = ["[CLS] Paris <|startofpiece|> France <|endofpiece|>", "a [MASK] b [sMASK] c [gMASK]",
                 "[dBLOCK] block [UNK]"]
    rows = []
    for flags in [(False, True, False), (True, False, False), (True, True, True), (True, False, True)]:
        t = Tok(cache_dir=cache, add_block_symbols=flags[0], add_task_mask=flags[1], add_decoder_mask=flags[2])
        name = "block=%d,task=%d,decoder=%d" % flags
        for text in alt_texts:
            rows.append("%s\t%s\t%s" % (name, hexs(text), " ".join(map(str, t.EncodeAsIds(text)))))
    with open(os.path.join(OUT, "glm_en_alt.tsv"), "w") as f:
        f.write("\n".join(rows) + "\n")

    print("flagai %s (GLMLargeEnWordPieceTokenizer), Python %s, unicodedata %s" % (
        os.path.basename(flagai), platform.python_version(), unicodedata.unidata_version))
    print({c.name: c.Id for c in tok._command_tokens}, "len", len(tok))


if __name__ == "__main__":
    main()
