#!/usr/bin/env python3
"""Generates the tokenizer goldens in tests/golden/tok/ with Hugging Face tokenizers, so that
tests/test_tok_bpe.c and tests/test_tok_wordpiece.c can check tokenizers/tok_bpe.c and
tokenizers/tok_wordpiece.c against HF without Python.

    pip install tokenizers transformers        # no torch needed
    python3 scripts/golden/gen_tok_golden.py   # reads assets/ and tests/data/, writes tests/golden/tok/

Files written (ids are space-separated, one line per case):
  mrpc_gpt2.ids.gz, mrpc_roberta.ids.gz  every MRPC sentence of train.tsv then dev.tsv, per row
                                         column 4 then column 5 (header skipped), encoded with
                                         add_special_tokens=False
  extra.tsv      hex(utf-8 input) TAB gpt2 ids TAB roberta ids: edge cases of the pre-tokenizer
                 regex, Unicode classes, long words, added tokens, seeded random strings
  decode.tsv     gpt2 ids TAB hex(decode(ids)): random id runs, so split UTF-8 sequences must be
                 replaced by U+FFFD exactly as HF does
  README.md      the library versions used

BERT WordPiece (transformers' BertTokenizer over assets/bert-wordpiece/bert-base-uncased-vocab.txt
with do_lower_case=True and tests/data/bert-wordpiece/bert_base_cased_vocab.txt with
do_lower_case=False; add_special_tokens=False unless said):
  bert_mrpc_{uncased,cased}.ids.gz  every MRPC sentence, as mrpc_*.ids.gz
  bert_sst2_{uncased,cased}.crc32   every SST-2 sentence of tests/data/glue-sst2's train.tsv (its
                 first 2000 rows) then dev.tsv (all 872; column 1, header skipped): one
                 little-endian uint32 per sentence, zlib.crc32 of its ids as little-endian int32
                 (CRCs keep it small: full ids would be 1.4 MB gzipped per vocab on all of train)
  bert_extra.tsv hex(utf-8 input) TAB uncased ids TAB cased ids: normalizer and pre-tokenizer
                 edge cases, special tokens in the text, long words, seeded random strings over
                 code points whose tables HF takes from old Unicode versions
  bert_decode.tsv  uncased ids TAB hex(decode(ids)) with HF's default decode (WordPiece
                 decoder, cleanup on, special tokens kept)
  bert_pairs.tsv uncased ids TAB token_type_ids of encode(a, b, truncation=True, max_length=24)
                 for the first 200 MRPC dev pairs (a TAB b is the test's input: columns 4, 5)

The GPT-2 tokenizer is transformers' GPT2Tokenizer over assets/gpt2-bpe's encoder.json + vocab.bpe
(renamed to vocab.json + merges.txt in a temporary directory), RoBERTa's is RobertaTokenizer over
tests/data/roberta-bpe's roberta-vocab.json + roberta-merges.txt; both run on HF `tokenizers`
underneath. MRPC is assets/glue-mrpc (whole). Only files inside the repository are read.
"""
import gzip
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import zlib

import tokenizers
import transformers
from transformers import BertTokenizer, GPT2Tokenizer, RobertaTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSETS = os.path.join(ROOT, "assets")  # shipped files
TESTDATA = os.path.join(ROOT, "tests", "data")  # test-only fixtures (glue-sst2's train.tsv is a slice)
OUT = os.path.join(ROOT, "tests", "golden", "tok")


def load(kind):
    tmp = tempfile.mkdtemp()
    src = {"gpt2": (ASSETS, "gpt2-bpe/encoder.json", "gpt2-bpe/vocab.bpe"),
           "roberta": (TESTDATA, "roberta-bpe/roberta-vocab.json", "roberta-bpe/roberta-merges.txt")}[kind]
    shutil.copy(os.path.join(src[0], src[1]), os.path.join(tmp, "vocab.json"))
    shutil.copy(os.path.join(src[0], src[2]), os.path.join(tmp, "merges.txt"))
    cls = GPT2Tokenizer if kind == "gpt2" else RobertaTokenizer
    tok = cls.from_pretrained(tmp)
    shutil.rmtree(tmp)
    return tok


