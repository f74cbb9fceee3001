#!/usr/bin/env python3
"""Reference values for metrics/metric_bleu.c, metric_rouge.c and metric_porter.c (the t5-finetune
evaluation metrics), from the real packages: sacrebleu's corpus_bleu with its defaults
(13a tokenizer, exp smoothing, 4-grams, mixed case), rouge_score's RougeScorer(['rouge1',
'rouge2', 'rougeL'], use_stemmer=False/True) and nltk's PorterStemmer (the one rouge_score
uses: PorterStemmer() in its default NLTK_EXTENSIONS mode).

Writes, under tests/golden/textmetrics/ (read by tests/test_textmetrics.c):

- hard.json: hand-made hard cases. `tok13a`: [input, sacrebleu Tokenizer13a output];
  `rouge_tok`: [input, rouge tokens joined by ' ' without stemmer, with stemmer]; `bleu`:
  small corpora with every field of sacrebleu's BLEUScore; `rouge`: small corpora with
  per-pair [P, R, F] for rouge1, rouge2, rougeL and the mean of each over the corpus.
- real.json: the same metrics on real data, whole files in the repository that the tests read
  too: assets/multi30k-en-de and tests/data/scitldr-a. BLEU: multi30k-en-de val.de as references
  against (a) val.en and (b) a deterministic corruption of val.de (see corrupt_line), and
  (c) two reference streams, the second with holes (None). Also the zlib CRC-32 of the 13a
  tokenization of every line of val.de and val.en (rstripped, as sacrebleu preprocesses
  them), joined with '\\n'. ROUGE: scitldr-a line-aligned dev.target as targets against the
  first sentence of dev.source (see first_sentence), per pair the integer counts [target
  tokens, prediction tokens, unigram overlap, bigram overlap, LCS length] (the script checks
  that they reproduce rouge_score's floats bit for bit) and rouge_score's corpus means.
- porter.tsv: `word<TAB>nltk stem` for 3000 words taken evenly from the sorted unique rouge
  tokens of scitldr-a dev.source + dev.target, plus hand-picked edge words. real.json also
  holds the CRC-32 of "word stem\\n" over every unique rouge token of dev.source, sorted.

    pip install sacrebleu rouge_score nltk
    python3 scripts/golden/gen_textmetrics_golden.py

Floats are written by json (shortest repr, exact round trip). Deterministic: a rerun with
the same versions writes the same bytes.
"""
import json
import os
import platform
import re
import sys
import zlib

import nltk
import sacrebleu
from importlib.metadata import version
from nltk.stem.porter import PorterStemmer
from rouge_score import rouge_scorer, tokenizers
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = os.path.join(ROOT, "tests", "golden", "textmetrics")
# where each data folder is: multi30k-en-de's val files are shipped, scitldr-a is a test fixture
DATA = {"multi30k-en-de": os.path.join(ROOT, "assets"), "scitldr-a": os.path.join(ROOT, "tests", "data")}
TYPES = ["rouge1", "rouge2", "rougeL"]


