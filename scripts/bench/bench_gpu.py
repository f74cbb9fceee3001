#!/usr/bin/env python3
"""Training throughput on one device: tunezoo against PyTorch/HF on the same GPU, in one run
(issue 18's benchmark; scripts/bench/gpu.sh builds and calls it).

Workloads (--workloads; the *-tiny ones are seconds-long smoke tests, e.g. on the CPU):
  gpt2-mrpc     GPT-2 124M sequence classification, shipped MRPC, batch 32, --max-len 128
  gpt2-lm-1024  GPT-2 124M causal LM (gpt2-finetune), synthetic text in blocks of 1024, batch 16
  bert-128      BERT-base sequence classification, shipped MRPC, batch 32, --max-len 128
  t5-512        T5-base (v1.0 sizes), synthetic text cut to 512 source / 128 target tokens, batch 8
  t5-3b-b1      T5-3B sizes at 512 / 128 with activation checkpointing (HF: gradient
  t5-3b-b8      checkpointing), batch 1 and batch 8: does it train on one 80 GB GPU?

Sides (--sides):
  tunezoo       the program on --device at its default precision (--precision auto: bf16 on a
                GPU with bf16 tensor cores, fp32 on the CPU); its batch shapes are what the
                others replay
  tunezoo-fp32  the program with --precision fp32
  tunezoo-fused the program with TZ_CUDA_ATTENTION=fused: the fused attention kernels where they
                apply (bf16/fp16, head sizes up to 64), else the materialized path
  eager-fp32    HF model, PyTorch eager, fp32, attn_implementation="sdpa" where the model has it
  eager-bf16    the same under torch.autocast(bfloat16)
  compile-bf16  torch.compile(model) under autocast(bfloat16)

GPT-2 and BERT train on MRPC with dynamic padding: tunezoo logs each step's batch shape in
metrics.jsonl, and the PyTorch sides replay exactly those shapes with random ids. T5's rows
are all cut to the full lengths, so every step is B x 512 / B x 128 on every side, and the
language model's blocks are all 1024 long.

Reported per side: ms per optimizer step (mean after --warmup steps), tokens/s (B x T per step,
source + target for T5), model TFLOP/s from the usual count (6 x matmul parameters x tokens +
12 x layers x T^2 x width for attention, per sequence, the LM head included; recompute not
counted), MFU against the device's bf16 dense peak (H100/H200 989, A100 312, L40S 362 TFLOP/s,
or --peak-tflops), and peak device memory (PyTorch: max_memory_allocated; tunezoo: its
"memory on" line, everything allocated through its backend). On the CPU the memory is the
child's peak RSS and MFU is left out. A side that fails (out of memory, say) prints "failed".
"ms seen" is the mean over the timed steps whose batch shape an earlier step of the run had, with
its speedup: a new shape can cost a side a plan or a compile (on the H200, PyTorch eager took
146 ms/step on gpt2-mrpc's 12 steps of mostly new lengths, more than the 111 of gpt2-lm-1024's 16 x
1024), so with dynamic padding ask for enough --steps that lengths repeat.

    bash scripts/bench/gpu.sh                                   # on a GPU machine
    /usr/bin/python3 scripts/bench/bench_gpu.py --device cpu --workloads gpt2-tiny,gpt2-lm-tiny,bert-tiny,t5-tiny,t5-ckpt-tiny \\
        --sides tunezoo,tunezoo-fp32,eager-fp32 --steps 5        # the smoke test on this machine
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import read_train_metrics, run_child, tail, thread_env  # noqa: E402
from bench_gpt2_train import hf_config as gpt2_hf_config  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BERT_BASE = {"model_type": "bert", "architectures": ["BertForSequenceClassification"], "vocab_size": 30522,
             "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
             "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
             "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
             "layer_norm_eps": 1e-12, "pad_token_id": 0, "num_labels": 2}
T5_BASE = {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "vocab_size": 32128, "d_model": 768,
           "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_decoder_layers": 12, "num_heads": 12,
           "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128, "dropout_rate": 0.1,
           "layer_norm_epsilon": 1e-6, "initializer_factor": 1.0, "feed_forward_proj": "relu",
           "tie_word_embeddings": True, "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}


def tiny(cfg, **sizes):
    c = dict(cfg)
    c.update(sizes)
    return c


def gpt2_config(layers, width, heads):
    c = gpt2_hf_config("124m")
    c.update({"n_layer": layers, "n_embd": width, "n_head": heads})
    return c


T5_3B = tiny(T5_BASE, d_model=1024, d_kv=128, d_ff=16384, num_layers=24, num_decoder_layers=24, num_heads=32)

# name: (family, HF config, batch, lengths, activation checkpointing); lengths is max-len (the LM's
# block size), or (source, target) for T5
WORKLOADS = {
    "gpt2-mrpc": ("gpt2", gpt2_config(12, 768, 12), 32, 128, False),
    "gpt2-lm-1024": ("gpt2lm", gpt2_config(12, 768, 12), 16, 1024, False),
    "bert-128": ("bert", BERT_BASE, 32, 128, False),
    "t5-512": ("t5", T5_BASE, 8, (512, 128), False),
    "t5-3b-b1": ("t5", T5_3B, 1, (512, 128), True),
    "t5-3b-b8": ("t5", T5_3B, 8, (512, 128), True),
    "gpt2-tiny": ("gpt2", gpt2_config(2, 64, 4), 4, 64, False),
    "gpt2-lm-tiny": ("gpt2lm", gpt2_config(2, 64, 4), 4, 64, False),
    "bert-tiny": ("bert", tiny(BERT_BASE, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128), 4, 64, False),
    "t5-tiny": ("t5", tiny(T5_BASE, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2,
                           num_heads=4), 2, (48, 16), False),
    "t5-ckpt-tiny": ("t5", tiny(T5_BASE, d_model=64, d_kv=16, d_ff=128, num_layers=3, num_decoder_layers=3,
                                num_heads=4), 2, (48, 16), True),
}
DEFAULT_WORKLOADS = "gpt2-mrpc,gpt2-lm-1024,bert-128,t5-512,t5-3b-b1,t5-3b-b8"
SIDES = ("tunezoo", "tunezoo-fp32", "tunezoo-fused", "eager-fp32", "eager-bf16", "compile-bf16")
PROGRAMS = {"gpt2": "gpt2-classify", "gpt2lm": "gpt2-finetune", "bert": "bert-classify", "t5": "t5-finetune"}
PEAK_BF16_TFLOPS = (("H200", 989.4), ("H100", 989.4), ("A100", 312.0), ("L40S", 362.05))


# ---- model FLOPs ----

def train_flops(family, cfg, shapes):
    """Model FLOPs of training steps of these shapes (forward + backward = 3 x forward; a matmul
    of m x k by k x n is 2mkn). shapes: (B, T) per step, or (B, S, T) for T5."""
    total = 0.0
    for shape in shapes:
        if family in ("gpt2", "gpt2lm", "bert"):
            B, T = shape
            C = cfg.get("n_embd", cfg.get("hidden_size"))
            L = cfg.get("n_layer", cfg.get("num_hidden_layers"))
            F = cfg.get("n_inner") or cfg.get("intermediate_size") or 4 * C
            per_token = L * (4 * C * C + 2 * C * F)  # qkv + out projection, the MLP
            if family == "gpt2lm":
                per_token += C * cfg["vocab_size"]  # the tied LM head
            total += 3 * B * (2 * per_token * T + L * 4 * T * T * C)
        else:
            B, S, T = shape
            C, I, F, V = cfg["d_model"], cfg["num_heads"] * cfg["d_kv"], cfg["d_ff"], cfg["vocab_size"]
            Le, Ld = cfg["num_layers"], cfg["num_decoder_layers"]
            enc = Le * (2 * (4 * C * I + 2 * C * F) * S + 4 * S * S * I)
            dec = Ld * (2 * (4 * C * I + 2 * C * I + 2 * C * F) * T + 2 * 2 * C * I * S + 4 * T * T * I + 4 * T * S * I)
            head = 2 * C * V * T
            total += 3 * B * (enc + dec + head)
    return total


# ---- data ----

def lm_text(workdir, tokens, seed):
    """A text file of at least `tokens` GPT-2 tokens (about one per word), for gpt2-finetune."""
    import random
    rng = random.Random(seed)
    words = ("the model trains on long documents and writes short summaries of what they say about "
             "results methods data tables figures experiments baselines errors").split()
    path = os.path.join(workdir, "lm.txt")
    with open(path, "w") as f:
        for _ in range(tokens // 100 + 1):
            f.write(" ".join(rng.choice(words) for _ in range(100)) + "\n")
    return path


def t5_data(workdir, rows, seed):
    """Line-aligned source/target files whose every line is longer than 512 / 128 T5 tokens."""
    import random
    rng = random.Random(seed)
    words = ("the model trains on long documents and writes short summaries of what they say about "
             "results methods data tables figures experiments baselines errors").split()
    src, tgt = os.path.join(workdir, "t5.src"), os.path.join(workdir, "t5.tgt")
    with open(src, "w") as fs, open(tgt, "w") as ft:
        for _ in range(rows):
            fs.write(" ".join(rng.choice(words) for _ in range(700)) + "\n")
            ft.write(" ".join(rng.choice(words) for _ in range(200)) + "\n")
    return src, tgt


# ---- the two kinds of run ----

def run_tunezoo(args, name, side, workdir, data):
    family, cfg, batch, lengths, ckpt = WORKLOADS[name]
    arch = os.path.join(workdir, f"{name}.json")
    with open(arch, "w") as f:
        json.dump(cfg, f, indent=1)
    save = os.path.join(workdir, f"{side}-{name}")
    cmd = [os.path.join(args.bin_dir, PROGRAMS[family])]
    if family == "t5":
        cmd += [data["t5"][0], data["t5"][1], "--max-source-len", str(lengths[0]), "--max-target-len", str(lengths[1]),
                "--val-split", "0.05"]
    elif family == "gpt2lm":
        cmd += [data["lm"], "--block-size", str(lengths), "--val-split", "0.05", "--no-cache"]
    else:
        cmd += ["--dataset", "mrpc", "--max-len", str(lengths)]
    cmd += ["--arch", arch, "--batch-size", str(batch), "--max-steps", str(args.steps), "--log-interval", "1",
            "--eval-interval", "-1", "--save-interval", "-1", "--device", args.device, "--save-dir", save]
    if ckpt:
        cmd += ["--checkpoint-activations"]
    if side == "tunezoo-fp32":
        cmd += ["--precision", "fp32"]
    if args.device == "cpu":
        cmd += ["--threads", str(args.threads)]
    log = os.path.join(workdir, f"{side}-{name}.log")
    env = thread_env(args.threads)
    env.pop("TZ_CUDA_ATTENTION", None)
    if side == "tunezoo-fused":
        env["TZ_CUDA_ATTENTION"] = "fused"
    print(f"[{name}] {side}: {' '.join(cmd)}", flush=True)
    rc, rss, _ = run_child(cmd, env, log)
    if rc != 0:
        print(f"[{name}] {side} failed (exit {rc}); last lines of {log}:\n{tail(log, 8)}", flush=True)
        return None
    rows = read_train_metrics(os.path.join(save, "metrics.jsonl"))
    if len(rows) <= args.warmup:
        raise SystemExit(f"[{name}] expected more than {args.warmup} train lines, found {len(rows)}")
    shapes = [r[2] for r in rows]
    if family == "t5":  # every row is cut to the full lengths
        shapes = [(b, lengths[0], lengths[1]) for b, _ in shapes]
    timed = rows[args.warmup:]
    text = open(log, errors="replace").read()
    mem = re.search(r"memory on \S+: ([0-9.]+) MiB", text)
    prec = re.search(r"^precision: (\S+)", text, re.M)
    return {"ms": sum(r[1] for r in timed) / len(timed), "step_ms": [r[1] for r in rows], "shapes": shapes,
            "timed_shapes": shapes[args.warmup:],
            "mem_mib": float(mem.group(1)) if mem and args.device != "cpu" else rss,
            "precision": prec.group(1) if prec else "fp32"}


def run_torch(args, name, side, shapes, workdir):
    out = os.path.join(workdir, f"{side}-{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--worker-workload", name, "--worker-side", side,
           "--worker-shapes", json.dumps(shapes), "--worker-out", out, "--device", args.device,
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    log = os.path.join(workdir, f"{side}-{name}.log")
    print(f"[{name}] {side}: {len(shapes)} steps", flush=True)
    rc, rss, _ = run_child(cmd, thread_env(args.threads), log)
    if rc != 0:
        print(f"[{name}] {side} failed (exit {rc}); last lines of {log}:\n{tail(log, 8)}", flush=True)
        return None
    with open(out) as f:
        res = json.load(f)
    if args.device == "cpu":
        res["mem_mib"] = rss
    return res


def worker(args):
    """One PyTorch side of one workload, in its own process."""
    import torch
    import transformers
    family, cfg, _, _, ckpt = WORKLOADS[args.worker_workload]
    side = args.worker_side
    dev = torch.device(args.device if args.device != "cuda" else "cuda:0")
    if dev.type == "cpu":
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    kinds = {"gpt2": transformers.GPT2ForSequenceClassification, "gpt2lm": transformers.GPT2LMHeadModel,
             "bert": transformers.BertForSequenceClassification, "t5": transformers.T5ForConditionalGeneration}
    conf_kinds = {"gpt2": transformers.GPT2Config, "gpt2lm": transformers.GPT2Config,
                  "bert": transformers.BertConfig, "t5": transformers.T5Config}
    conf = conf_kinds[family](**{k: v for k, v in cfg.items() if k != "model_type"})
    try:
        model = kinds[family]._from_config(conf, attn_implementation="sdpa")
    except (ValueError, TypeError, ImportError):  # T5 has no sdpa path
        model = kinds[family]._from_config(conf)
    if ckpt:
        model.gradient_checkpointing_enable()
    model.to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
    step_model = torch.compile(model) if side.startswith("compile") else model
    use_bf16 = side.endswith("bf16")
    vocab = conf.vocab_size
    shapes = [tuple(s) for s in json.loads(args.worker_shapes)]
    gen = torch.Generator().manual_seed(args.seed)

    def batch(shape):
        if family == "t5":
            B, S, T = shape
            return {"input_ids": torch.randint(2, vocab, (B, S), generator=gen).to(dev),
                    "attention_mask": torch.ones(B, S, dtype=torch.long, device=dev),
                    "labels": torch.randint(2, vocab, (B, T), generator=gen).to(dev)}
        B, T = shape
        ids = torch.randint(1, vocab - 1, (B, T), generator=gen).to(dev)
        labels = ids if family == "gpt2lm" else torch.randint(0, 2, (B,), generator=gen).to(dev)
        return {"input_ids": ids, "attention_mask": torch.ones(B, T, dtype=torch.long, device=dev), "labels": labels}

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ms = []
    for shape in shapes:
        b = batch(shape)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=use_bf16):
            loss = step_model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        ms.append((time.perf_counter() - t0) * 1000.0)
        print(f"step {len(ms)} {shape} loss {loss.item():.4f} {ms[-1]:.1f} ms", flush=True)
    timed = ms[args.warmup:]
    res = {"ms": sum(timed) / len(timed), "step_ms": ms, "versions": {"torch": torch.__version__,
                                                      "transformers": transformers.__version__}}
    if dev.type == "cuda":
        res["mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
        res["device_name"] = torch.cuda.get_device_name(0)
    with open(args.worker_out, "w") as f:
        json.dump(res, f)


def seen_shape_ms(step_ms, shapes, warmup):
    """The mean ms of the timed steps whose batch shape an earlier step of the run had: what is
    left once first-shape costs (a new cuBLASLt or cuDNN plan, a buffer that grows, a compile)
    are paid. None with fewer than 2 such steps."""
    seen = [ms for i, ms in enumerate(step_ms) if i >= warmup and i < len(shapes) and shapes[i] in shapes[:i]]
    return sum(seen) / len(seen) if len(seen) >= 2 else None


def peak_tflops(args, device_name):
    if args.peak_tflops:
        return args.peak_tflops
    for key, tf in PEAK_BF16_TFLOPS:
        if device_name and key in device_name:
            return tf
    return None


def main():
    ap = argparse.ArgumentParser(description="tunezoo vs PyTorch/HF training throughput on one device")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"), help="where the tunezoo programs are")
    ap.add_argument("--device", default="cuda", help="cuda or cpu (the smoke test)")
    ap.add_argument("--workloads", default=DEFAULT_WORKLOADS, help="comma list of: " + ",".join(WORKLOADS))
    ap.add_argument("--sides", default=",".join(SIDES), help="comma list of: " + ",".join(SIDES))
    ap.add_argument("--steps", type=int, default=20, help="optimizer steps per side")
    ap.add_argument("--warmup", type=int, default=5, help="first steps not timed (torch.compile compiles in them)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads (--device cpu)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="the device's peak for MFU (default: the table)")
    ap.add_argument("--workdir", default="", help="keep configs, data and logs here (default: a temp dir)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-workload", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-side", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-shapes", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    names = [w for w in args.workloads.split(",") if w]
    sides = [s for s in args.sides.split(",") if s]
    for n in names:
        if n not in WORKLOADS:
            raise SystemExit(f"--workloads: unknown {n!r}; expected some of {','.join(WORKLOADS)}")
    for s in sides:
        if s not in SIDES:
            raise SystemExit(f"--sides: unknown {s!r}; expected some of {','.join(SIDES)}")
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps {args.steps}: expected more than --warmup {args.warmup}")
    if "tunezoo" not in sides:
        raise SystemExit("--sides: tunezoo's run gives the batch shapes the others replay; keep it")
    tmp = None if args.workdir else tempfile.TemporaryDirectory(prefix="tz-gpu-bench-")
    workdir = args.workdir or tmp.name
    os.makedirs(workdir, exist_ok=True)
    families = {WORKLOADS[n][0] for n in names}
    data = {"t5": t5_data(workdir, 64 + 8 * args.steps, args.seed) if "t5" in families else None,
            "lm": None}
    if "gpt2lm" in families:  # enough blocks for every step, and a held-out 5%
        biggest = max(WORKLOADS[n][2] * WORKLOADS[n][3] for n in names if WORKLOADS[n][0] == "gpt2lm")
        data["lm"] = lm_text(workdir, int(biggest * (args.steps + 2) * 1.1), args.seed)

    results, versions, device_name = [], {}, None
    for name in names:
        family, cfg = WORKLOADS[name][0], WORKLOADS[name][1]
        tz = run_tunezoo(args, name, "tunezoo", workdir, data)
        if not tz:
            raise SystemExit(f"[{name}] tunezoo's run gives the shapes the other sides replay; it failed")
        per_side = {"tunezoo": tz}
        for side in sides:
            if side == "tunezoo":
                continue
            if side in ("tunezoo-fp32", "tunezoo-fused"):
                per_side[side] = run_tunezoo(args, name, side, workdir, data)
                continue
            res = run_torch(args, name, side, tz["shapes"], workdir)
            if res:
                versions = res["versions"]
                device_name = res.get("device_name", device_name)
            per_side[side] = res
        flops = train_flops(family, cfg, tz["timed_shapes"]) / len(tz["timed_shapes"])
        tokens = sum((s[1] + s[2]) * s[0] if len(s) == 3 else s[0] * s[1] for s in tz["timed_shapes"]) / len(
            tz["timed_shapes"])
        results.append((name, per_side, flops, tokens))

    peak = peak_tflops(args, device_name) if args.device != "cpu" else None
    print()
    print(f"device {device_name or args.device}; PyTorch {versions.get('torch', '-')}, transformers "
          f"{versions.get('transformers', '-')}; {args.steps} steps per side, first {args.warmup} not timed"
          + (f"; MFU against {peak} TFLOP/s (bf16 dense)" if peak else ""))
    hdr = f"{'workload':12s} {'side':13s} {'ms/step':>9s} {'tokens/s':>10s} {'TFLOP/s':>8s} {'MFU':>6s} " \
          f"{'mem MiB':>8s} {'tunezoo speedup':>15s} {'ms seen':>8s} {'speedup':>7s}"
    print(hdr)
    print("-" * len(hdr))
    for name, per_side, flops, tokens in results:
        tz_ms = per_side["tunezoo"]["ms"]
        shapes = per_side["tunezoo"]["shapes"]
        tz_seen = seen_shape_ms(per_side["tunezoo"]["step_ms"], shapes, args.warmup)
        for side in sides:
            r = per_side.get(side)
            if not r:
                print(f"{name:12s} {side:13s} {'failed':>9s}")
                continue
            tflops = flops / (r["ms"] / 1e3) / 1e12
            mfu = f"{100 * tflops / peak:5.1f}%" if peak else "-"
            speedup = f"{r['ms'] / tz_ms:15.2f}" if side != "tunezoo" else f"{'':15s}"
            seen = seen_shape_ms(r.get("step_ms", []), shapes, args.warmup)
            seen_txt = f"{seen:8.1f}" if seen else f"{'-':>8s}"
            seen_speedup = f"{seen / tz_seen:7.2f}" if seen and tz_seen and side != "tunezoo" else f"{'':7s}"
            print(f"{name:12s} {side:13s} {r['ms']:9.1f} {tokens / (r['ms'] / 1e3):10.0f} {tflops:8.2f} {mfu:>6s} "
                  f"{r.get('mem_mib', 0):8.0f} {speedup} {seen_txt} {seen_speedup}")
    precs = sorted({per_side["tunezoo"]["precision"] for _, per_side, _, _ in results})
    print(f"tunezoo speedup = that side's ms / tunezoo's ms (> 1: tunezoo is faster); tunezoo trains in "
          f"{', '.join(precs)}")
    print("ms seen: the timed steps whose batch shape an earlier step had (first-shape costs paid), '-' where "
          "fewer than 2; its speedup likewise. Dynamic padding gives most steps a new shape in a short run: "
          "pass more --steps for a steady figure")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
