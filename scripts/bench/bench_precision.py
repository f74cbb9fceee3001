#!/usr/bin/env python3
"""Precision benchmark: tunezoo fp32 and bf16 against PyTorch fp32 and PyTorch bf16 autocast, one CPU, one run.

The PyTorch bf16 side runs under torch.autocast("cpu", dtype=torch.bfloat16); every side gets the same thread
count. Workloads: GPT-2 124M classification at MRPC shapes, all-MiniLM-L6-v2 fine-tuned on MRPC (speed and
dev accuracy/F1), T5-small training at Multi30k shapes.

    /usr/bin/python3 scripts/bench/bench_precision.py                   # all three workloads, 2 threads
    /usr/bin/python3 scripts/bench/bench_precision.py --smoke           # tiny sizes: does it all run?

It runs the one-workload scripts beside it as children, once per precision, and reads their --json-out:
  gpt2    bench_gpt2_train.py --configs 124m --bin-args "--precision P" (bf16: --torch-autocast-bf16)
  minilm  bench_minilm_glue.py --precision P (bf16: HF Trainer bf16=True, which is the same CPU autocast)
  t5      bench_t5.py --configs t5-small --precision P --skip-gen
and prints one table per workload: the four sides, then tunezoo bf16 against PyTorch autocast and against
PyTorch fp32 (the other side's time / tunezoo bf16's, > 1: tunezoo bf16 is faster) and, for MiniLM, how far
bf16 moves dev accuracy and F1 on each side. See scripts/bench/README.md."""
import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import run_child, tail, thread_env  # noqa: E402
from bench_gpt2_train import CONFIGS as GPT2_CONFIGS, WARMUP as GPT2_WARMUP  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOADS = ("gpt2", "minilm", "t5")
PRECISIONS = ("fp32", "bf16")
GPT2_GOALS = (3.0, 4.0)  # issue 32: tunezoo bf16 at least this many times as fast as PyTorch autocast, PyTorch fp32
STRETCH = 1.5  # issue 32: tunezoo bf16 within this many times the step's matmul-bound time
QUALITY_POINTS = 0.5  # MiniLM: tunezoo bf16's dev accuracy and F1 within this many points of tunezoo fp32's


def command(wl, prec, args, json_out, workdir):
    """The child that runs one workload at one precision: tunezoo and PyTorch, one after the other."""
    if wl == "gpt2":
        cmd = [os.path.join(HERE, "bench_gpt2_train.py"), "--bin", os.path.join(args.bin_dir, "gpt2-classify"),
               "--configs", args.gpt2_config, "--steps", str(args.steps), f"--bin-args=--precision {prec}"]
        cmd += ["--torch-autocast-bf16"] if prec == "bf16" else []
    elif wl == "minilm":
        cmd = [os.path.join(HERE, "bench_minilm_glue.py"), "--bin", os.path.join(args.bin_dir, "bert-classify"),
               "--task", "mrpc", "--epochs", str(args.minilm_epochs), "--train-rows", str(args.minilm_train_rows),
               "--precision", prec]
    else:
        cmd = [os.path.join(HERE, "bench_t5.py"), "--bin", os.path.join(args.bin_dir, "t5-finetune"),
               "--configs", args.t5_config, "--rows", str(args.t5_rows), "--precision", prec, "--skip-gen"]
    return [sys.executable] + cmd + ["--threads", str(args.threads), "--workdir", workdir, "--json-out", json_out]


def run(wl, prec, args, workdir):
    """One child run; its --json-out, or None when it failed (its log's last lines are printed)."""
    sub = os.path.join(workdir, f"{wl}-{prec}")
    shutil.rmtree(sub, ignore_errors=True)  # the programs append to a metrics.jsonl they find
    os.makedirs(sub)
    out, log = sub + ".json", sub + ".log"
    if os.path.exists(out):
        os.remove(out)
    cmd = command(wl, prec, args, out, sub)
    print(f"[{wl} {prec}] {' '.join(shlex.quote(c) for c in cmd)}\n[{wl} {prec}] log: {log}", flush=True)
    rc, _, wall = run_child(cmd, thread_env(args.threads), log)
    if rc != 0 or not os.path.exists(out):
        print(f"[{wl} {prec}] FAILED (exit {rc}) after {wall:.0f} s; last lines of {log}:\n{tail(log)}", flush=True)
        return None
    print(f"[{wl} {prec}] done in {wall:.0f} s", flush=True)
    with open(out) as f:
        return json.load(f)


