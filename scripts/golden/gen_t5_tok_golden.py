#!/usr/bin/env python3
"""Generates the T5 tokenizer goldens in tests/golden/tok/ with Hugging Face's slow T5Tokenizer
(the sentencepiece-based one, legacy=True, its default), so that tests/test_tok_spm.c can check
tokenizers/tok_t5.c without Python. The model is assets/t5-spiece/spiece.model (t5-small/t5-base's
spiece.model, the shared data's t5_tokenizer_base.model), with extra_ids=100. Only files inside the
repository are read.

transformers 5 dropped the slow T5Tokenizer, so this needs transformers 4.x; the committed files
were made with 4.57.6 over Debian's python3-sentencepiece 0.1.97, the same SentencePiece as the
libsentencepiece the C code links (newer SentencePiece releases break some ties between
equal-scoring segmentations differently: 0.2.3 encodes "!!!!!!" otherwise):

    apt-get install python3-sentencepiece                  # Debian's 0.1.97
    python3 -m venv --system-site-packages /tmp/t5venv     # /usr/bin/python3 + python3-sentencepiece
    /tmp/t5venv/bin/pip install "transformers==4.57.6" protobuf
    /tmp/t5venv/bin/python scripts/golden/gen_t5_tok_golden.py

Every id list is also encoded by the fast tokenizer (T5TokenizerFast, converted from the same
spiece.model) and the run prints where it disagrees. `--check` instead re-encodes the Multi30k
lines and the extra cases with whichever T5Tokenizer the installed transformers has (the fast one
in 5.x) and compares with the committed files, writing nothing. The T5 section of
tests/golden/tok/README.md records these comparisons; it is kept by hand (this script writes no
README).

Files written (ids space-separated; "with </s>" means tokenizer(text)["input_ids"], i.e.
add_special_tokens=True):
  t5_multi30k_{train,val}_{en,de}.crc32  every line of tests/data/multi30k-en-de/train.{en,de}
                (the first 2000 lines of Multi30k's train) and assets/multi30k-en-de/val.{en,de}
                (whole): one little-endian uint32 per line, zlib.crc32 of its ids with </s> as
                little-endian int32 (as bert_sst2_*.crc32)
  t5_multi30k_head.tsv  the first 50 lines of each of those four files (train.en, train.de,
                val.en, val.de): ids with </s> TAB decode(ids) as text, so a mismatch shows
  t5_extra.tsv  hex(utf-8 input) TAB ids with </s> TAB hex(decode(ids)): sentinels in text,
                </s>/<pad>/<unk> in text, whitespace, NFKC, accents, unknown characters, emoji,
                seeded random strings
  t5_decode.tsv ids TAB hex(decode(ids)): seeded random id runs mixing pieces, </s>, <pad>,
                <unk>, "▁" and sentinels
  t5_pairs.tsv  hex(a) TAB hex(b) TAB tokenizer(a, b)["input_ids"] (a </s> b </s>)
decode is HF's default decode(ids) (skip_special_tokens=False, no clean-up).
"""
import os
import platform
import random
import shutil
import struct
import sys
import tempfile
import zlib

# Debian's sentencepiece_model_pb2 predates protobuf 4's generated code: the pure-Python
# protobuf still reads it (only the fast tokenizer's conversion uses it)
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

import sentencepiece  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "golden", "tok")
MODEL = os.path.join(ROOT, "assets", "t5-spiece", "spiece.model")
MULTI30K = [("train", "en"), ("train", "de"), ("val", "en"), ("val", "de")]
# train is the test-only slice (first 2000 lines), val is shipped whole
MULTI30K_DIR = {"train": os.path.join(ROOT, "tests", "data", "multi30k-en-de"),
                "val": os.path.join(ROOT, "assets", "multi30k-en-de")}
HEAD_LINES = 50


def model_dir():
    """A temporary HF folder holding the model as spiece.model."""
    tmp = tempfile.mkdtemp()
    shutil.copy(MODEL, os.path.join(tmp, "spiece.model"))
    return tmp


def load_slow():
    from transformers import T5Tokenizer  # 4.x: the sentencepiece one
    tok = T5Tokenizer(MODEL, legacy=True)
    assert type(tok).__name__ == "T5Tokenizer" and hasattr(tok, "sp_model"), "needs transformers 4.x"
    return tok


def load_fast():
    tmp = model_dir()
    cls = getattr(transformers, "T5TokenizerFast", None) or transformers.T5Tokenizer
    tok = cls.from_pretrained(tmp)
    shutil.rmtree(tmp)
    return tok


def ids(x):
    return " ".join(str(i) for i in x)


def crc_ids(x):
    return zlib.crc32(struct.pack("<%di" % len(x), *x)) & 0xFFFFFFFF


