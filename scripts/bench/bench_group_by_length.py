#!/usr/bin/env python3
"""--group-by-length against plain shuffling: the same bert-classify training run twice on a GLUE
task (by default SST-2, whose sentences run from 2 to 60-odd tokens), and for each the padding
fraction (padded tokens / all tokens computed), the real tokens per second and the ms per step.

    /usr/bin/python3 scripts/bench/bench_group_by_length.py --data-root ../shared/data --task sst2 \\
        --model /path/to/all-MiniLM-L6-v2 --steps 200

The GLUE folder is read from --data-root/glue-<task>/ (the repository ships MRPC only, so SST-2
needs the project's shared data folder). --model is an HF BERT folder; without it a small random
BERT (--arch) is trained, which measures the data path, not a real model. Both runs use the same
seed, batch size, max length and threads; each step's real tokens come from its logged tokens/s x
ms/step, its computed tokens from its batch shape B x T. Never needed to build or test tunezoo."""
import argparse
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import read_train_metrics, run_child, tail, thread_env  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SMALL_BERT = {"model_type": "bert", "vocab_size": 30522, "hidden_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 512, "max_position_embeddings": 512,
              "type_vocab_size": 2}


def run(args, work, grouped):
    name = "grouped" if grouped else "plain"
    save = os.path.join(work, name)
    cmd = [args.bin, "--dataset", args.task, "--data-dir", os.path.join(args.data_root, "glue-" + args.task),
           "--max-steps", str(args.steps), "--batch-size", str(args.batch_size), "--max-len", str(args.max_len),
           "--threads", str(args.threads), "--log-interval", "1", "--eval-interval", "-1", "--save-interval", "-1",
           "--seed", str(args.seed), "--save-dir", save]
    if args.model:
        cmd += ["--model", args.model]
    else:
        arch = os.path.join(work, "bert.json")
        with open(arch, "w") as f:
            json.dump(SMALL_BERT, f)
        cmd += ["--arch", arch, "--tokenizer", os.path.join(ROOT, "assets/bert-wordpiece/bert-base-uncased-vocab.txt")]
    if grouped:
        cmd.append("--group-by-length")
    log = os.path.join(work, name + ".log")
    rc, rss, _ = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        sys.exit(f"bert-classify ({name}) failed:\n{tail(log)}")
    real = computed = ms = 0.0
    with open(os.path.join(save, "metrics.jsonl")) as f:
        recs = [json.loads(line) for line in f if '"type":"train"' in line]
    for r in recs:
        real += r["tokens_per_s"] * r["ms_per_step"] / 1e3
        computed += r["batch_shape"][0] * r["batch_shape"][1]
        ms += r["ms_per_step"]
    timed = read_train_metrics(os.path.join(save, "metrics.jsonl"))
    return {"padding": 1 - real / computed, "tokens_per_s": real / (ms / 1e3), "ms_per_step": ms / len(recs),
            "steps": len(timed), "rss_mb": rss}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/bert-classify"))
    ap.add_argument("--data-root", required=True, help="folder holding glue-<task>/ (e.g. ../shared/data)")
    ap.add_argument("--task", default="sst2")
    ap.add_argument("--model", default="", help="HF BERT folder (default: a small random BERT)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="group_by_length_")
    os.makedirs(work, exist_ok=True)
    rows = {g: run(args, work, g) for g in (False, True)}
    model = args.model or "a small random BERT (2 x 128)"
    print(f"bert-classify on {args.task}, {model}: {args.steps} steps, batch {args.batch_size}, "
          f"max-len {args.max_len}, {args.threads} threads")
    print(f"{'':22} {'padding %':>10} {'tokens/s':>10} {'ms/step':>9}")
    for g, name in ((False, "plain shuffle"), (True, "--group-by-length")):
        r = rows[g]
        print(f"{name:22} {100 * r['padding']:10.1f} {r['tokens_per_s']:10.0f} {r['ms_per_step']:9.1f}")
    print(f"tokens/s x{rows[True]['tokens_per_s'] / rows[False]['tokens_per_s']:.2f} with --group-by-length; "
          f"logs in {work}")


if __name__ == "__main__":
    main()
