#!/usr/bin/env python3
"""Generates the byte-level BPE goldens in tests/golden/tok/ with Hugging Face tokenizers, so
that tests/test_tok_bpe.c can check tokenizers/tok_bpe.c against HF without Python.

    pip install tokenizers transformers        # no torch needed
    python3 scripts/golden/gen_tok_golden.py   # reads ../shared/data, writes tests/golden/tok/

Files written (ids are space-separated, one line per case):
  mrpc_gpt2.ids.gz, mrpc_roberta.ids.gz  every MRPC sentence of train.tsv then dev.tsv, per row
                                         column 4 then column 5 (header skipped), encoded with
                                         add_special_tokens=False
  extra.tsv      hex(utf-8 input) TAB gpt2 ids TAB roberta ids: edge cases of the pre-tokenizer
                 regex, Unicode classes, long words, added tokens, seeded random strings
  decode.tsv     gpt2 ids TAB hex(decode(ids)): random id runs, so split UTF-8 sequences must be
                 replaced by U+FFFD exactly as HF does
  README.md      the library versions used

The GPT-2 tokenizer is transformers' GPT2Tokenizer over encoder.json + vocab.bpe (renamed to
vocab.json + merges.txt in a temporary directory), RoBERTa's is RobertaTokenizer over
roberta-vocab.json + roberta-merges.txt; both run on HF `tokenizers` underneath.
"""
import gzip
import os
import platform
import random
import shutil
import sys
import tempfile

import tokenizers
import transformers
from transformers import GPT2Tokenizer, RobertaTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(os.path.dirname(ROOT), "shared", "data")
OUT = os.path.join(ROOT, "tests", "golden", "tok")


def load(kind):
    tmp = tempfile.mkdtemp()
    src = {"gpt2": ("gpt2-bpe/encoder.json", "gpt2-bpe/vocab.bpe"),
           "roberta": ("roberta-bpe/roberta-vocab.json", "roberta-bpe/roberta-merges.txt")}[kind]
    shutil.copy(os.path.join(DATA, src[0]), os.path.join(tmp, "vocab.json"))
    shutil.copy(os.path.join(DATA, src[1]), os.path.join(tmp, "merges.txt"))
    cls = GPT2Tokenizer if kind == "gpt2" else RobertaTokenizer
    tok = cls.from_pretrained(tmp)
    shutil.rmtree(tmp)
    return tok


def mrpc_sentences():
    out = []
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(DATA, "glue-mrpc", name), "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        for line in lines[1:]:
            if not line:
                continue
            cols = line.split("\t")
            assert len(cols) == 5, (name, line)
            out += [cols[3], cols[4]]
    return out


def extra_strings():
    s = [
        "", " ", "  ", "\t", "\n", "\n\n", " \n", "\n ", "   a", "a   ", "a\n\nb", "a \n b", "\t\ta", " \t a",
        "Hello world", " Hello", "Hello  world", "don't", "DON'T", "I'm you're we've they'll he'd it's",
        "'s", "''s", " 's", "?'s", "'S", "'re'", "a'll'm", "12345 678", " 1st", "x2y", "3.14159", "½ ² Ⅻ ③",
        "héllo wörld", "naïve café", "Привет мир", "你好世界", "こんにちは", "안녕하세요", "مرحبا بالعالم", "שלום",
        "🤗 emoji 👍🏽 👨‍👩‍👧", "e\u0301 combining", "\u00a0nbsp\u00a0", "a\u2003em\u3000ideo", "zero\u200bwidth",
        "line\u2028sep", "\u0085nel", "ﬁ ligature", "Ｆｕｌｌｗｉｄｔｈ", "x" * 200, "!" * 300, "ab" * 150,
        " " * 100 + "x", "\n" * 70, "a" + " " * 70, "$100,000.00!!!", "<|endoftext|>", "a<|endoftext|>b",
        "a <|endoftext|> b", "<|endoftext|><|endoftext|>", "<|endoftext", "<s>x</s>", "<pad><unk>",
        "Supercalifragilisticexpialidocious", "antidisestablishmentarianism" * 3, "http://example.com/a?b=c&d=e",
        "def f(x):\n    return x ** 2\n", "\u0000\u0001\u001f\u007f", "tab\there", "ÀÁÂÃÄÅÆÇ", "ǅǈǋ titlecase",
        "\U00011F04\U00031350 new letters", "\U0001E030 modifier", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    ]
    rng = random.Random(1234)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") + [" "] * 12 + list("'\t\n.,!?-\"$%()") +
                list("éüßçñøÅЖжЯ中文字日本語한국ابت१२३٤٥") + ["\u00a0", "\u2009", "\u3000", "\u0301", "²", "Ⅻ",
                                                            "🤗", "👍", "\u200d", "\U0001F600", "s", "t", "re"])
    for _ in range(300):
        s.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    return s


def ids(x):
    return " ".join(str(i) for i in x)


def main():
    os.makedirs(OUT, exist_ok=True)
    g, r = load("gpt2"), load("roberta")
    sents = mrpc_sentences()
    for name, tok in (("gpt2", g), ("roberta", r)):
        lines = [ids(tok.encode(s, add_special_tokens=False)) for s in sents]
        with gzip.GzipFile(os.path.join(OUT, f"mrpc_{name}.ids.gz"), "wb", mtime=0) as f:
            f.write(("\n".join(lines) + "\n").encode())
    with open(os.path.join(OUT, "extra.tsv"), "w") as f:
        for s in extra_strings():
            f.write("%s\t%s\t%s\n" % (s.encode("utf-8").hex(), ids(g.encode(s, add_special_tokens=False)),
                                      ids(r.encode(s, add_special_tokens=False))))
    rng = random.Random(99)
    # tokens holding bytes >= 0x80 (pieces of multi-byte characters): GPT-2's byte map keeps
    # 0xA1..0xFF (but 0xAD) as themselves and sends 0x80..0xA0 and 0xAD to code points 290..323
    high = set(chr(c) for c in range(0xA1, 0x100) if c != 0xAD) | set(chr(c) for c in range(290, 324))
    multibyte = [i for i in range(50257) if any(c in high for c in g.convert_ids_to_tokens(i))]
    with open(os.path.join(OUT, "decode.tsv"), "w") as f:
        for _ in range(300):
            seq = [rng.choice(multibyte) if rng.random() < 0.6 else rng.randrange(50257)
                   for _ in range(rng.randint(1, 12))]
            text = g.decode(seq, skip_special_tokens=False, clean_up_tokenization_spaces=False)
            f.write("%s\t%s\n" % (ids(seq), text.encode("utf-8").hex()))
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# Byte-level BPE goldens\n\n")
        f.write("Written by `scripts/golden/gen_tok_golden.py` (see its docstring for the file formats) with\n")
        f.write(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}, "
                f"Python {platform.python_version()}.\n")
        f.write(f"MRPC: {len(sents)} sentences (train.tsv then dev.tsv, columns 4 and 5 of each row).\n")
        f.write("Read by `tests/test_tok_bpe.c`. Regenerate only when the data or HF's behaviour changes.\n")
    print(f"wrote {OUT}: {len(sents)} MRPC sentences, {len(extra_strings())} extra cases")


if __name__ == "__main__":
    sys.exit(main())
