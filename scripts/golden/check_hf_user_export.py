#!/usr/bin/env python3
"""Checks that a classifier trained on a user's own file and exported with --save-hf is one
HF's pipeline reads as tunezoo meant it: the class names from id2label, the same predicted
class for every row of the test file (multi-label: the same set of classes above 0.5, which
the pipeline's sigmoid gives for problem_type multi_label_classification), and the same
probabilities as tunezoo's predictions.csv.

    bert-classify --train-file train.csv --label-column sentiment --test-file test.csv \\
        --save-dir /tmp/run --save-hf /tmp/run/hf
    python3 scripts/golden/check_hf_user_export.py /tmp/run/hf /tmp/run/predictions.csv --text-column review

Works for bert-classify and gpt2-classify exports with one text column. Needs torch and
transformers (scripts/setup_python.sh); exits 1 when a class or a probability (6 decimals in the
file) differs by more than 1e-5."""
import argparse
import csv
import sys

from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("predictions_csv")
    ap.add_argument("--text-column", required=True)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--separator", default=",", help="multi-label: what joins the classes in prediction")
    a = ap.parse_args()
    model = AutoModelForSequenceClassification.from_pretrained(a.hf_dir).eval()
    tok = AutoTokenizer.from_pretrained(a.hf_dir)
    if tok.pad_token is None:  # GPT-2: tunezoo pads with eos, as its export's config says
        tok.pad_token = tok.eos_token
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    multi = model.config.problem_type == "multi_label_classification"
    clf = pipeline("text-classification", model=model, tokenizer=tok, top_k=None, truncation=True,
                   max_length=a.max_len)
    with open(a.predictions_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    worst, wrong = 0.0, 0
    for r in rows:
        out = clf(r[a.text_column])
        if out and isinstance(out[0], list):  # one input may come back as a batch of one
            out = out[0]
        hf = {d["label"]: d["score"] for d in out}
        if multi:
            got = set(filter(None, r["prediction"].split(a.separator)))
            wrong += {n for n in names if hf[n] > 0.5} != got
        else:
            wrong += max(hf, key=hf.get) != r["prediction"]
        for name in names:
            worst = max(worst, abs(hf[name] - float(r["prob_" + name])))
    print(f"{len(rows)} rows, {'multi-label ' if multi else ''}classes {names}: {wrong} predicted differently, "
          f"max |HF - tunezoo| probability difference {worst:.3g}")
    return 0 if wrong == 0 and worst <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
