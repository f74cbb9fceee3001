#!/usr/bin/env python3
"""Tokenizer throughput: tz-tokenize against Hugging Face `tokenizers` on GPT-2 byte-level BPE.

The text is every MRPC sentence (train + dev), one per line, repeated to about --mb megabytes.
MRPC and the GPT-2 vocab are read from --data (default the repository's assets/, which ships
glue-mrpc/ and gpt2-bpe/ whole; any folder laid out the same, such as the project's shared data
folder, will do).
HF runs in this process with one thread (RAYON_NUM_THREADS=1): `encode_batch` over all lines,
and a plain loop of `encode` per line. tz-tokenize runs as a subprocess (stdin -> stdout), so
its time includes loading the vocab (reported separately) and writing the ids as text. HF's BPE
keeps a word cache (10k words), tz-tokenize has none. The ids of both are compared line by line.

    pip install tokenizers
    python3 scripts/bench/bench_tokenizer.py [build/bin/tz-tokenize] [--mb 10] [--data DIR]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"  # must be set before tokenizers starts its thread pool
os.environ["TOKENIZERS_PARALLELISM"] = "true"  # let encode_batch use its (one-thread) pool

from tokenizers import Tokenizer, decoders, pre_tokenizers  # noqa: E402
from tokenizers.models import BPE  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_lines(data, mb):
    sents = []
    for name in ("train.tsv", "dev.tsv"):
        with open(os.path.join(data, "glue-mrpc", name), encoding="utf-8") as f:
            for line in f.read().split("\n")[1:]:
                cols = line.split("\t")
                if len(cols) == 5:
                    sents += [cols[3], cols[4]]
    base = sum(len(s.encode()) + 1 for s in sents)
    reps = max(1, int(mb * 1e6 / base + 0.5))
    return sents * reps


def hf_tokenizer(data):
    tok = Tokenizer(BPE.from_file(os.path.join(data, "gpt2-bpe", "encoder.json"),
                                  os.path.join(data, "gpt2-bpe", "vocab.bpe")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def best_of(n, fn):
    """Best wall time of n runs, with the CPU time (this process and its children) of that run:
    on a busy machine CPU time is the steadier number."""
    best = None
    for _ in range(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if best is None or dt < best[0]:
            best = (dt, cpu)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary", nargs="?", default=os.path.join(ROOT, "build", "bin", "tz-tokenize"))
    ap.add_argument("--mb", type=float, default=10.0, help="text size in MB (default 10)")
    ap.add_argument("--data", default=os.path.join(ROOT, "assets"),
                    help="folder holding glue-mrpc/ and gpt2-bpe/ (default assets/)")
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs (default 2)")
    args = ap.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"{args.binary}: not found (build it: cmake --build build --target tz-tokenize)")

    lines = load_lines(args.data, args.mb)
    text = "\n".join(lines) + "\n"
    nbytes = len(text.encode())
    mb = nbytes / 1e6
    print(f"text: {len(lines)} MRPC lines, {mb:.2f} MB")
    tok = hf_tokenizer(args.data)

    t_batch, enc = best_of(args.repeat, lambda: tok.encode_batch(lines, add_special_tokens=False))
    hf_ids = [e.ids for e in enc]
    t_plain, _ = best_of(args.repeat, lambda: [tok.encode(s, add_special_tokens=False) for s in lines])

    with tempfile.TemporaryDirectory() as tmp:
        inp = os.path.join(tmp, "in.txt")
        with open(inp, "w", encoding="utf-8") as f:
            f.write(text)
        tokenizer = os.path.join(args.data, "gpt2-bpe")

        def run_tz(path):
            with open(path, "rb") as fi:
                return subprocess.run([args.binary, "--tokenizer", tokenizer], stdin=fi, stdout=subprocess.PIPE,
                                      check=True).stdout

        empty = os.path.join(tmp, "empty.txt")
        open(empty, "w").close()
        t_load, _ = best_of(args.repeat, lambda: run_tz(empty))
        t_tz, out = best_of(args.repeat, lambda: run_tz(inp))
    tz_ids = [[int(x) for x in l.split()] for l in out.decode().split("\n")[:-1]]
    same = tz_ids == hf_ids
    mismatches = sum(a != b for a, b in zip(tz_ids, hf_ids)) + abs(len(tz_ids) - len(hf_ids))

    (tb, cb), (tp, cp), (tt, ct), (tl, cl) = t_batch, t_plain, t_tz, t_load
    rows = [("HF tokenizers encode_batch (1 thread)", tb, cb), ("HF tokenizers encode per line", tp, cp),
            ("tz-tokenize (process, incl. load + output)", tt, ct),
            ("tz-tokenize (excl. %.0f ms load)" % (1000 * tl), max(tt - tl, 1e-9), max(ct - cl, 1e-9))]
    print(f"{'':45s} {'wall s':>8s} {'MB/s':>8s} {'cpu s':>8s} {'MB/cpu-s':>9s}")
    for name, t, c in rows:
        print(f"{name:45s} {t:8.3f} {mb / t:8.2f} {c:8.3f} {mb / c:9.2f}")
    print(f"ratio tz-tokenize / HF batch: {tb / tt:.1f}x wall, {cb / ct:.1f}x cpu "
          f"(excl. load {tb / max(tt - tl, 1e-9):.1f}x wall)")
    print(f"ratio tz-tokenize / HF plain: {tp / tt:.1f}x wall, {cp / ct:.1f}x cpu")
    print("ids identical to HF: %s%s" % ("yes" if same else "NO", "" if same else f" ({mismatches} lines differ)"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
