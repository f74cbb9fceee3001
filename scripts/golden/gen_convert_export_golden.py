#!/usr/bin/python3
"""Writes tests/golden/convert/export.tsv: for each tiny HF model under tests/golden, the
SHA-256 of the model.safetensors that `tz-convert import --tp 2`, `reshard --tp 1` and
`export` give, after checking with HF Transformers that the exported folder loads and gives
exactly the outputs the original folder gives. test_cli_convert then only has to check that
an export is byte-for-byte that file (byte-stable), so CI needs no Python.

    cmake --build build && /usr/bin/python3 scripts/golden/gen_convert_export_golden.py
"""
import hashlib
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from transformers import (AutoConfig, BertForSequenceClassification, GPT2ForSequenceClassification,
                          RobertaForSequenceClassification, T5ForConditionalGeneration)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
BIN = os.path.join(ROOT, "build", "bin", "tz-convert")
GOLDEN = os.path.join(ROOT, "tests", "golden")
MODELS = {
    "gpt2-tiny-cls": GPT2ForSequenceClassification,
    "bert-tiny-cls": BertForSequenceClassification,
    "roberta-tiny-cls": RobertaForSequenceClassification,
    "t5-tiny-v1_0": T5ForConditionalGeneration,
    "t5-tiny-v1_1": T5ForConditionalGeneration,
}


def outputs(cls, path):
    model = cls.from_pretrained(path).eval()
    g = torch.Generator().manual_seed(0)
    vocab = AutoConfig.from_pretrained(path).vocab_size
    ids = torch.randint(3, min(vocab, 900), (2, 9), generator=g)
    with torch.no_grad():
        if cls is T5ForConditionalGeneration:
            return model(input_ids=ids, decoder_input_ids=ids[:, :5]).logits
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def tz(*args):
    subprocess.run([BIN, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, cls in MODELS.items():
            src = os.path.join(GOLDEN, name)
            tp2, tp1, hf = (os.path.join(tmp, f"{name}-{s}") for s in ("tp2", "tp1", "hf"))
            tz("import", src, tp2, "--tp", "2")
            tz("reshard", tp2, tp1, "--tp", "1")
            tz("export", tp1, hf)
            diff = float((outputs(cls, src) - outputs(cls, hf)).abs().max())
            if diff != 0.0:
                sys.exit(f"{name}: the exported folder's outputs differ from the original's by {diff}")
            data = open(os.path.join(hf, "model.safetensors"), "rb").read()
            rows.append((name, hashlib.sha256(data).hexdigest(), len(data)))
            print(f"{name}: HF loads the export, outputs identical; {len(data)} bytes")
    out = os.path.join(GOLDEN, "convert", "export.tsv")
    with open(out, "w") as f:
        f.write(f"# tz-convert import --tp 2 | reshard --tp 1 | export, checked to load in transformers "
                f"{transformers.__version__} (torch {torch.__version__}) with outputs identical to the source\n")
        for r in rows:
            f.write("\t".join(map(str, r)) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