def cell(x, width, spec):
    return format("-" if x is None else format(x, spec), f">{width}")


def table(title, cols, rows):
    """cols: (header, format spec); rows: (label, values), None printing as '-'."""
    print(f"\n{title}")
    widths = [max(len(h), 8) for h, _ in cols]
    hdr = f"{'':26}" + "".join(f" {h:>{w}}" for (h, _), w in zip(cols, widths))
    print(hdr)
    print("-" * len(hdr))
    for label, vals in rows:
        print(f"{label:26}" + "".join(" " + cell(v, w, spec) for v, (_, spec), w in zip(vals, cols, widths)))


def ratio_line(label, other, tz_bf16, goal=None):
    if other is None or tz_bf16 is None:
        print(f"{label:44} -")
        return
    r = other / tz_bf16
    verdict = f"   (goal >= {goal}: {'met' if r >= goal else 'NOT met'})" if goal else ""
    print(f"{label:44} x{r:.2f}{verdict}")


def get(res, *keys):
    for k in keys:
        if res is None:
            return None
        res = res.get(k)
    return res


def gpt2_gemms(cfg, B, T):
    """The GEMMs of one GPT-2 classification training step at batch B x T: (count, "MxNxK:tAtB") as
    tz-bench-gemm names them. Per layer the four linears (weights [out, in]) forward X W^T, backward
    dX = dY W and dW = dY^T X; per layer, sequence and head attention's six products of head size
    D. The classification head (C x 2) is left out: under 0.1% of the work."""
    C, L, H = cfg["n_embd"], cfg["n_layer"], cfg["n_head"]
    N, D = B * T, cfg["n_embd"] // cfg["n_head"]
    out = []
    for o, i in ((3 * C, C), (C, C), (4 * C, C), (C, 4 * C)):
        out += [(L, f"{N}x{o}x{i}:01"), (L, f"{N}x{i}x{o}:00"), (L, f"{o}x{i}x{N}:10")]
    heads = L * B * H
    # S = Q K^T, O = P V; dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
    out += [(heads, f"{T}x{T}x{D}:01"), (heads, f"{T}x{D}x{T}:00"), (heads, f"{T}x{T}x{D}:01"),
            (heads, f"{T}x{D}x{T}:10"), (heads, f"{T}x{D}x{T}:00"), (heads, f"{T}x{D}x{T}:10")]
    return out


def gemm_ms(bench, shapes, threads):
    """tz-bench-gemm's median ms of each shape: {shape: {"bf16": ms, "fp32": ms}}, fp32 being the
    faster of OpenBLAS and oneDNN (the backend picks so, scripts/bench/bench_gemm.py)."""
    res = subprocess.run([bench, "--threads", str(threads), "--reps", "5"] + sorted(shapes), env=thread_env(threads),
                         capture_output=True, text=True, check=True)
    ms = {}
    for line in res.stdout.splitlines():
        r = json.loads(line)
        if "ms" not in r:
            continue
        kind = "bf16" if r["engine"] == "onednn_bf16" else "fp32"
        cur = ms.setdefault(r["shape"], {})
        cur[kind] = min(cur.get(kind, float("inf")), r["ms"])
    return ms