def mrpc_sentences():
    out = []
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(ASSETS, "glue-mrpc", name), "rb") as f:
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


def sst2_sentences():
    out = []
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(TESTDATA, "glue-sst2", name), "rb") as f:
            lines = f.read().decode("utf-8").split("\n")
        for line in lines[1:]:
            if not line:
                continue
            cols = line.split("\t")
            assert len(cols) == 2, (name, line)
            out.append(cols[0])
    return out


def mrpc_dev_pairs(n):
    with open(os.path.join(ASSETS, "glue-mrpc", "dev.tsv"), "rb") as f:
        lines = f.read().decode("utf-8").split("\n")[1:]
    return [tuple(line.split("\t")[3:5]) for line in lines if line][:n]


def bert_extra_strings():
    s = [
        "", " ", "\t\n", "Hello world", "HELLO World", "héllo wörld", "naïve café Ångström", "Führer", "İstanbul",
        "ΣΑΣ σας ς", "ß ẞ Straße", "ǅǈǋ titlecase", "Ｆｕｌｌｗｉｄｔｈ", "ﬁ ligature", "e\u0301 a\u0308\u0301 o\u0327\u0301",
        "\u0301leading mark", "Cửa Việt", "한국어 텍스트 각", "你好世界", "我想在apple工作1314151天～", "こんにちは カタカナ",
        "\uF900\uFA0E compat", "\U00020000\U0002A6DF\U0002B820\U0002B91F\U0002B920\U0002CEAF ext", "\u3400\u4DBF",
        "a\u0000b\u0001c\u001fd\u007fe", "a\ufffdb", "zero\u200bwidth", "soft\u00adhyphen", "bom\ufeffx",
        "nbsp\u00a0x", "a\u2003em\u3000ideo", "line\u2028sep", "\u0085nel", "a\x0bb\x0cc", "a\rb\r\nc",
        "private\ue000use", "unassigned\u0378x", "Hello, y'all! How are you?", "don't can't won't", "it's 5 o'clock",
        "$100,000.00!!!", "(a) [b] {c} <d>", "a-b_c=d+e", "~`^|\\@#%&*", "¡Hola! ¿Qué?", "«quotes» „low“ ‹s›",
        "em—dash en–dash", "…ellipsis", "§¶†‡•", "٪ ، ؛ ؟", "।॥", "〈〉《》「」", "\u2E5D\u2E43\u061D\U00010D6E",
        "\u166D\u0F3A", "x" * 99, "x" * 100, "x" * 101, "é" * 100, "é" * 101, "a" * 50 + "\u0301" * 60,
        "supercalifragilisticexpialidocious", "antidisestablishmentarianism" * 3, "ab" * 120,
        "[CLS]", "[cls]", "[SEP] [PAD] [UNK] [MASK]", "a[MASK]b", "[MASK][MASK]", "[[MASK]]", "[unused0]", "[CLS",
        " [SEP] ", "xx[UNK]yy", "http://example.com/a?b=c&d=e", "def f(x):\n    return x ** 2\n", "🤗 emoji 👍🏽",
        "👨‍👩‍👧", "½ ² Ⅻ ③ ⁴", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "mixed CASE Words And ACRONYMS like NASA",
        "Привет мир", "Ελληνικά", "مرحبا بالعالم", "שלום עולם", "ภาษาไทย", "हिन्दी", "ꯀ\uABED",
    ]
    rng = random.Random(4321)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") + [" "] * 15 +
                list("'\t\n.,!?-\"$%()[]#") + list("éüßçñøÅЖжЯΣς中文字日本語한국ابت१२३٤٥ÀÉÎÕÜİ") +
                ["\u00a0", "\u2009", "\u3000", "\u0301", "\u0308", "\u07FD", "\u0903", "\u200b", "\u00ad",
                 "\ufeff", "\ue000", "\u0378", "\u2E5D", "\u166D", "²", "Ⅻ", "🤗", "\u200d", "\U0001F600",
                 "\u0000", "\u0085", "\ufffd", "\uF900", "\U0002B820", "[MASK]", "[CLS]", "[SEP]", "##", "\u1C89"])
    for _ in range(400):
        s.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    # random code points, mostly assigned ones in the BMP and plane 1
    for _ in range(600):
        cps = []
        for _ in range(rng.randint(1, 12)):
            while True:
                cp = rng.randrange(0x30000) if rng.random() < 0.2 else rng.randrange(0x20000)
                if not 0xD800 <= cp < 0xE000:
                    break
            cps.append(chr(cp))
            if rng.random() < 0.3:
                cps.append(rng.choice("abc XYZ,"))
        s.append("".join(cps))
    return s


