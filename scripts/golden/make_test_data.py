#!/usr/bin/env python3
"""Builds tests/data/, the test-only fixtures, from the project's shared data folder.

Tests read only files inside the repository (tests/data/ and assets/), so that a clone alone
passes them. This script is how those fixtures were made: it copies the small files whole,
cuts the large ones to the slice a test uses (the first N rows, plus any row a golden file
names), and writes each folder's SOURCES.md: the slice recipe and the sha256 of every file
here, followed by the upstream record (origin, license, checksums of the full files) from
the shared folder's own SOURCES.md. tests/test_fixtures.sh checks those sha256s.

    python3 scripts/golden/make_test_data.py --shared ../shared/data

The shared folder is read only when named with --shared; nothing else reads outside the
repository. Deterministic: a rerun over the same shared data writes the same bytes.
Files the programs ship (MRPC, the GPT-2, BERT, T5 and GLM tokenizers, Multi30k val, COPA
train/val) are in assets/ and are not copied again; tests read them there.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data")


def whole(rel):
    return (rel, "whole file", None)


def head(rel, n, header=False):
    """The first n rows (a TSV header line is kept on top when header)."""
    what = f"header + first {n} rows" if header else f"first {n} lines"
    return (rel, what, ("head", n + (1 if header else 0)))


def head_plus(rel, n, extra_lines, why):
    """The first n lines, then the listed 1-based lines of the file, in order."""
    return (rel, f"first {n} lines, then line{'s' if len(extra_lines) > 1 else ''} "
            f"{', '.join(map(str, extra_lines))} ({why})", ("head_plus", n, extra_lines))


# One entry per folder: what it is for, and its files.
FOLDERS = {
    "tiny-gpt2": ("HF-format GPT-2 (random weights, n_embd 2): the loader, converter and program tests",
                  [whole(f) for f in ("config.json", "generation_config.json", "merges.txt",
                                      "model.safetensors", "special_tokens_map.json",
                                      "tokenizer_config.json", "vocab.json")]),
    "roberta-bpe": ("RoBERTa's byte-level BPE vocab and merges (the tokenizer tests, bert-classify --arch roberta)",
                    [whole("roberta-vocab.json"), whole("roberta-merges.txt")]),
    "bert-wordpiece": ("bert-base-cased vocab (the uncased one is assets/bert-wordpiece)",
                       [whole("bert_base_cased_vocab.txt")]),
    "sentencepiece-testdata": ("google/sentencepiece's 1000-piece test model (a SentencePiece model "
                               "that is neither T5's nor GLM's)", [whole("test_model.model")]),
    "tokenizer-test-vectors": ("46 inputs with expected ids (llama.cpp's, and T5/GLM made with sentencepiece)",
                               [whole(f) for f in ("ggml-vocab-bert-bge.gguf.inp", "ggml-vocab-bert-bge.gguf.out",
                                                   "ggml-vocab-gpt-2.gguf.inp", "ggml-vocab-gpt-2.gguf.out",
                                                   "ggml-vocab-roberta-bpe.gguf.inp",
                                                   "ggml-vocab-roberta-bpe.gguf.out",
                                                   "glm-cog-pretrain.sentencepiece-0.1.97.out",
                                                   "t5-spiece.sentencepiece-0.1.97.out")]),
    "glue-sst2": ("GLUE SST-2: the reader, the task table and WordPiece parity",
                  [head("train.tsv", 2000, header=True), whole("dev.tsv"), head("test.tsv", 200, header=True)]),
    "glue-rte": ("GLUE RTE", [head("train.tsv", 300, header=True), whole("dev.tsv")]),
    "glue-cola": ("CoLA v1.0 public release (GLUE's CoLA): dev is the two raw dev files",
                  [head("raw/in_domain_train.tsv", 1000), whole("raw/in_domain_dev.tsv"),
                   whole("raw/out_of_domain_dev.tsv"), whole("README")]),
    "glue-stsb": ("GLUE STS-B (regression)",
                  [head("train.tsv", 500, header=True), head("dev.tsv", 300, header=True),
                   head("test.tsv", 200, header=True), whole("LICENSE.txt")]),
    "glue-wnli": ("GLUE WNLI dev", [whole("dev.tsv")]),
    "multi30k-en-de": ("Multi30k train captions for T5 SentencePiece parity (val is in assets/)",
                       [head("train.en", 2000), head("train.de", 2000)]),
    "scitldr-a": ("SciTLDR-A dev, line-aligned: ROUGE and Porter parity on every pair",
                  [whole("line-aligned/dev.source"), whole("line-aligned/dev.target"), whole("LICENSE")]),
    "superglue-boolq": ("SuperGLUE BoolQ", [
        head_plus("val.jsonl", 50, [2645], "the long passage tests/golden/superglue/pvp_golden.json uses"),
        head("test.jsonl", 50)]),
    "superglue-cb": ("SuperGLUE CB", [head("train.jsonl", 50), whole("val.jsonl"), head("test.jsonl", 50)]),
    "superglue-copa": ("SuperGLUE COPA test (train and val are in assets/)", [head("test.jsonl", 50)]),
    "superglue-multirc": ("SuperGLUE MultiRC (a line is a paragraph with its questions)", [
        head("train.jsonl", 5),
        head_plus("val.jsonl", 5, [37], "paragraph 36, whose question 422 tests/golden/superglue/pvp_golden.json uses"),
        head("test.jsonl", 5)]),
    "superglue-rte": ("SuperGLUE RTE", [head("train.jsonl", 50), whole("val.jsonl"), head("test.jsonl", 50)]),
    "superglue-wic": ("SuperGLUE WiC", [head("train.jsonl", 50), whole("val.jsonl"), head("test.jsonl", 50)]),
    "superglue-wsc": ("SuperGLUE WSC", [head("train.jsonl", 50), whole("val.jsonl"), head("test.jsonl", 50)]),
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def slice_lines(src, how):
    with open(src, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    kind = how[0]
    if kind == "head":
        keep = lines[:how[1]]
    else:
        keep = lines[:how[1]] + [lines[i - 1] for i in how[2]]
    return b"".join(line + b"\n" for line in keep)


def make(shared):
    if os.path.isdir(OUT):
        for name in os.listdir(OUT):
            if name in FOLDERS:
                shutil.rmtree(os.path.join(OUT, name))
    os.makedirs(OUT, exist_ok=True)
    index = []
    for folder, (purpose, files) in FOLDERS.items():
        rows = []
        for rel, what, how in files:
            src = os.path.join(shared, folder, rel)
            dst = os.path.join(OUT, folder, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if how is None:
                shutil.copyfile(src, dst)
            else:
                with open(dst, "wb") as f:
                    f.write(slice_lines(src, how))
            rows.append((rel, what, os.path.getsize(dst), sha256(dst), sha256(src)))
        with open(os.path.join(shared, folder, "SOURCES.md"), encoding="utf-8") as f:
            upstream = f.read().rstrip("\n")
        size = sum(r[2] for r in rows)
        index.append((folder, purpose, size))
        with open(os.path.join(OUT, folder, "SOURCES.md"), "w", encoding="utf-8") as f:
            f.write(f"# {folder} (test fixture)\n\n{purpose}.\n\n")
            f.write("Made by `scripts/golden/make_test_data.py` from the project's shared data folder "
                    f"`{folder}/`. A slice keeps whole lines, byte for byte. The upstream record below gives "
                    "the origin, the license and the checksums of the full files.\n\n")
            f.write("| file | what | bytes | sha256 | sha256 of the full file |\n| --- | --- | ---: | --- | --- |\n")
            for rel, what, nbytes, h, hsrc in rows:
                f.write(f"| {rel} | {what} | {nbytes} | {h} | {hsrc} |\n")
            f.write("\n## Upstream record (the shared folder's SOURCES.md, unchanged)\n\n")
            f.write("\n".join(("#" + line) if line.startswith("#") else line for line in upstream.split("\n")))
            f.write("\n")
    total = sum(s for _, _, s in index)
    with open(os.path.join(OUT, "README.md"), "w", encoding="utf-8") as f:
        f.write("# Test fixtures\n\n")
        f.write("Files that only the tests read; what the programs ship is in `assets/`, and tests read "
                "those there. Each folder's SOURCES.md gives the slice, the sha256 of each file "
                "(checked by `tests/test_fixtures.sh`), the origin and the license. Made by "
                "`python3 scripts/golden/make_test_data.py --shared DIR`.\n\n")
        f.write("| folder | what | bytes |\n| --- | --- | ---: |\n")
        for folder, purpose, size in index:
            f.write(f"| {folder}/ | {purpose} | {size} |\n")
        f.write(f"| all | | {total} |\n")
    print(f"tests/data: {len(index)} folders, {total / 1e6:.2f} MB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", required=True, help="the project's shared data folder (e.g. ../shared/data)")
    args = ap.parse_args()
    if not os.path.isfile(os.path.join(args.shared, "README.md")):
        sys.exit(f"make_test_data.py: {args.shared} is not the shared data folder (no README.md)")
    make(os.path.abspath(args.shared))


if __name__ == "__main__":
    main()