def gpt2_matmul_floor(args, shapes):
    """The mean over the timed steps of each step's matmul-bound time, {"bf16": ms, "fp32": ms}:
    its GEMMs (gpt2_gemms, at the step's own B x T) each at tz-bench-gemm's rate on this machine.
    None without tz-bench-gemm (a build without oneDNN) or with a failed run."""
    bench = os.path.join(args.bin_dir, "tz-bench-gemm")
    timed = [tuple(s) for s in shapes[GPT2_WARMUP:]]
    if not os.path.exists(bench) or not timed:
        return None
    cfg = GPT2_CONFIGS[args.gpt2_config]
    per_step = {bt: gpt2_gemms(cfg, *bt) for bt in set(timed)}
    try:
        ms = gemm_ms(bench, {s for g in per_step.values() for _, s in g}, args.threads)
        return {k: sum(sum(n * ms[s][k] for n, s in per_step[bt]) for bt in timed) / len(timed)
                for k in ("bf16", "fp32")}
    except (OSError, ValueError, KeyError, subprocess.CalledProcessError) as e:
        print(f"matmul-bound step: tz-bench-gemm failed ({e})")
        return None


def report_gpt2(res, args):
    tz = {p: get(res[p], "configs", args.gpt2_config, "tunezoo") for p in PRECISIONS}
    pt = {p: get(res[p], "configs", args.gpt2_config, "pytorch") for p in PRECISIONS}
    shapes = [s for p in PRECISIONS for s in [get(tz[p], "shapes")] if s]
    ts = sorted({t for _, t in shapes[0]}) if shapes else []
    table(f"GPT-2 {args.gpt2_config} sequence classification, MRPC batches"
          + (f" B={shapes[0][0][0]} T={ts[0]}..{ts[-1]}" if shapes else "")
          + f" ({args.steps} steps, the first 2 not timed)",
          [("ms/step", ".1f"), ("peak RSS MiB", ".0f")],
          [("tunezoo fp32", [get(tz["fp32"], "ms"), get(tz["fp32"], "rss_mb")]),
           ("tunezoo bf16", [get(tz["bf16"], "ms"), get(tz["bf16"], "rss_mb")]),
           ("PyTorch fp32", [get(pt["fp32"], "ms"), get(pt["fp32"], "rss_mb")]),
           ("PyTorch bf16 autocast", [get(pt["bf16"], "ms"), get(pt["bf16"], "rss_mb")])])
    b = get(tz["bf16"], "ms")
    ratio_line("tunezoo bf16 vs PyTorch bf16 autocast", get(pt["bf16"], "ms"), b, GPT2_GOALS[0])
    ratio_line("tunezoo bf16 vs PyTorch fp32", get(pt["fp32"], "ms"), b, GPT2_GOALS[1])
    ratio_line("tunezoo bf16 vs tunezoo fp32", get(tz["fp32"], "ms"), b)
    if len(shapes) == 2 and shapes[0] != shapes[1]:
        print("note: the fp32 and bf16 runs saw different batch shapes")
    floor = gpt2_matmul_floor(args, get(tz["bf16"], "shapes") or []) if b else None
    if floor:
        report_floor(floor, b, get(tz["fp32"], "ms"), get(pt["bf16"], "ms"), get(pt["fp32"], "ms"))


def report_floor(floor, tz_bf16, tz_fp32, pt_bf16, pt_fp32):
    """The step's matmul-bound times, tunezoo against them, and whether the goals can be met here at
    all: a goal time below the bf16 floor is out of reach on this CPU whatever the rest costs."""
    print(f"matmul-bound step (its GEMMs at tz-bench-gemm's rates here): bf16 {floor['bf16']:.1f} ms, "
          f"fp32 {floor['fp32']:.1f} ms")
    r = tz_bf16 / floor["bf16"]
    print(f"{'tunezoo bf16 / bf16 matmul-bound':44} x{r:.2f}   (stretch goal <= {STRETCH}: "
          f"{'met' if r <= STRETCH else 'NOT met'}; {tz_bf16 - floor['bf16']:.1f} ms over it)")
    if tz_fp32:
        print(f"{'tunezoo fp32 / fp32 matmul-bound':44} x{tz_fp32 / floor['fp32']:.2f}")
    for label, other, goal in (("PyTorch bf16 autocast", pt_bf16, GPT2_GOALS[0]), ("PyTorch fp32", pt_fp32,
                                                                                  GPT2_GOALS[1])):
        if other is None:
            continue
        need = other / goal
        where = "reachable" if need >= floor["bf16"] else "below the bf16 matmul-bound time: out of reach on this CPU"
        print(f"{goal:.0f}x {label} needs <= {need:.1f} ms/step: {where}")


