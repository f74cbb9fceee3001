#!/usr/bin/env python3
"""Step time of two tunezoo builds on the same machine, for a before/after check of a change.

    /usr/bin/python3 scripts/bench/bench_ab_builds.py --before /tmp/before/build/bin \\
        --after build/bin --model gpt2-124m --pairs 3

Each pair runs both builds on the same training run (same config, data, seed, steps, threads),
one after the other; the order alternates between pairs, since on these machines the second of
two back-to-back runs is often a few percent slower. A run's figure is the mean ms/step of its
train lines after the first 2 (warm-up). The script prints each run and the mean of each side
over all pairs, and says nothing is faster unless every pair agrees. It needs nothing outside the
repository: GPT-2 trains on the MRPC sample in assets/ (gpt2-124m, classification) or as a language
model on the Multi30k sample's English side (gpt2-124m-lm: the LM head's 50k-column chunks), T5 on
the Multi30k sample.
"""
import argparse
import json
import os
import tempfile

from benchlib import read_train_metrics, run_child, tail, thread_env

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
WARMUP = 2

GPT2_124M = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
             "n_head": 12}
T5_SMALL = {"model_type": "t5", "vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_heads": 8,
            "num_layers": 6, "num_decoder_layers": 6, "relative_attention_num_buckets": 32,
            "relative_attention_max_distance": 128, "dropout_rate": 0.1, "feed_forward_proj": "relu",
            "tie_word_embeddings": True}


def command(model, bin_dir, work, run_dir, args):
    """The training command of one run, its config written into work."""
    common = ["--max-steps", str(args.steps), "--threads", str(args.threads), "--log-interval", "1",
              "--eval-interval", "-1", "--save-interval", "-1", "--save-dir", run_dir] + args.bin_args.split()
    if model == "gpt2-124m":
        arch = os.path.join(work, "gpt2.json")
        with open(arch, "w") as f:
            json.dump(GPT2_124M, f)
        return [os.path.join(bin_dir, "gpt2-classify"), "--dataset", "mrpc", "--arch", arch, "--batch-size", "8",
                "--max-len", "128"] + common
    data = os.path.join(ROOT, "assets", "multi30k-en-de")
    if model == "gpt2-124m-lm":
        arch, text = os.path.join(work, "gpt2.json"), os.path.join(work, "lm.en")
        with open(arch, "w") as f:
            json.dump(GPT2_124M, f)
        with open(os.path.join(data, "val.en")) as f, open(text, "w") as o:
            o.writelines(f.readlines()[:400])
        return [os.path.join(bin_dir, "gpt2-finetune"), text, "--arch", arch, "--block-size", "128", "--batch-size",
                "4"] + common
    arch = os.path.join(work, "t5.json")
    with open(arch, "w") as f:
        json.dump(T5_SMALL, f)
    src, tgt = os.path.join(work, "s.en"), os.path.join(work, "s.de")
    for name, out in (("val.en", src), ("val.de", tgt)):
        with open(os.path.join(data, name)) as f, open(out, "w") as o:
            o.writelines(f.readlines()[:200])
    return [os.path.join(bin_dir, "t5-finetune"), src, tgt, "--arch", arch, "--batch-size", "16"] + common


def run(model, bin_dir, work, name, args):
    """Mean ms/step after warm-up of one run, in its own folder work/name."""
    run_dir = os.path.join(work, name)
    cmd = command(model, bin_dir, work, run_dir, args)
    log = run_dir + ".log"
    rc, _, _ = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        raise SystemExit(f"{cmd[0]} exited {rc}; last lines of {log}:\n{tail(log)}")
    rows = read_train_metrics(os.path.join(run_dir, "metrics.jsonl"))
    if len(rows) <= WARMUP:
        raise SystemExit(f"{name}: expected more than {WARMUP} train lines, found {len(rows)}")
    timed = [r[1] for r in rows[WARMUP:]]
    return sum(timed) / len(timed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="bin folder of the first build")
    ap.add_argument("--after", required=True, help="bin folder of the second build")
    ap.add_argument("--model", default="gpt2-124m", choices=["gpt2-124m", "gpt2-124m-lm", "t5-small"])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin-args", default="", help="extra arguments for both builds, e.g. \"--precision bf16\"")
    args = ap.parse_args()
    sides = {"before": args.before, "after": args.after}
    results = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as work:
        for p in range(args.pairs):
            order = ("before", "after") if p % 2 == 0 else ("after", "before")
            for side in order:
                ms = run(args.model, sides[side], work, f"{side}-{p + 1}", args)
                results[side].append(ms)
                print(f"pair {p + 1} {side:6s} {ms:8.1f} ms/step", flush=True)
    mean = {s: sum(v) / len(v) for s, v in results.items()}
    print(f"{args.model}{' ' + args.bin_args if args.bin_args else ''}, {args.threads} threads, {args.steps} steps, "
          f"first {WARMUP} not timed, {args.pairs} pairs in alternating order")
    print(f"before {mean['before']:8.1f} ms/step   after {mean['after']:8.1f} ms/step   "
          f"after/before {mean['after'] / mean['before']:.3f}")
    faster = [a < b for a, b in zip(results["after"], results["before"])]
    verdict = "after is faster in every pair" if all(faster) else (
        "before is faster in every pair" if not any(faster) else "no side is faster in every pair (within noise)")
    print(verdict)


if __name__ == "__main__":
    main()