def read_lines(rel):
    with open(os.path.join(DATA[rel.split("/")[0]], rel), encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def corrupt_line(i, line):
    """A deterministic 'hypothesis' from a reference: split on single spaces, drop every 5th
    word (index 4, 9, ...), and on every third line (i % 3 == 0) swap the first and the last
    word kept. tests/test_textmetrics.c builds the same strings."""
    words = line.split(" ")
    kept = [w for j, w in enumerate(words) if j % 5 != 4]
    if i % 3 == 0 and len(kept) >= 2:
        kept[0], kept[-1] = kept[-1], kept[0]
    return " ".join(kept)


def first_sentence(line):
    """The source up to and including the first '. ' ('.' kept), or the whole line."""
    k = line.find(". ")
    return line if k < 0 else line[: k + 1]


def bleu_fields(hyps, ref_streams):
    b = sacrebleu.corpus_bleu(hyps, ref_streams)
    return {
        "score": b.score,
        "precisions": list(b.precisions),
        "bp": b.bp,
        "counts": [int(c) for c in b.counts],
        "totals": [int(t) for t in b.totals],
        "sys_len": int(b.sys_len),
        "ref_len": int(b.ref_len),
    }


def rouge_case(name, targets, predictions, stem):
    scorer = rouge_scorer.RougeScorer(TYPES, use_stemmer=stem)
    pairs = []
    sums = [0.0] * 9
    for t, p in zip(targets, predictions):
        s = scorer.score(t, p)
        row = [float(v) for k in TYPES for v in (s[k].precision, s[k].recall, s[k].fmeasure)]
        pairs.append(row)
        sums = [a + b for a, b in zip(sums, row)]
    return {
        "name": name,
        "stem": stem,
        "targets": targets,
        "predictions": predictions,
        "pairs": pairs,
        "mean": [v / len(targets) for v in sums],
    }


TOK13A_INPUTS = [
    "Hello, world.",
    "1,000.50 dollars and 3.14 or 2,5",
    "a.b,c",
    "e.g. U.S.A. and i.e., etc.",
    "3-4 years, well-known, 12-year-old, x-3, -5 and 5-",
    "&quot;hi&quot; &amp;lt; x &gt; y &amp; z &amp;amp;",
    "&QUOT; & amp; &lt &quot",
    "foo-\nbar and a\nb",
    "x<skipped>y <skip<skipped>ped>",
    "Café naïve — “quotes” ‘single’ «guillemets» ¿Qué? ¡Sí!",
    "東京タワーは、日本の首都。中文，标点。",
    "it's John's 'quoted' `tick`",
    "a\u00a0b\u2003c\u3000d\u0085e\u1680f\u202fg\u205fh\u2028i\u2029j\x1ck\x1fl",
    "\t tabs \t and  multiple   spaces \r\n",
    "..a .5 and 5. a..b ,, 1.. ..1 1,,2 ., ,.",
    "{braces} [brackets] (parens) <angle> |pipe| ~tilde^ _under_ @at #hash $5 %pct *star +plus =eq ;semi :colon ?q !e /slash \\back",
    "",
    " ",
    "-",
    "--- ...",
    "Mr. Smith's e-mail: smith@example.com, http://x.org/a?b=1&c=2.",
    "Zahlen: 1.000,50 € und 3,5 %; 10.-12. Mai",
    "Ünïcödé ÄÖÜ äöü ß ẞ İstanbul K",
    "emoji 😀👍🏽 and combining e\u0301",
    "0-0 1-1-1 a-1 1-a",
    "The price is $1,234.56.",
]

ROUGE_TOK_INPUTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Running runs ran easily; studies studying studied.",
    "U.S.A. 3.14 well-known 1,000 e-mail",
    "İstanbul KELVIN K ﬁne Ǆ café naïve Straße",
    "caresses ponies ties caress cats feed agreed plastered bled motoring sing",
    "conflated troubled sized hopping tanned falling hissing fizzed failing filing",
    "happy sky relational conditional rational valenci digitizer conformabli radicalli",
    "sensibiliti triplicate formative formalize electriciti hopeful goodness revival",
    "allowance inference airliner gyroscopic adjustable defensible irritant replacement",
    "dying lying tying news innings outings cannings howe proceed exceed succeed skies",
    "yyyy yays toy syzygy yes ivy spied died flies dies",
    "abc abcd a1b2 1990s 2020 x86 gpt2 bert 100k",
    "",
    "   ...   ",
    "日本語 only",
]


def tok13a_cases():
    t = Tokenizer13a()
    return [[s, t(s)] for s in TOK13A_INPUTS]


def rouge_tok_cases():
    plain = tokenizers.DefaultTokenizer(use_stemmer=False)
    stem = tokenizers.DefaultTokenizer(use_stemmer=True)
    return [[s, " ".join(plain.tokenize(s)), " ".join(stem.tokenize(s))] for s in ROUGE_TOK_INPUTS]


def bleu_cases():
    cases = []

    def add(name, hyps, streams):
        c = {"name": name, "hyps": hyps, "refs": streams}
        c.update(bleu_fields(hyps, streams))
        cases.append(c)

    ref = [
        "The cat sat on the mat.",
        "There is a cat on the mat, isn't there?",
        "He paid $1,234.56 for 3-4 tickets.",
        "Der Mann läuft schnell über die Straße.",
    ]
    add("identical", list(ref), [list(ref)])
    add("typical", ["The cat is on the mat.", "There is a cat on a mat?", "He paid $1,234 for 4 tickets.",
                    "Ein Mann läuft über die Straße."], [list(ref)])
    add("zero_matches", ["xyz qqq", "abc"], [["The cat sat", "on the mat"]])
    add("unigram_only", ["mat the on sat cat the", "tickets for"], [["The cat sat on the mat", "for the tickets"]])
    add("short_hyps_no_4grams", ["the cat", "on", "the mat ."], [["the cat sat", "on the mat", "the mat ."]])
    add("empty_hyp_one", ["", "the cat sat on the mat"], [["a b c", "the cat sat on the mat"]])
    add("empty_hyps_all", ["", ""], [["a b c", "d e"]])
    add("empty_ref", ["the cat sat on the mat", "x y"], [["the cat sat on the mat", ""]])
    add("empty_everything", ["", ""], [["", ""]])
    add("longer_hyp", ["the cat sat on the mat and the dog sat on the log too"], [["the cat sat on the mat"]])
    add("punct_quotes", ['&quot;Yes,&quot; he said -- "no." (maybe)!', "e.g. U.S.A. 1.5 2,000 x-1"],
        [['"Yes," he said - "no." (maybe)', "e.g. USA 1.5 2,000 x - 1"]])
    add("unicode_cjk", ["東京タワーは日本の首都。", "Café naïve — “quotes”", "Straße\u00a0ist lang"],
        [["東京タワーは日本の首都。", "Cafe naive - \"quotes\"", "Straße ist lang"]])
    add("trailing_ws", ["the cat-\n", "a dog\u00a0 \t", "x<skipped> y"], [["the cat -", "a dog", "x y"]])
    add("repeated_clip", ["the the the the the the the"], [["The cat is on the mat"]])
    add("multi_ref", ["the cat is on the mat", "there is a cat here", "hello world"],
        [["the cat sat on the mat", "a cat is here", "hello there world"],
         ["there is a cat on the mat", "there is a cat", None],
         ["the cat", None, "hello world !"]])
    # Two references as far from the hypothesis length: sacrebleu takes the shorter.
    add("multi_ref_len_tie", ["a b c d"], [["a b c"], ["a b c d e"]])
    add("multi_ref_len_tie2", ["a b c d"], [["a b c d e"], ["a b c"]])
    return cases


