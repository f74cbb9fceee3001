#!/usr/bin/env python3
"""Side-by-side CPU training benchmark: tunezoo's gpt2-classify against PyTorch/HF.

For each model config it first runs our program on GLUE MRPC for N steps and
reads the per-step ms/step and batch shapes from its metrics.jsonl. Then it
times HF GPT2ForSequenceClassification (train mode, default dropout 0.1, AdamW,
gradient clipping at 1.0) on exactly the same sequence of batch shapes, with
random token ids filling every row. The first 2 steps on each side are warm-up
and not counted. Each side runs in its own child process, so the peak RSS that
os.wait4 reports belongs to that side alone.

    /usr/bin/python3 scripts/bench/bench_gpt2_train.py --bin build/bin/gpt2-classify \\
        --steps 10 --threads 2 --configs small,124m
    /usr/bin/python3 scripts/bench/bench_gpt2_train.py --torch-only --shapes 8x57,8x61
    /usr/bin/python3 scripts/bench/bench_gpt2_train.py --configs 124m --checkpoint-activations

--checkpoint-activations turns on activation checkpointing on both sides: gpt2-classify's
option of that name, and HF's gradient_checkpointing_enable() with its defaults.

--lora R (issue 36) trains LoRA adapters of rank R (alpha 2R, no dropout, on --lora-targets,
default c_attn,c_proj,c_fc) on both sides: gpt2-classify's --lora-r, and HF PEFT's get_peft_model
(task SEQ_CLS, so score trains too) with AdamW over the trainable tensors only. gpt2-classify
then also runs without LoRA, and the table adds our full fine-tuning's ms/step over our LoRA's
and the gradient and AdamW memory of each (the memory line's figures).

    /usr/bin/python3 scripts/bench/bench_gpt2_train.py --configs 124m --lora 8

See scripts/bench/README.md. The Python side needs torch and transformers
(scripts/setup_python.sh).
"""

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import memory_line, read_train_metrics, run_child, tail, thread_env  # noqa: E402

WARMUP = 2

# HF config.json files, written out in full (as the hub's gpt2 config.json is)
# so that a reader which ignores HF defaults still sees every size.
CONFIGS = {
    "124m": {"n_layer": 12, "n_embd": 768, "n_head": 12},
    "small": {"n_layer": 6, "n_embd": 512, "n_head": 8},
    # Not a benchmark: a seconds-long smoke test of the whole pipeline.
    "tiny": {"n_layer": 2, "n_embd": 64, "n_head": 4},
}


def hf_config(name):
    c = CONFIGS[name]
    return {
        "architectures": ["GPT2ForSequenceClassification"],
        "model_type": "gpt2",
        "activation_function": "gelu_new",
        "vocab_size": 50257,
        "n_positions": 1024,
        "n_ctx": 1024,
        "n_embd": c["n_embd"],
        "n_head": c["n_head"],
        "n_layer": c["n_layer"],
        "n_inner": None,
        "layer_norm_epsilon": 1e-5,
        "initializer_range": 0.02,
        "resid_pdrop": 0.1,
        "embd_pdrop": 0.1,
        "attn_pdrop": 0.1,
        "summary_first_dropout": 0.1,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "summary_activation": None,
        "summary_proj_to_labels": True,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "num_labels": 2,
        "bos_token_id": 50256,
        "eos_token_id": 50256,
        "pad_token_id": 50256,
        "use_cache": False,
        "torch_dtype": "float32",
    }


def parse_shapes(text):
    shapes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            b, t = item.lower().split("x")
            shapes.append((int(b), int(t)))
        except ValueError:
            raise SystemExit(f"--shapes: expected BxT items like 8x57, found {item!r}")
    if not shapes:
        raise SystemExit("--shapes: expected at least one BxT item")
    return shapes


def shapes_text(shapes):
    return ",".join(f"{b}x{t}" for b, t in shapes)


def lora_args(args):
    return ["--lora-r", str(args.lora), "--lora-alpha", str(2 * args.lora), "--lora-targets", args.lora_targets]