def report_minilm(res, args):
    s = {p: get(res[p], "sides") for p in PRECISIONS}

    def row(label, side, p):
        r = get(s[p], side)
        pct = [None if get(r, k) is None else 100 * r[k] for k in ("accuracy", "f1")]
        return (label, [get(r, "s_per_epoch")] + pct + [get(r, "rss_mb")])
    subset = f", the first {args.minilm_train_rows} training rows" if args.minilm_train_rows else ""
    epochs = f"{args.minilm_epochs} epoch{'' if args.minilm_epochs == 1 else 's'}"
    table(f"all-MiniLM-L6-v2 fine-tuned on MRPC, {epochs}{subset}; the whole dev set",
          [("s/epoch", ".1f"), ("dev acc %", ".2f"), ("dev F1 %", ".2f"), ("peak RSS MiB", ".0f")],
          [row("tunezoo fp32", "tunezoo", "fp32"), row("tunezoo bf16", "tunezoo", "bf16"),
           row("HF Trainer fp32", "hf", "fp32"), row("HF Trainer bf16 (autocast)", "hf", "bf16")])
    b = get(s["bf16"], "tunezoo", "s_per_epoch")
    ratio_line("tunezoo bf16 vs HF Trainer bf16 autocast", get(s["bf16"], "hf", "s_per_epoch"), b)
    ratio_line("tunezoo bf16 vs HF Trainer fp32", get(s["fp32"], "hf", "s_per_epoch"), b)
    for label, side, goal in (("tunezoo", "tunezoo", True), ("HF Trainer", "hf", False)):
        lo, hi = get(s["fp32"], side), get(s["bf16"], side)
        if lo is None or hi is None:
            print(f"{label} bf16 - fp32: -")
            continue
        d = [100 * (hi[k] - lo[k]) for k in ("accuracy", "f1")]
        verdict = ""
        if goal:
            ok = all(abs(x) <= QUALITY_POINTS for x in d)
            verdict = f"   (goal within {QUALITY_POINTS} points: {'met' if ok else 'NOT met'})"
        print(f"{label} bf16 - fp32: dev acc {d[0]:+.2f}, F1 {d[1]:+.2f} points{verdict}")


def report_t5(res, args):
    c = {p: get(res[p], "configs", args.t5_config) for p in PRECISIONS}
    rows = get(res["fp32"], "rows") or get(res["bf16"], "rows") or args.t5_rows
    split = get(res["fp32"], "split") or get(res["bf16"], "split") or "?"
    batch = get(res["fp32"], "batch_size") or get(res["bf16"], "batch_size") or "?"
    table(f"T5 {args.t5_config} training, Multi30k en->de ({rows} {split} pairs, batch {batch}), one epoch, "
          "the first 2 steps not timed",
          [("ms/step", ".1f"), ("steps", "d")],
          [("tunezoo fp32", [get(c["fp32"], "tunezoo_ms_per_step"), get(c["fp32"], "tunezoo_steps")]),
           ("tunezoo bf16", [get(c["bf16"], "tunezoo_ms_per_step"), get(c["bf16"], "tunezoo_steps")]),
           ("PyTorch fp32", [get(c["fp32"], "hf_ms_per_step"), get(c["fp32"], "hf_steps")]),
           ("PyTorch bf16 autocast", [get(c["bf16"], "hf_ms_per_step"), get(c["bf16"], "hf_steps")])])
    b = get(c["bf16"], "tunezoo_ms_per_step")
    ratio_line("tunezoo bf16 vs PyTorch bf16 autocast", get(c["bf16"], "hf_ms_per_step"), b)
    ratio_line("tunezoo bf16 vs PyTorch fp32", get(c["fp32"], "hf_ms_per_step"), b)
    ratio_line("tunezoo bf16 vs tunezoo fp32", get(c["fp32"], "tunezoo_ms_per_step"), b)


