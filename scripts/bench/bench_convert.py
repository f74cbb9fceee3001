#!/usr/bin/env python3
"""HF checkpoint import speed: `tz-convert import` (HF folder -> sharded tunezoo checkpoint)
against HF transformers reading and writing the same checkpoint (from_pretrained, then
save_pretrained), on a synthetic GPT-2 folder of about --size-gb GB in about 200 tensors.

    /usr/bin/python3 scripts/bench/bench_convert.py --bin build/bin/tz-convert --size-gb 2

The checkpoint is GPT-2 with 16 layers (196 tensors: 12 per block, wte, wpe, ln_f) and n_embd
chosen so that the fp32 safetensors file is about --size-gb GB; it is written once (random
init, save_pretrained) into --cache and reused while its config matches. Each measured job runs
in its own child process, so its peak RSS (GNU time's %M, else os.wait4) is its own; it includes the interpreter
and torch for HF. The jobs:
- tunezoo: `tz-convert import SRC OUT --tp N [--dtype D]` for each --tp (default 1,2);
- HF: GPT2LMHeadModel.from_pretrained(SRC), then save_pretrained(OUT) and an fsync of each file it
  wrote (tz-convert's output is durable when it exits, so HF's is made so too), under this Python.
GB/s is the bytes of the source tensors (the safetensors payload, 1 GB = 1e9 bytes) over the
child's wall time, start-up included. Before each timed run the page cache either is dropped
(--drop-caches: cold, needs root) or holds the source after one untimed read (warm, default).
Outputs are deleted after each run. Needs torch + transformers; never needed to build or test
tunezoo."""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

N_LAYER = 16
VOCAB = 50257
N_POSITIONS = 1024

HF_CHILD = r"""
import sys, time
t0 = time.perf_counter()
import torch
from transformers import GPT2LMHeadModel
torch.set_num_threads(int(sys.argv[3]))
t1 = time.perf_counter()
model = GPT2LMHeadModel.from_pretrained(sys.argv[1])
t2 = time.perf_counter()
model.save_pretrained(sys.argv[2])
t3 = time.perf_counter()
import os
for name in os.listdir(sys.argv[2]):  # durable, as tz-convert's atomic write is: fsync what was written
    fd = os.open(os.path.join(sys.argv[2], name), os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
t4 = time.perf_counter()
print(f"HF import {t1 - t0:.2f} s, from_pretrained {t2 - t1:.2f} s, save_pretrained {t3 - t2:.2f} s, fsync {t4 - t3:.2f} s")
"""


def param_bytes(d):
    """fp32 bytes of a 16-layer GPT-2 with n_embd d (tied head, so lm_head is not stored)."""
    per_layer = 12 * d * d + 13 * d  # c_attn 3d^2+3d, c_proj d^2+d, c_fc 4d^2+4d, mlp c_proj 4d^2+d, 2 LN 4d
    return 4 * (VOCAB * d + N_POSITIONS * d + N_LAYER * per_layer + 2 * d)


def pick_n_embd(size_gb):
    """The multiple of 128 (so n_head = n_embd/64 is even, for --tp 2) closest to size_gb."""
    return min(range(128, 16384 + 1, 128), key=lambda d: abs(param_bytes(d) - size_gb * 1e9))


MAKE_CHILD = r"""
import json, sys, torch, transformers
from transformers import GPT2Config, GPT2LMHeadModel
spec, out = json.loads(sys.argv[1]), sys.argv[2]
torch.manual_seed(spec["seed"])
cfg = GPT2Config(**{k: v for k, v in spec.items() if k != "seed"})
GPT2LMHeadModel(cfg).save_pretrained(out, safe_serialization=True)
print(f"PyTorch {torch.__version__}, transformers {transformers.__version__}")
"""