def multi30k_lines(split, lang):
    with open(os.path.join(MULTI30K_DIR[split], f"{split}.{lang}"), "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    assert lines[-1] == ""
    return lines[:-1]


def extra_strings():
    s = [
        "", " ", "  ", "\t", "\n", "\r\n", " \t\n ", "Hello world", "Hello  world", "  leading", "trailing  ",
        "a\tb\tc", "line one\nline two", "a\r\nb", "a \n\n b", "many     spaces   here",
        # sentinels and special tokens inside the text
        "<extra_id_0>", " <extra_id_0> ", "Hello <extra_id_0>.", "Hello <extra_id_0> world", "a<extra_id_0>b",
        "a  <extra_id_1>  b", "The <extra_id_0> walks in <extra_id_1> park", "<extra_id_0><extra_id_1>",
        "<extra_id_99>", "<extra_id_99><extra_id_98> x", "<extra_id_100>", "<extra_id_0", "extra_id_0>",
        "<extra_id_-1>", "<Extra_id_0>", "<<extra_id_0>>", "x\u00a0<extra_id_0>\u3000y", "\t<extra_id_0>\n",
        "a\u200b<extra_id_0>\u200bb", "\x1c<extra_id_5>\x1d", "a\u2028<extra_id_2>\u2029b", "</s>", "Hello</s>",
        "a </s> b", "a</s>b", "</s></s>", "<pad>", "<unk>", "x<pad>y<unk>z", "<s>", "< /s>", "</s >",
        "translate English to German: The house is wonderful.", "summarize: <extra_id_0> studies have shown",
        # normalization (nmt_nfkc) and unknown characters
        "Ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "ﬁ ﬂ ﬃ", "①②③ ⑴", "½ ¼ ² ³", "Ⅻ ⅻ", "㎏ ㎞ ℃ №", "™ © ®", "Ĳ ĳ",
        "naïve café", "Ångström", "Crème brûlée", "Zürich Straße Müller Größe", "e\u0301 combining", "ﾊﾝｶｸ",
        "你好世界", "こんにちは", "안녕하세요", "Привет мир", "Ελληνικά", "مرحبا بالعالم", "שלום", "हिन्दी",
        "🤗 emoji 👍🏽 👨‍👩‍👧", "🚀🚀", "a\u0000b", "\u0001\u001f\u007f", "\ufeffbom", "zero\u200bwidth",
        "soft\u00adhyphen", "\u00a0nbsp\u00a0", "em\u2003space", "ideo\u3000space", "\u0085nel", "\ufffd",
        "\u2581hello", "a\u2581b", "\u2581", "!!!!!!", "??????", "......", "------", "'''", '"quoted"',
        "$100,000.00", "3.14159", "http://example.com/a?b=c&d=e", "def f(x):\n    return x ** 2\n",
        "x" * 300, "ab" * 150, "Supercalifragilisticexpialidocious", "I'm you're we've they'll",
    ]
    rng = random.Random(5150)
    alphabet = (list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") + [" "] * 12 + list("'\t\n.,!?-\"$%()<>/") +
                list("éüßçñøÅЖжЯ中文字日本語한국ابت") +
                ["\u00a0", "\u3000", "\u0301", "²", "Ⅻ", "Ｆ", "ﬁ", "🤗", "\u200b", "\u2581", "</s>", "<pad>",
                 "<unk>", "<extra_id_0>", "<extra_id_7>", "<extra_id_42>", "<extra_id_99>", "<extra_id_"])
    for _ in range(300):
        s.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))))
    return s


def decode_cases(tok):
    rng = random.Random(2024)
    common = [tok.sp_model.piece_to_id(p) for p in ["\u2581", ".", ",", "\u2581the", "s", "\u2581a", "-", "'"]]
    out = []
    for _ in range(300):
        seq = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.15:
                seq.append(rng.choice([0, 1, 2]))
            elif r < 0.3:
                seq.append(32000 + rng.randrange(100))
            elif r < 0.5:
                seq.append(rng.choice(common))
            else:
                seq.append(rng.randrange(3, 32000))
        out.append(seq)
    return out


def pair_cases():
    return [
        ("Hello", "world"), ("Hello", ""), ("", "world"), ("", ""), ("Hello</s>", "world"), ("Hello", "world</s>"),
        ("a </s>", "b </s>"), ("question: who? context: <extra_id_0> is here", "answer"),
        ("Zwei Männer stehen", "Two men stand"), ("  spaced  ", "\tout\n"),
    ]


def compare(name, got, want, texts):
    bad = [i for i in range(len(want)) if got[i] != want[i]]
    for i in bad[:5]:
        print(f"  {name} differs at {i}: {texts[i]!r}\n    slow {want[i]}\n    other {got[i]}")
    return len(bad)