def machine_line(threads, load):
    cpu, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        m = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
        cpu = m.group(1).strip() if m else cpu
        m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
        flags = set(m.group(1).split()) if m else flags
    except OSError:
        pass
    bf16 = "avx512_bf16" if "avx512_bf16" in flags else "no avx512_bf16"
    import torch
    import transformers
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    dnnl = "on" if torch.backends.mkldnn.is_available() else "off"
    return (f"{cpu} ({bf16}), {threads} threads on every side; PyTorch {torch.__version__} "
            f"(BLAS {blas.group(1) if blas else '?'}, oneDNN {dnnl}), transformers {transformers.__version__}; "
            f"load average {load:.2f} before the runs (other work skews every number)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: " + ",".join(WORKLOADS))
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for every side")
    ap.add_argument("--steps", type=int, help="gpt2: training steps per side, the first 2 not timed (default 10)")
    ap.add_argument("--gpt2-config", help="gpt2: a bench_gpt2_train.py config (default 124m)")
    ap.add_argument("--minilm-epochs", type=int, help="minilm: epochs (default 3)")
    ap.add_argument("--minilm-train-rows", type=int, help="minilm: the first N training rows only (default 0: all)")
    ap.add_argument("--t5-rows", type=int, help="t5: Multi30k pairs, one epoch of them (default 256)")
    ap.add_argument("--t5-config", help="t5: a bench_t5.py config (default t5-small)")
    ap.add_argument("--bin-dir", default="build/bin", help="gpt2-classify, bert-classify and t5-finetune")
    ap.add_argument("--smoke", action="store_true",
                    help="not a benchmark: GPT-2 tiny 4 steps, MiniLM 64 rows 1 epoch, T5 tiny 64 rows")
    ap.add_argument("--workdir", default="", help="keep every run's log, JSON and files here (default: a temp dir)")
    args = ap.parse_args()
    full, smoke = (10, "124m", 3, 0, 256, "t5-small"), (4, "tiny", 1, 64, 64, "tiny")
    for key, value in zip(("steps", "gpt2_config", "minilm_epochs", "minilm_train_rows", "t5_rows", "t5_config"),
                          smoke if args.smoke else full):
        if getattr(args, key) is None:
            setattr(args, key, value)
    wls = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in wls:
        if w not in WORKLOADS:
            raise SystemExit(f"--workloads: unknown workload {w!r}; expected some of {','.join(WORKLOADS)}")
    args.bin_dir = os.path.abspath(args.bin_dir)
    for w, prog in (("gpt2", "gpt2-classify"), ("minilm", "bert-classify"), ("t5", "t5-finetune")):
        if w in wls and not os.path.exists(os.path.join(args.bin_dir, prog)):
            raise SystemExit(f"--bin-dir: {os.path.join(args.bin_dir, prog)} not found")

    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="tz-bench-precision-"))
    os.makedirs(workdir, exist_ok=True)

    load = os.getloadavg()[0]
    results = {w: {p: run(w, p, args, workdir) for p in PRECISIONS} for w in wls}

    print("\n" + machine_line(args.threads, load))
    if args.smoke:
        print("SMOKE MODE: tiny sizes to check that everything runs; these numbers are not a benchmark and the "
              "goals are meant for the full run")
    reports = {"gpt2": report_gpt2, "minilm": report_minilm, "t5": report_t5}
    for w in wls:
        reports[w](results[w], args)
    print("\nx = the other side's ms/step (s/epoch) / tunezoo bf16's: > 1 means tunezoo bf16 is faster")
    failed = [f"{w} {p}" for w in wls for p in PRECISIONS if results[w][p] is None]
    if args.workdir or failed:
        print(f"logs and JSON kept in {workdir}")
    else:
        shutil.rmtree(workdir)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)} (their rows show '-')")


if __name__ == "__main__":
    main()
