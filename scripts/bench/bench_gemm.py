#!/usr/bin/env python3
"""CPU GEMM engines side by side: tunezoo's (OpenBLAS sgemm, oneDNN fp32, oneDNN bf16, from
build/bin/tz-bench-gemm) and PyTorch's torch.matmul in fp32 and in bf16, on the same shapes
and thread count, in one run.

    /usr/bin/python3 scripts/bench/bench_gemm.py --threads 2

The shapes default to GPT-2 124M's linears at 512 tokens, forward and backward (see
scripts/bench/bench_gemm.c); MxNxK:tAtB names others. Each side times the median of --reps
calls after two warm-up calls; the table gives GFLOP/s (2 M N K / t) and the ratios this
project cares about: oneDNN fp32 / OpenBLAS (can one engine serve fp32?) and tunezoo bf16 /
PyTorch bf16.
"""
import argparse
import json
import os
import statistics
import subprocess
import time

from benchlib import thread_env

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def torch_gflops(shape, threads, reps, dtype_name):
    """torch.matmul on one shape: GFLOP/s of the median call."""
    import torch
    torch.set_num_threads(threads)
    dims, trans = shape.split(":") if ":" in shape else (shape, "00")
    M, N, K = (int(x) for x in dims.split("x"))
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    g = torch.Generator().manual_seed(7)
    a = torch.rand((K, M) if trans[0] == "1" else (M, K), generator=g).to(dtype)
    b = torch.rand((N, K) if trans[1] == "1" else (K, N), generator=g).to(dtype)
    a = a.t() if trans[0] == "1" else a
    b = b.t() if trans[1] == "1" else b
    times = []
    with torch.no_grad():
        for r in range(reps + 2):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            if r >= 2:
                times.append(time.perf_counter() - t0)
    return 2.0 * M * N * K / statistics.median(times) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "tz-bench-gemm"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("shapes", nargs="*", help="MxNxK[:tAtB], e.g. 512x768x768:01")
    args = ap.parse_args()
    cmd = [args.bin, "--threads", str(args.threads), "--reps", str(args.reps)] + args.shapes
    out = subprocess.run(cmd, env=thread_env(args.threads), capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{args.bin} exited {out.returncode}: {out.stderr.strip()}")
    rows, kernel = {}, ""
    for line in out.stdout.splitlines():
        rec = json.loads(line)
        rows.setdefault(rec["shape"], {})[rec["engine"]] = rec.get("gflops")
        kernel = rec.get("kernel", kernel)
    torch_version = "not run"
    if not args.skip_torch:
        import torch
        torch_version = torch.__version__
        for shape in rows:
            rows[shape]["torch_f32"] = torch_gflops(shape, args.threads, args.reps, "f32")
            rows[shape]["torch_bf16"] = torch_gflops(shape, args.threads, args.reps, "bf16")
    print(f"GFLOP/s, {args.threads} threads, median of {args.reps}; oneDNN bf16 kernel: {kernel or 'none'}; "
          f"PyTorch {torch_version}")
    cols = ["openblas_f32", "onednn_f32", "onednn_bf16", "torch_f32", "torch_bf16"]
    print(f"{'shape (MxNxK:tAtB)':20s}" + "".join(f"{c:>14s}" for c in cols) + f"{'dnnl/blas f32':>15s}"
          + f"{'tz/torch bf16':>15s}")
    for shape, r in rows.items():
        cells = "".join(f"{r[c]:14.1f}" if r.get(c) else f"{'-':>14s}" for c in cols)
        f32 = r["onednn_f32"] / r["openblas_f32"] if r.get("onednn_f32") and r.get("openblas_f32") else None
        bf16 = r["onednn_bf16"] / r["torch_bf16"] if r.get("onednn_bf16") and r.get("torch_bf16") else None
        print(f"{shape:20s}{cells}" + (f"{f32:15.2f}" if f32 else f"{'-':>15s}") +
              (f"{bf16:15.2f}" if bf16 else f"{'-':>15s}"))


if __name__ == "__main__":
    main()