def rouge_cases():
    targets = [
        "The quick brown fox jumps over the lazy dog.",
        "police killed the gunman",
        "Running runs ran easily",
        "",
        "a b",
        "identical text here",
        "the the the cat",
        "İstanbul is in Turkey, not Constantinople.",
        "We study studies of studying students.",
        "3.14 is pi; 1,000 is a thousand",
    ]
    predictions = [
        "The quick brown dog jumps on the log.",
        "police kill the gunman",
        "he runs; running ran",
        "something",
        "",
        "identical text here",
        "the cat the the the",
        "istanbul is in turkey",
        "Students studied the study.",
        "pi is 3 14 and a thousand is 1000",
    ]
    out = []
    for stem in (False, True):
        out.append(rouge_case("hard_stem" if stem else "hard", targets, predictions, stem))
    out.append(rouge_case("both_empty", [""], [""], False))
    out.append(rouge_case("no_overlap", ["alpha beta gamma"], ["delta epsilon"], True))
    return out


def crc_lines(lines):
    return zlib.crc32("\n".join(lines).encode("utf-8")) & 0xFFFFFFFF


def real_bleu():
    de = read_lines("multi30k-en-de/val.de")
    en = read_lines("multi30k-en-de/val.en")
    corrupt = [corrupt_line(i, l) for i, l in enumerate(de)]
    holes = [None if i % 7 == 3 else l for i, l in enumerate(en)]
    t = Tokenizer13a()
    return {
        "tok13a_crc32": {
            "multi30k-en-de/val.de": crc_lines([t(l.rstrip()) for l in de]),
            "multi30k-en-de/val.en": crc_lines([t(l.rstrip()) for l in en]),
        },
        "val_en_vs_de": bleu_fields(en, [de]),
        "corrupt_de_vs_de": bleu_fields(corrupt, [de]),
        "corrupt_de_vs_de_en_holes": bleu_fields(corrupt, [de, holes]),
        "n_lines": len(de),
    }


def real_rouge():
    src = read_lines("scitldr-a/line-aligned/dev.source")
    tgt = read_lines("scitldr-a/line-aligned/dev.target")
    preds = [first_sentence(l) for l in src]
    out = {"n_lines": len(tgt)}
    for stem in (False, True):
        scorer = rouge_scorer.RougeScorer(TYPES, use_stemmer=stem)
        tok = tokenizers.DefaultTokenizer(use_stemmer=stem)
        counts = []
        sums = [0.0] * 9
        for t, p in zip(tgt, preds):
            s = scorer.score(t, p)
            tt, pt = tok.tokenize(t), tok.tokenize(p)
            nt, np_ = len(tt), len(pt)
            o1 = round(s["rouge1"].precision * max(np_, 1))
            o2 = round(s["rouge2"].precision * max(np_ - 1, 1))
            lcs = round(s["rougeL"].precision * np_) if np_ else 0
            # The integers must give rouge_score's floats exactly (same division, same order).
            assert s["rouge1"].recall == o1 / max(nt, 1) and s["rouge1"].precision == o1 / max(np_, 1)
            assert s["rouge2"].recall == o2 / max(nt - 1, 1) and s["rouge2"].precision == o2 / max(np_ - 1, 1)
            if nt and np_:
                assert s["rougeL"].recall == lcs / nt and s["rougeL"].precision == lcs / np_
            counts.append([nt, np_, o1, o2, lcs])
            row = [float(v) for k in TYPES for v in (s[k].precision, s[k].recall, s[k].fmeasure)]
            sums = [a + b for a, b in zip(sums, row)]
        key = "stem" if stem else "nostem"
        out["counts_" + key] = counts
        out["mean_" + key] = [v / len(tgt) for v in sums]
    return out


