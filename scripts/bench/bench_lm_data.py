#!/usr/bin/env python3
"""The data path at scale: gpt2-finetune's tokenizing of a large text corpus and its tokenized
cache, against HF datasets.map with the fast GPT-2 tokenizer (batched=True, num_proc = --threads).

The corpus is the repository's English text (the Multi30k sample and MRPC's sentences), repeated
to each of --mb megabytes. For each size tunezoo runs gpt2-finetune twice with a fresh --cache-dir
and --max-steps 1 on a tiny GPT-2: the first run tokenizes (its log gives the seconds, hence MB/s)
and streams the blocks into the cache, the second maps it; for each, the wall time to the end of
step 1, the peak RSS, and the peak anonymous memory (RssAnon, sampled every 20 ms: the memory a
corpus larger than RAM would need; RSS also counts the mapped cache's pages, which the kernel can
drop). HF loads the largest corpus with load_dataset("text") and maps GPT2TokenizerFast over it;
its MB/s and peak RSS.

    /usr/bin/python3 scripts/bench/bench_lm_data.py --mb 100,500 --threads 2

Needs `datasets` and `transformers` for the HF side (pip install datasets); never needed to build
or test tunezoo."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import run_child, tail, thread_env  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TINY = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 32, "n_layer": 1, "n_head": 2}


def build_corpus(path, mb):
    lines = []
    for name in ("multi30k-en-de/val.en", "multi30k-en-de/val.de"):
        with open(os.path.join(ROOT, "assets", name), encoding="utf-8") as f:
            lines += [l.rstrip("\n") for l in f]
    with open(os.path.join(ROOT, "assets/glue-mrpc/train.tsv"), encoding="utf-8") as f:
        for row in list(f)[1:]:
            cols = row.rstrip("\n").split("\t")
            lines += cols[3:5]
    block = ("\n".join(lines) + "\n").encode()
    with open(path, "wb") as f:
        written = 0
        while written < mb * 1e6:
            f.write(block)
            written += len(block)
    return os.path.getsize(path)


def run_sampled(cmd, env, log_path):
    """run_child, plus the child's peak RssAnon in MiB, read from /proc every 20 ms."""
    peak = [0]
    done = threading.Event()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

        def sample():
            while not done.is_set():
                try:
                    with open(f"/proc/{proc.pid}/status") as f:
                        for line in f:
                            if line.startswith("RssAnon:"):
                                peak[0] = max(peak[0], int(line.split()[1]))
                except OSError:
                    pass
                done.wait(0.02)

        t = threading.Thread(target=sample)
        t.start()
        t0 = time.perf_counter()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        done.set()
        t.join()
    return os.waitstatus_to_exitcode(status), ru.ru_maxrss / 1024.0, peak[0] / 1024.0, wall


def hf_worker(args):
    from datasets import disable_caching, load_dataset
    from transformers import GPT2TokenizerFast
    disable_caching()
    tok = GPT2TokenizerFast(vocab_file=os.path.join(ROOT, "assets/gpt2-bpe/encoder.json"),
                            merges_file=os.path.join(ROOT, "assets/gpt2-bpe/vocab.bpe"))
    t0 = time.perf_counter()
    ds = load_dataset("text", data_files=args.corpus, split="train", keep_in_memory=True)
    ds = ds.map(lambda b: tok(b["text"]), batched=True, num_proc=args.threads, remove_columns=["text"],
                keep_in_memory=True)
    n = sum(len(x) for x in ds["input_ids"])
    print(json.dumps({"seconds": time.perf_counter() - t0, "tokens": n}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/gpt2-finetune"))
    ap.add_argument("--mb", default="500", help="corpus sizes in MB, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--corpus", default="", help=argparse.SUPPRESS)
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args)
    work = args.workdir or tempfile.mkdtemp(prefix="bench_lm_data_")
    os.makedirs(work, exist_ok=True)
    arch = os.path.join(work, "tiny.json")
    with open(arch, "w") as f:
        json.dump(TINY, f)
    rows = []
    for mb in [float(x) for x in args.mb.split(",")]:
        corpus = os.path.join(work, f"corpus-{mb:g}.txt")
        size = build_corpus(corpus, mb)
        cache = os.path.join(work, f"cache-{mb:g}")
        for run in ("first (tokenize, stream to the cache)", "second (cache hit, mapped)"):
            log = os.path.join(work, f"tz{len(rows)}.log")
            cmd = [args.bin, corpus, "--arch", arch, "--block-size", "1024", "--batch-size", "1", "--max-steps", "1",
                   "--eval-interval", "-1", "--save-interval", "-1", "--threads", str(args.threads), "--cache-dir",
                   cache, "--save-dir", os.path.join(work, f"run{len(rows)}")]
            rc, rss, anon, wall = run_sampled(cmd, thread_env(args.threads), log)
            if rc != 0:
                sys.exit(f"gpt2-finetune failed:\n{tail(log)}")
            text = open(log).read()
            m = re.search(r"tokenized \d+ rows in ([0-9.]+) s", text)
            rows.append((size, run, wall, rss, anon, float(m.group(1)) if m else None))
    print(f"corpus: repository text, repeated; {args.threads} threads")
    print(f"{'':52} {'MB/s':>7} {'to step 1 s':>12} {'peak RSS MiB':>13} {'peak anon MiB':>14}")
    for size, run, wall, rss, anon, tok_s in rows:
        mbs = f"{size / 1e6 / tok_s:7.1f}" if tok_s else f"{'-':>7}"
        print(f"{f'tunezoo {size / 1e6:.0f} MB ' + run:52} {mbs} {wall:12.1f} {rss:13.0f} {anon:14.0f}")
    if not args.skip_hf:
        log = os.path.join(work, "hf.log")
        rc, rss, wall = run_child([sys.executable, os.path.abspath(__file__), "--hf-worker", "--corpus", corpus,
                                   "--threads", str(args.threads)], thread_env(args.threads), log)
        if rc != 0:
            sys.exit(f"the HF side failed:\n{tail(log)}")
        r = json.loads(open(log).read().strip().splitlines()[-1])
        print(f"{f'HF datasets.map (GPT2TokenizerFast) {size / 1e6:.0f} MB':52} {size / 1e6 / r['seconds']:7.1f} "
              f"{'-':>12} {rss:13.0f} {'-':>14}")
    print(f"logs in {work}")


if __name__ == "__main__":
    main()
