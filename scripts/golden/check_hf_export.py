#!/usr/bin/env python3
"""Checks that a folder written by `gpt2-classify --save-hf DIR` loads in HF Transformers
and gives the class probabilities tunezoo wrote with --predict for the same rows.

    gpt2-classify ... --save-hf /tmp/hf
    gpt2-classify --model /tmp/hf --epochs 0 --max-len 48 --predict rows.tsv --save-dir /tmp/ev
    python3 scripts/golden/check_hf_export.py /tmp/hf rows.tsv /tmp/ev/predictions.tsv --max-len 48

Needs torch and transformers (scripts/setup_python.sh); exits 1 when they differ by more
than 1e-5 (the TSV holds 6 decimals)."""
import argparse
import sys

import numpy as np
import torch
from transformers import GPT2ForSequenceClassification, GPT2TokenizerFast


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("hf_dir")
    ap.add_argument("rows_tsv", help="GLUE MRPC-format TSV (header, text in columns 4 and 5)")
    ap.add_argument("predictions_tsv")
    ap.add_argument("--max-len", type=int, default=128)
    a = ap.parse_args()
    model = GPT2ForSequenceClassification.from_pretrained(a.hf_dir).eval()
    tok = GPT2TokenizerFast.from_pretrained(a.hf_dir)
    tok.pad_token = tok.eos_token
    rows = [l.rstrip("\n").split("\t") for l in open(a.rows_tsv, encoding="utf-8-sig")][1:]
    enc = tok([r[3] for r in rows], [r[4] for r in rows], truncation=True, max_length=a.max_len, padding=True,
              return_tensors="pt")
    with torch.no_grad():
        hf = model(**enc).logits.softmax(-1).numpy()
    ours = np.array([[float(x) for x in l.rstrip("\n").split("\t")[2:]] for l in list(open(a.predictions_tsv))[1:]])
    diff = float(np.abs(hf - ours).max())
    print(f"{len(rows)} rows: max |HF - tunezoo| probability difference {diff:.3g}")
    return 0 if diff <= 1e-5 else 1


if __name__ == "__main__":
    sys.exit(main())