def make_checkpoint(cache, size_gb, seed):
    """The cached folder for this size, written first (in a child) when missing. torch is never
    imported here: a child's ru_maxrss starts at its parent's RSS when it is forked."""
    d = pick_n_embd(size_gb)
    spec = {"n_layer": N_LAYER, "n_embd": d, "n_head": d // 64, "vocab_size": VOCAB, "n_positions": N_POSITIONS,
            "seed": seed}
    out = os.path.join(cache, f"gpt2-synth-{N_LAYER}x{d}")
    stamp = os.path.join(out, "bench_spec.json")
    if os.path.exists(stamp) and json.load(open(stamp)) == spec and os.path.exists(os.path.join(out, "config.json")):
        return out, False
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([sys.executable, "-c", MAKE_CHILD, json.dumps(spec), out], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    json.dump(spec, open(stamp, "w"))
    return out, True


def versions():
    code = "import torch, transformers; print(f'PyTorch {torch.__version__}, transformers {transformers.__version__}')"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def source_tensors(src):
    """(count, payload bytes) over the folder's safetensors files, from their headers."""
    import struct
    count = nbytes = 0
    for name in sorted(os.listdir(src)):
        if not name.endswith(".safetensors"):
            continue
        with open(os.path.join(src, name), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for key, t in header.items():
            if key != "__metadata__":
                count += 1
                nbytes += t["data_offsets"][1] - t["data_offsets"][0]
    return count, nbytes


def can_drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def prepare_cache(src, drop):
    """Cold: sync and drop the page cache. Warm: read every source file once, untimed."""
    if drop:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return
    for name in os.listdir(src):
        with open(os.path.join(src, name), "rb") as f:
            while f.read(1 << 24):
                pass


def run_child(cmd, env, log_path):
    """(exit code, wall s, peak RSS MiB, output) of one child. A child's ru_maxrss starts at the RSS
    of the process that forked it, so when GNU time is there it forks the child from its own
    small process and reports that child's peak; else os.wait4 (floor: this script's ~30 MiB)."""
    rss_path = log_path + ".rss"
    timed = ["/usr/bin/time", "-f", "%M", "-o", rss_path] + cmd if os.access("/usr/bin/time", os.X_OK) else cmd
    with open(log_path, "w+") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(timed, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        log.seek(0)
        rss = ru.ru_maxrss / 1024.0
        if timed is not cmd:
            rss = float(open(rss_path).read().split()[-1]) / 1024.0  # KiB; after "Command exited ..." on failure
        return os.waitstatus_to_exitcode(status), wall, rss, log.read()


def du_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def measure(label, cmd, src, out, args, env, workdir):
    """The median wall, its GB/s and peak RSS over --repeat runs, plus the last run's output."""
    runs = []
    for r in range(args.repeat):
        shutil.rmtree(out, ignore_errors=True)
        prepare_cache(src, args.drop_caches)
        log = os.path.join(workdir, f"{re.sub(r'[^a-z0-9]+', '_', label.lower())}_{r}.log")
        rc, wall, rss, text = run_child(cmd, env, log)
        if rc != 0:
            sys.exit(f"bench_convert: {label} failed (exit {rc}): {' '.join(cmd)}\n{text[-3000:]}")
        written = du_bytes(out)
        shutil.rmtree(out, ignore_errors=True)  # disk is limited: never keep two outputs
        runs.append((wall, rss, written, text))
        print(f"  {label} run {r + 1}/{args.repeat}: {wall:.2f} s, peak RSS {rss:.0f} MiB, wrote "
              f"{written / 1e9:.2f} GB", flush=True)
    wall = statistics.median(w for w, _, _, _ in runs)
    rss = max(m for _, m, _, _ in runs)
    return {"label": label, "wall": wall, "rss": rss, "written": runs[-1][2], "text": runs[-1][3]}


def tz_reported_gbps(text):
    """The GB/s tz-convert prints on its final line, if any."""
    found = re.findall(r"([0-9]+(?:\.[0-9]+)?)\s*GB/s", text)
    return float(found[-1]) if found else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build/bin/tz-convert")
    ap.add_argument("--size-gb", type=float, default=2.0, help="fp32 size of the synthetic checkpoint (GB)")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "tz_bench_convert"),
                    help="where the synthetic checkpoint is kept between runs")
    ap.add_argument("--tp", default="1,2", help="tz-convert --tp values, comma-separated")
    ap.add_argument("--dtype", choices=["bf16", "fp32"], default=None, help="tz-convert --dtype (default: its own)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads and OMP_NUM_THREADS for both sides")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per job (the median wall is reported)")
    ap.add_argument("--drop-caches", action="store_true", help="cold runs: drop the page cache first (needs root)")
    ap.add_argument("--skip-tz", action="store_true", help="measure the HF side only")
    ap.add_argument("--skip-hf", action="store_true", help="measure tz-convert only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out-dir", default=None,
                    help="where the outputs are written (default: under --cache; /dev/shm takes the disk out)")
    args = ap.parse_args()
    if args.drop_caches and not can_drop_caches():
        sys.exit("bench_convert: --drop-caches needs write access to /proc/sys/vm/drop_caches (root)")
    if not args.skip_tz and not (os.path.isfile(args.bin) and os.access(args.bin, os.X_OK)):
        sys.exit(f"bench_convert: no tz-convert at {args.bin} (build it: cmake --build build --target tz-convert; "
                 f"or pass --bin PATH, or --skip-tz to measure the HF side alone)")
    tps = [int(t) for t in args.tp.split(",") if t]

    os.makedirs(args.cache, exist_ok=True)
    t0 = time.perf_counter()
    src, made = make_checkpoint(args.cache, args.size_gb, args.seed)
    ntensors, nbytes = source_tensors(src)
    cfg = json.load(open(os.path.join(src, "config.json")))
    mode = "cold (page cache dropped before each run)" if args.drop_caches else \
        "warm (source read once, untimed, before each run)"
    print(f"{versions()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, {args.threads} threads, {args.repeat} run(s) per job, {mode}")
    print(f"source: {src} ({'written' if made else 'cached'}{f' in {time.perf_counter() - t0:.0f} s' if made else ''}): "
          f"GPT-2 {cfg['n_layer']} layers x n_embd {cfg['n_embd']}, {ntensors} tensors, {nbytes / 1e9:.3f} GB fp32")

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads))
    workdir = tempfile.mkdtemp(prefix="bench_convert_", dir=args.out_dir or args.cache)
    out = os.path.join(workdir, "out")
    results = []
    try:
        if not args.skip_tz:
            for tp in tps:
                cmd = [args.bin, "import", src, out, "--tp", str(tp)] + (["--dtype", args.dtype] if args.dtype else [])
                results.append(measure(f"tz-convert --tp {tp}", cmd, src, out, args, env, workdir))
        if not args.skip_hf:
            cmd = [sys.executable, "-c", HF_CHILD, src, out, str(args.threads)]
            results.append(measure("HF from_pretrained + save_pretrained", cmd, src, out, args, env, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    for r in results:  # the time spent on the checkpoint itself, without interpreter and import start-up
        if r["label"].startswith("HF"):
            m = re.search(r"from_pretrained ([0-9.]+) s, save_pretrained ([0-9.]+) s, fsync ([0-9.]+) s", r["text"])
            r["work"] = float(m.group(1)) + float(m.group(2)) + float(m.group(3)) if m else None
        else:
            rep = tz_reported_gbps(r["text"])
            r["work"] = nbytes / 1e9 / rep if rep else None
    hf = next((r for r in results if r["label"].startswith("HF")), None)
    print()
    print("| job | wall s | GB/s (wall) | work s | GB/s (work) | peak RSS MiB | written GB | wall: HF / job | "
          "RSS: job / HF |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        work = f"{r['work']:.2f} | {nbytes / 1e9 / r['work']:.3f}" if r["work"] else "- | -"
        vs_wall = f"x{hf['wall'] / r['wall']:.2f}" if hf and r is not hf else "-"
        vs_rss = f"x{r['rss'] / hf['rss']:.2f}" if hf and r is not hf else "-"
        print(f"| {r['label']} | {r['wall']:.2f} | {nbytes / 1e9 / r['wall']:.3f} | {work} | {r['rss']:.0f} | "
              f"{r['written'] / 1e9:.2f} | {vs_wall} | {vs_rss} |")
    print()
    for r in results:
        if r is hf:
            lines = r["text"].strip().splitlines()
            print(f"HF child: {lines[-1] if lines else '(no output)'}")
        elif r["work"] is None:
            print(f"{r['label']}: printed no GB/s line, so no work time")
    print("wall: the child process from start to exit (HF's includes ~5 s of importing torch and transformers); "
          "work: HF's from_pretrained + save_pretrained + fsync of the files it wrote, tz-convert's own GB/s line "
          "(its atomic writes fsync). GB/s = source tensor bytes (1e9) / seconds. RSS is the child's own peak.")

if __name__ == "__main__":
    sys.exit(main())