def run_tunezoo(args, name, arch_path, workdir, lora=False):
    name = name + ("-lora" if lora else "")
    save_dir = os.path.join(workdir, f"tz-{name}")
    os.makedirs(save_dir, exist_ok=True)
    cmd = [args.bin, "--dataset", args.dataset, "--arch", arch_path,
           "--max-steps", str(args.steps), "--batch-size", str(args.batch_size),
           "--max-len", str(args.max_len), "--log-interval", "1", "--eval-interval", "-1",
           "--save-interval", "-1", "--threads", str(args.threads), "--save-dir", save_dir]
    cmd += args.bin_args.split() if args.bin_args else []
    cmd += ["--checkpoint-activations"] if args.checkpoint_activations else []
    cmd += lora_args(args) if lora else []
    log = os.path.join(workdir, f"tz-{name}.log")
    print(f"[{name}] tunezoo: {' '.join(cmd)}", flush=True)
    rc, rss, wall = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        raise SystemExit(f"[{name}] {args.bin} exited {rc}; last lines of {log}:\n{tail(log)}")
    metrics = os.path.join(save_dir, "metrics.jsonl")
    if not os.path.exists(metrics):
        raise SystemExit(f"[{name}] {metrics}: not written by {args.bin}")
    rows = read_train_metrics(metrics)
    if len(rows) <= WARMUP:
        raise SystemExit(f"{metrics}: expected more than {WARMUP} train lines, found {len(rows)}")
    timed = [r[1] for r in rows[WARMUP:]]
    return {"ms": sum(timed) / len(timed), "rss_mb": rss, "wall_s": wall,
            "shapes": [r[2] for r in rows], "losses": [r[3] for r in rows], "grad_adamw_mib": memory_line(log)}


def run_torch(args, name, arch_path, shapes, workdir):
    out = os.path.join(workdir, f"torch-{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--arch", arch_path,
           "--shapes", shapes_text(shapes), "--threads", str(args.threads),
           "--worker-out", out, "--seed", str(args.seed)]
    cmd += ["--checkpoint-activations"] if args.checkpoint_activations else []
    cmd += ["--torch-autocast-bf16"] if args.torch_autocast_bf16 else []
    cmd += ["--lora", str(args.lora), "--lora-targets", args.lora_targets] if args.lora else []
    log = os.path.join(workdir, f"torch-{name}.log")
    print(f"[{name}] pytorch: {len(shapes)} steps, shapes {shapes_text(shapes)}", flush=True)
    rc, rss, wall = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        raise SystemExit(f"[{name}] PyTorch worker exited {rc}; last lines of {log}:\n{tail(log)}")
    with open(out) as f:
        res = json.load(f)
    timed = res["ms_per_step"][WARMUP:]
    return {"ms": sum(timed) / len(timed), "rss_mb": rss, "wall_s": wall,
            "versions": res["versions"], "losses": res["losses"]}


def worker(args):
    """One PyTorch training run over the given shapes, in its own process."""
    import torch
    import transformers
    from transformers import GPT2Config, GPT2ForSequenceClassification

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)
    with open(args.arch) as f:
        cfg = GPT2Config(**json.load(f))
    model = GPT2ForSequenceClassification(cfg)
    if args.checkpoint_activations:
        model.gradient_checkpointing_enable()
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    if args.lora:
        import peft
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(r=args.lora, lora_alpha=2 * args.lora, lora_dropout=0.0,
                                                 target_modules=args.lora_targets.split(","), task_type="SEQ_CLS"))
        versions["peft"] = peft.__version__
    model.train()
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trained if not (n.endswith(".bias") or ".ln_" in n)]
    no_decay = [p for n, p in trained if n.endswith(".bias") or ".ln_" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else cfg.vocab_size - 1
    ms, losses = [], []
    for b, t in parse_shapes(args.shapes):
        # Ids below the pad id, so every row is full length and pools its last token.
        ids = torch.randint(0, pad, (b, t), generator=gen)
        mask = torch.ones(b, t, dtype=torch.long)
        labels = torch.randint(0, cfg.num_labels, (b,), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        # torch.autocast's bf16 on the CPU: matmuls in bf16, the rest fp32 (what --precision bf16 is measured against)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.torch_autocast_bf16):
            out = model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trained], 1.0)
        opt.step()
        ms.append((time.perf_counter() - t0) * 1000.0)
        losses.append(out.loss.item())
        print(f"step {len(ms)} shape {b}x{t} loss {losses[-1]:.4f} {ms[-1]:.1f} ms", flush=True)
    versions["threads"] = torch.get_num_threads()
    res = {"ms_per_step": ms, "losses": losses, "versions": versions}
    with open(args.worker_out, "w") as f:
        json.dump(res, f)


def fmt(x, spec):
    if x is None:
        return format("-", ">" + spec.split(".")[0])
    return format(x, spec)