EDGE_WORDS = [
    "a", "is", "as", "ies", "sky", "skies", "dying", "lying", "tying", "news", "innings", "inning",
    "outings", "outing", "cannings", "canning", "howe", "proceed", "exceed", "succeed", "dies", "died",
    "flies", "spied", "spies", "ties", "yyyy", "yyyyyyyyyy", "syzygy", "toy", "happy", "enjoy", "sly",
    "agreed", "feed", "bleed", "generalli", "radicalli", "archaeologi", "geologi", "theologi", "fulli",
    "hopefulli", "controll", "roll", "rate", "cease", "probate", "adoption", "ion", "sion", "tion",
    "eed", "ed", "ing", "sing", "hopping", "falling", "hissing", "fizzed", "filing", "failing",
    "conflated", "troubled", "sized", "1990s", "x86", "abc123", "123", "4ever", "ying", "yed", "ayes",
    "triplicate", "formative", "formalize", "electriciti", "electrical", "hopeful", "goodness",
    "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable", "defensible",
    "irritant", "replacement", "adjustment", "dependent", "homologou", "communism", "activate",
    "angulariti", "homologous", "effective", "bowdlerize", "relational", "conditional", "rational",
    "valenci", "hesitanci", "digitizer", "conformabli", "differentli", "vileli", "analogousli",
    "vietnamization", "predication", "operator", "feudalism", "decisiveness", "hopefulness",
    "callousness", "formaliti", "sensitiviti", "sensibiliti", "oed", "aing", "bing", "ous", "ement",
]


def porter_golden():
    tok = tokenizers.DefaultTokenizer(use_stemmer=False)
    words = set()
    for rel in ("scitldr-a/line-aligned/dev.source", "scitldr-a/line-aligned/dev.target"):
        for line in read_lines(rel):
            words.update(w for w in tok.tokenize(line) if len(w) > 3)
    words = sorted(words)
    step = max(1, len(words) // 3000)
    picked = words[::step][:3000]
    stemmer = PorterStemmer()
    rows = [(w, stemmer.stem(w)) for w in EDGE_WORDS + picked]
    # Every unique token of dev.source (rouge tokenizer, no stemmer), sorted, CRC-32 of
    # "word stem\n" for each: the C test rebuilds the list with its own tokenizer.
    all_src = set()
    for line in read_lines("scitldr-a/line-aligned/dev.source"):
        all_src.update(tok.tokenize(line))
    all_src = sorted(all_src)
    blob = "".join("%s %s\n" % (w, stemmer.stem(w)) for w in all_src)
    return rows, {"n_words": len(all_src), "crc32": zlib.crc32(blob.encode("ascii")) & 0xFFFFFFFF}


def dump(path, obj):
    text = json.dumps(obj, ensure_ascii=False, indent=1)
    # Lists of numbers on one line each (the counts and scores), the rest indented.
    text = re.sub(r"\[\s*([-0-9.e, \n]+?)\s*\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def main():
    versions = {
        "python": platform.python_version(),
        "sacrebleu": sacrebleu.__version__,
        "rouge_score": version("rouge_score"),
        "nltk": nltk.__version__,
    }
    os.makedirs(OUT, exist_ok=True)
    dump(os.path.join(OUT, "hard.json"), {
        "generated_by": "scripts/golden/gen_textmetrics_golden.py; do not edit",
        "versions": versions,
        "tok13a": tok13a_cases(),
        "rouge_tok": rouge_tok_cases(),
        "bleu": bleu_cases(),
        "rouge": rouge_cases(),
    })
    rows, porter_crc = porter_golden()
    real = {
        "generated_by": "scripts/golden/gen_textmetrics_golden.py; do not edit",
        "versions": versions,
        "bleu": real_bleu(),
        "rouge": real_rouge(),
        "porter_dev_source": porter_crc,
    }
    dump(os.path.join(OUT, "real.json"), real)
    with open(os.path.join(OUT, "porter.tsv"), "w", encoding="ascii") as f:
        f.write("# word<TAB>stem from nltk %s PorterStemmer() (NLTK_EXTENSIONS), as rouge_score %s uses;"
                " generated by scripts/golden/gen_textmetrics_golden.py\n" % (nltk.__version__, versions["rouge_score"]))
        for w, s in rows:
            f.write("%s\t%s\n" % (w, s))
    print("wrote", OUT, file=sys.stderr)


if __name__ == "__main__":
    main()
