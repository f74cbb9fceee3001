#!/usr/bin/env python3
"""The kernels that took the most GPU time, from ncu's per-kernel summary:

    ncu --metrics gpu__time_duration.sum --print-summary per-kernel --csv PROGRAM ... > run.csv
    python3 scripts/bench/ncu_top.py run.csv [N]

Sums each kernel name's invocations x average duration (names cut to 90 characters, so one
template's instances with long argument lists fold together) and prints the top N (default 15)
with their share of the total. Used by scripts/bench/gpu_profile.sh."""
import csv
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    with open(sys.argv[1], errors="replace") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r and "Average" in r), None)
    if head is None:
        print("no per-kernel summary in %s (did ncu run?)" % sys.argv[1])
        return
    cols = rows[head]
    name_at, calls_at, avg_at = cols.index("Kernel Name"), cols.index("Invocations"), cols.index("Average")
    unit_at = cols.index("Metric Unit") if "Metric Unit" in cols else None
    ns_per = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
    total_by_name = {}
    for r in rows[head + 1:]:
        if len(r) <= max(name_at, calls_at, avg_at):
            continue
        try:
            scale = ns_per[r[unit_at]] if unit_at is not None else 1
            calls, avg = int(r[calls_at]), float(r[avg_at].replace(",", "")) * scale
        except (ValueError, KeyError):
            continue
        name = r[name_at][:90]
        t, c = total_by_name.get(name, (0.0, 0))
        total_by_name[name] = (t + calls * avg, c + calls)
    total = sum(t for t, _ in total_by_name.values())
    if total <= 0:
        print("no kernel times in %s" % sys.argv[1])
        return
    calls = sum(c for _, c in total_by_name.values())
    print("%d kernels, %.1f ms of GPU time in all" % (calls, total / 1e6))
    for name, (t, c) in sorted(total_by_name.items(), key=lambda kv: -kv[1][0])[:top]:
        print("%5.1f%% %7d calls  %s" % (100 * t / total, c, name))


if __name__ == "__main__":
    main()