def write(slow, fast):
    os.makedirs(OUT, exist_ok=True)
    report = []
    head = []
    n_lines = 0
    for split, lang in MULTI30K:
        lines = multi30k_lines(split, lang)
        enc = [slow(x)["input_ids"] for x in lines]
        with open(os.path.join(OUT, f"t5_multi30k_{split}_{lang}.crc32"), "wb") as f:
            f.write(b"".join(struct.pack("<I", crc_ids(x)) for x in enc))
        fenc = [fast(x)["input_ids"] for x in lines]
        report.append((f"{split}.{lang}", len(lines), compare(f"{split}.{lang}", fenc, enc, lines)))
        head += [f"{ids(x)}\t{slow.decode(x)}\n" for x in enc[:HEAD_LINES]]
        n_lines += len(lines)
    with open(os.path.join(OUT, "t5_multi30k_head.tsv"), "w", encoding="utf-8") as f:
        f.writelines(head)

    extra = extra_strings()
    enc = [slow(x)["input_ids"] for x in extra]
    with open(os.path.join(OUT, "t5_extra.tsv"), "w") as f:
        for text, x in zip(extra, enc):
            f.write("%s\t%s\t%s\n" % (text.encode("utf-8").hex(), ids(x), slow.decode(x).encode("utf-8").hex()))
    fenc = [fast(x)["input_ids"] for x in extra]
    report.append(("extra cases", len(extra), compare("extra", fenc, enc, extra)))
    fdec = sum(fast.decode(x) != slow.decode(x) for x in enc)

    cases = decode_cases(slow)
    with open(os.path.join(OUT, "t5_decode.tsv"), "w") as f:
        for seq in cases:
            f.write("%s\t%s\n" % (ids(seq), slow.decode(seq).encode("utf-8").hex()))
    fdec2 = sum(fast.decode(x) != slow.decode(x) for x in cases)

    pairs = pair_cases()
    with open(os.path.join(OUT, "t5_pairs.tsv"), "w") as f:
        for a, b in pairs:
            f.write("%s\t%s\t%s\n" % (a.encode().hex(), b.encode().hex(), ids(slow(a, b)["input_ids"])))
    fpair = sum(fast(a, b)["input_ids"] != slow(a, b)["input_ids"] for a, b in pairs)

    print(f"wrote {OUT}: {n_lines} Multi30k lines, {len(extra)} extra cases, {len(cases)} decode cases, "
          f"{len(pairs)} pairs")
    print(f"slow T5Tokenizer: transformers {transformers.__version__}, sentencepiece {sentencepiece.__version__}, "
          f"tokenizers {tokenizers.__version__}, Python {platform.python_version()}")
    for name, n, bad in report:
        print(f"fast vs slow ids, {name}: {n - bad} of {n} agree")
    print(f"fast vs slow pairs: {len(pairs) - fpair} of {len(pairs)} agree")
    print(f"fast vs slow decode: extra {len(extra) - fdec} of {len(extra)}, random ids {len(cases) - fdec2} of "
          f"{len(cases)} agree")


def check():
    """Re-encodes with the installed transformers' T5Tokenizer and compares with the committed files."""
    tmp = model_dir()
    tok = transformers.T5Tokenizer.from_pretrained(tmp)
    shutil.rmtree(tmp)
    print(f"{type(tok).__name__} of transformers {transformers.__version__} (tokenizers {tokenizers.__version__})")
    for split, lang in MULTI30K:
        lines = multi30k_lines(split, lang)
        with open(os.path.join(OUT, f"t5_multi30k_{split}_{lang}.crc32"), "rb") as f:
            want = struct.unpack("<%dI" % len(lines), f.read())
        got = [crc_ids(x) for x in tok(lines)["input_ids"]]
        bad = [i for i in range(len(lines)) if got[i] != want[i]]
        print(f"{split}.{lang}: {len(lines) - len(bad)} of {len(lines)} agree" +
              (f" (first differing line {bad[0] + 1}: {lines[bad[0]]!r})" if bad else ""))
    n = good = dec = 0
    with open(os.path.join(OUT, "t5_extra.tsv")) as f:
        for line in f:
            h, want, want_dec = line.rstrip("\n").split("\t")
            text = bytes.fromhex(h).decode("utf-8")
            got = tok(text)["input_ids"]
            n += 1
            good += ids(got) == want
            dec += tok.decode([int(i) for i in want.split()]).encode().hex() == want_dec
            if ids(got) != want:
                print(f"  extra differs: {text!r}\n    file {want}\n    here {ids(got)}")
    print(f"extra cases: {good} of {n} ids agree, {dec} of {n} decodes agree")


def main():
    if "--check" in sys.argv[1:]:
        check()
        return 0
    write(load_slow(), load_fast())
    return 0


if __name__ == "__main__":
    sys.exit(main())
