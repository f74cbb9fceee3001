#!/usr/bin/env python3
"""Draws a training run's curves from its metrics.jsonl into a PNG: training loss per logged
step, validation loss at each evaluation, and (when present) BLEU and ROUGE-L on a second axis.

    python3 scripts/plot_metrics.py runs/t5-finetune/metrics.jsonl docs/t5_multi30k.png --title "..."

Needs matplotlib (pip install matplotlib); only for documentation, never for building or testing."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    train, evals = [], []
    with open(args.metrics, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            (train if row.get("type") == "train" else evals if row.get("type") == "eval" else []).append(row)
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    ax.plot([r["step"] for r in train], [r["loss"] for r in train], lw=0.8, alpha=0.6, label="training loss")
    ax.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="validation loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy per target token")
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    scored = [k for k in ("bleu", "rougeL") if evals and k in evals[0]]
    if scored:
        ax2 = ax.twinx()
        for k, style in zip(scored, ("s-", "^--")):
            ax2.plot([r["step"] for r in evals], [r[k] for r in evals], style, color="C%d" % (2 + scored.index(k)),
                     label=k)
        ax2.set_ylabel("BLEU / ROUGE-L (0-100)")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, loc="center right")
    if args.title:
        ax.set_title(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png)
    print(f"wrote {args.png}: {len(train)} training points, {len(evals)} evaluations")


if __name__ == "__main__":
    main()