def load_bert(cased):
    path = os.path.join(TESTDATA, "bert-wordpiece", "bert_base_cased_vocab.txt") if cased else \
        os.path.join(ASSETS, "bert-wordpiece", "bert-base-uncased-vocab.txt")
    return BertTokenizer(path, do_lower_case=not cased)


def crc_ids(x):
    return zlib.crc32(struct.pack("<%di" % len(x), *x)) & 0xFFFFFFFF


def write_bert():
    u, c = load_bert(False), load_bert(True)
    mrpc, sst2 = mrpc_sentences(), sst2_sentences()
    for name, tok in (("uncased", u), ("cased", c)):
        enc = tok(mrpc, add_special_tokens=False)["input_ids"]
        with gzip.GzipFile(os.path.join(OUT, f"bert_mrpc_{name}.ids.gz"), "wb", mtime=0) as f:
            f.write(("\n".join(ids(x) for x in enc) + "\n").encode())
        enc = tok(sst2, add_special_tokens=False)["input_ids"]
        with open(os.path.join(OUT, f"bert_sst2_{name}.crc32"), "wb") as f:
            f.write(b"".join(struct.pack("<I", crc_ids(x)) for x in enc))
    extra = bert_extra_strings()
    eu = u(extra, add_special_tokens=False)["input_ids"]
    ec = c(extra, add_special_tokens=False)["input_ids"]
    with open(os.path.join(OUT, "bert_extra.tsv"), "w") as f:
        for text, a, b in zip(extra, eu, ec):
            f.write("%s\t%s\t%s\n" % (text.encode("utf-8").hex(), ids(a), ids(b)))
    rng = random.Random(77)
    punct = [u.convert_tokens_to_ids(x) for x in list(".,!?'\"-()") + ["n", "##t", "do", "not", "s", "m", "re", "ve"]]
    with open(os.path.join(OUT, "bert_decode.tsv"), "w") as f:
        for _ in range(300):
            seq = [rng.choice(punct) if rng.random() < 0.4 else rng.randrange(len(u)) for _ in range(rng.randint(1, 12))]
            f.write("%s\t%s\n" % (ids(seq), u.decode(seq).encode("utf-8").hex()))
    with open(os.path.join(OUT, "bert_pairs.tsv"), "w") as f:
        for a, b in mrpc_dev_pairs(200):
            e = u(a, b, truncation=True, max_length=24)
            f.write("%s\t%s\n" % (ids(e["input_ids"]), ids(e["token_type_ids"])))
    return len(mrpc), len(sst2), len(extra)


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
    n_mrpc, n_sst2, n_extra = write_bert()
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# Tokenizer goldens (byte-level BPE and BERT WordPiece)\n\n")
        f.write("Written by `scripts/golden/gen_tok_golden.py` (see its docstring for the file formats) with\n")
        f.write(f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}, "
                f"Python {platform.python_version()}.\n")
        f.write(f"MRPC: {len(sents)} sentences (train.tsv then dev.tsv, columns 4 and 5 of each row).\n")
        f.write(f"SST-2: {n_sst2} sentences (train.tsv then dev.tsv, column 1); BERT extra cases: {n_extra}.\n")
        f.write("Read by `tests/test_tok_bpe.c` and `tests/test_tok_wordpiece.c`. Regenerate only when the data or "
                "HF's behaviour changes.\n")
    print(f"wrote {OUT}: {len(sents)} MRPC sentences, {len(extra_strings())} extra cases")


if __name__ == "__main__":
    sys.exit(main())
