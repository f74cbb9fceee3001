#!/usr/bin/env python3
"""gpt2-finetune against HF GPT2LMHeadModel (PyTorch, CPU) on causal-LM training steps of the same
shape: GPT-2 124M (random weights) on rows of --block-size tokens, batch --batch-size, AdamW,
clipping at 1.0, the same threads; the mean ms per step after the first 2 on each side, and the
tokens per second. tunezoo reads its blocks from the repository's Multi30k sample (enough text for
a few 1024-token rows); PyTorch trains on random ids of the same shape, which costs the same.

    /usr/bin/python3 scripts/bench/bench_gpt2_lm.py --steps 6 --block-size 1024 --batch-size 1

--precision bf16 runs tunezoo with --precision bf16 and PyTorch under torch.autocast("cpu",
dtype=torch.bfloat16). Never needed to build or test tunezoo."""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import read_train_metrics, run_child, tail, thread_env  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
WARMUP = 2
GPT2_124M = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12,
             "n_head": 12, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1}


def torch_worker(args):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**{k: v for k, v in GPT2_124M.items() if k != "model_type"}))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.0)
    times = []
    for _ in range(args.steps):
        ids = torch.randint(0, 50257, (args.batch_size, args.block_size))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"ms": 1000 * sum(times[WARMUP:]) / max(1, len(times) - WARMUP),
                      "torch": torch.__version__}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build/bin/gpt2-finetune"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--block-size", type=int, default=1024)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--workdir", default="")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return torch_worker(args)
    if args.steps <= WARMUP:
        sys.exit(f"--steps must be more than {WARMUP}")
    work = args.workdir or tempfile.mkdtemp(prefix="bench_gpt2_lm_")
    os.makedirs(work, exist_ok=True)
    arch = os.path.join(work, "gpt2-124m.json")
    with open(arch, "w") as f:
        json.dump(GPT2_124M, f)
    text = os.path.join(ROOT, "assets/multi30k-en-de/val.en")
    save = os.path.join(work, "tz")
    cmd = [args.bin, text, "--arch", arch, "--block-size", str(args.block_size), "--batch-size",
           str(args.batch_size), "--max-steps", str(args.steps), "--val-split", "0.1", "--threads", str(args.threads),
           "--log-interval", "1", "--eval-interval", "-1", "--save-interval", "-1", "--precision", args.precision,
           "--lr", "5e-5", "--no-cache", "--save-dir", save]
    log = os.path.join(work, "tz.log")
    rc, tz_rss, _ = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        sys.exit(f"gpt2-finetune failed:\n{tail(log)}")
    rows = read_train_metrics(os.path.join(save, "metrics.jsonl"))
    tz_ms = sum(r[1] for r in rows[WARMUP:]) / max(1, len(rows) - WARMUP)
    wlog = os.path.join(work, "torch.log")
    wcmd = [sys.executable, os.path.abspath(__file__), "--worker"] + sys.argv[1:]
    rc, pt_rss, _ = run_child(wcmd, thread_env(args.threads), wlog)
    if rc != 0:
        sys.exit(f"the PyTorch side failed:\n{tail(wlog)}")
    with open(wlog) as f:
        pt = json.loads(f.read().strip().splitlines()[-1])
    tokens = args.batch_size * args.block_size
    print(f"GPT-2 124M causal LM, {args.batch_size} x {args.block_size} tokens, {args.precision}, {args.threads} "
          f"threads, {args.steps} steps (the first {WARMUP} not timed); PyTorch {pt['torch']}")
    print(f"{'':26} {'ms/step':>9} {'tokens/s':>9} {'peak RSS MiB':>13}")
    print(f"{'tunezoo gpt2-finetune':26} {tz_ms:9.1f} {1000 * tokens / tz_ms:9.0f} {tz_rss:13.0f}")
    side = "PyTorch bf16 autocast" if args.precision == "bf16" else "PyTorch fp32"
    print(f"{side:26} {pt['ms']:9.1f} {1000 * tokens / pt['ms']:9.0f} {pt_rss:13.0f}")
    print(f"x{pt['ms'] / tz_ms:.2f} (PyTorch ms / tunezoo ms); logs in {work}")


if __name__ == "__main__":
    main()