def main():
    ap = argparse.ArgumentParser(description="CPU training benchmark: tunezoo gpt2-classify vs PyTorch/HF")
    ap.add_argument("--bin", default="build/bin/gpt2-classify", help="path to gpt2-classify")
    ap.add_argument("--bin-args", default="", help="extra arguments passed to gpt2-classify, one string")
    ap.add_argument("--steps", type=int, default=10, help="training steps per side (first 2 not timed)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for both sides")
    ap.add_argument("--configs", default="small,124m", help="comma list of: " + ",".join(CONFIGS))
    ap.add_argument("--dataset", default="mrpc")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint-activations", action="store_true",
                    help="activation checkpointing on both sides (see the module doc)")
    ap.add_argument("--torch-autocast-bf16", action="store_true",
                    help="the PyTorch side under torch.autocast('cpu', dtype=torch.bfloat16)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank on both sides (see the module doc); 0: off")
    ap.add_argument("--lora-targets", default="c_attn,c_proj,c_fc", help="with --lora: the modules adapted")
    ap.add_argument("--torch-only", action="store_true",
                    help="skip gpt2-classify; time PyTorch on --shapes only")
    ap.add_argument("--shapes", default="",
                    help="BxT list for --torch-only, e.g. 8x57,8x61 (cycled to --steps)")
    ap.add_argument("--workdir", default="", help="keep configs, logs and metrics here (default: a temp dir)")
    ap.add_argument("--json-out", default="", help="also write the results to this file as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--arch", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        worker(args)
        return

    if args.steps <= WARMUP:
        raise SystemExit(f"--steps: expected more than {WARMUP} (the first {WARMUP} are warm-up)")
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for n in names:
        if n not in CONFIGS:
            raise SystemExit(f"--configs: unknown config {n!r}; expected one of {','.join(CONFIGS)}")
    if args.torch_only:
        base = parse_shapes(args.shapes or "8x64")
        torch_shapes = [base[i % len(base)] for i in range(args.steps)]
    elif not os.path.exists(args.bin):
        raise SystemExit(f"--bin: {args.bin} not found; build gpt2-classify or use --torch-only")

    tmp = None
    workdir = args.workdir
    if not workdir:
        tmp = tempfile.TemporaryDirectory(prefix="tz-bench-")
        workdir = tmp.name
    os.makedirs(workdir, exist_ok=True)

    rows = []
    versions = None
    for name in names:
        arch = os.path.join(workdir, f"{name}.config.json")
        with open(arch, "w") as f:
            json.dump(hf_config(name), f, indent=2)
        tz = full = None
        shapes = None if not args.torch_only else torch_shapes
        if not args.torch_only:
            tz = run_tunezoo(args, name, arch, workdir, lora=args.lora > 0)
            shapes = tz["shapes"]
            if args.lora:
                full = run_tunezoo(args, name, arch, workdir)
        pt = run_torch(args, name, arch, shapes, workdir)
        versions = pt["versions"]
        rows.append((name, tz, pt, shapes, full))

    print()
    lora = f"; LoRA r {args.lora} (alpha {2 * args.lora}) on {args.lora_targets} on both sides, PEFT " \
        f"{versions.get('peft')}" if args.lora else ""
    print(f"PyTorch {versions['torch']}, transformers {versions['transformers']}{lora}; "
          f"{args.steps} steps, first {WARMUP} not timed; batch {args.batch_size}, max-len {args.max_len}"
          f"{'; activation checkpointing on both sides' if args.checkpoint_activations else ''}"
          f"{'; PyTorch under bf16 autocast' if args.torch_autocast_bf16 else ''}")
    hdr = f"{'config':7s} {'threads':>7s} {'tunezoo ms/step':>16s} {'PyTorch ms/step':>16s} " \
          f"{'ratio':>6s} {'tunezoo RSS MiB':>16s} {'PyTorch RSS MiB':>16s}  shapes"
    print(hdr)
    print("-" * len(hdr))
    for name, tz, pt, shapes, _ in rows:
        ratio = pt["ms"] / tz["ms"] if tz else None
        uniq = sorted({t for _, t in shapes})
        print(f"{name:7s} {args.threads:7d} {fmt(tz and tz['ms'], '16.1f')} {pt['ms']:16.1f} "
              f"{fmt(ratio, '6.2f')} {fmt(tz and tz['rss_mb'], '16.0f')} {pt['rss_mb']:16.0f}  "
              f"B={shapes[0][0]} T={uniq[0]}..{uniq[-1]}")
    print("ratio = PyTorch ms / tunezoo ms (> 1: tunezoo is faster)")
    for name, tz, _, _, full in rows:
        if not full:
            continue
        g_full, g_lora = full["grad_adamw_mib"], tz["grad_adamw_mib"]
        mem = (f"; gradients + AdamW state {sum(g_lora):.1f} MiB with LoRA, {sum(g_full):.1f} MiB full "
               f"({100 * sum(g_lora) / sum(g_full):.2f}%)") if g_full and g_lora else ""
        print(f"{name}: tunezoo full fine-tuning {full['ms']:.1f} ms/step, with LoRA {tz['ms']:.1f} "
              f"({full['ms'] / tz['ms']:.2f}x){mem}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"versions": versions, "threads": args.threads, "steps": args.steps, "warmup": WARMUP,
                       "bin_args": args.bin_args, "torch_autocast_bf16": args.torch_autocast_bf16,
                       "lora": args.lora, "lora_targets": args.lora_targets if args.lora else None,
                       "configs": {name: {"tunezoo": tz, "pytorch": pt, "tunezoo_full": full}
                                   for name, tz, pt, _, full in rows}}, f, indent=1)
    if args.workdir:
        print(f"logs and metrics kept in {workdir}")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
