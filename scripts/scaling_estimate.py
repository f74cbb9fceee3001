#!/usr/bin/env python3
"""Prints the layout table of docs/scaling.md from the formulas stated there (memory per
GPU, communication per step, compute per step, expected efficiency). Estimates, not
measurements: edit the assumptions below and rerun."""

PEAK_EFFECTIVE = 4e14  # H100 bf16 dense at 40% of 989 TFLOPs
NVLINK = 300e9         # bytes/s per GPU inside a node
IB = 45e9              # bytes/s per GPU between nodes (400 Gb/s)
PCIE = 25e9            # host <-> GPU, for optimizer offload

# name, params, layers, width, heads, seq len
MODELS = {
    "GPT-2 1.5B": (1.56e9, 48, 1600, 25, 1024),
    "T5-3B": (2.85e9, 48, 1024, 32, 512),
    "GLM-10B": (9.9e9, 48, 4096, 64, 512),
}
# model, gpus, tp, dp, zero stage, offload, micro-batch per GPU, accumulation steps
LAYOUTS = [
    ("GPT-2 1.5B", 8, 1, 8, 1, False, 8, 1),
    ("GPT-2 1.5B", 64, 1, 64, 1, False, 4, 2),
    ("GPT-2 1.5B", 512, 1, 512, 2, False, 1, 1),
    ("T5-3B", 8, 1, 8, 2, False, 8, 1),
    ("T5-3B", 64, 2, 32, 1, False, 8, 4),
    ("T5-3B", 512, 2, 256, 2, False, 2, 2),
    ("GLM-10B", 8, 8, 1, 0, False, 4, 8),
    ("GLM-10B", 8, 1, 8, 2, True, 4, 8),
    ("GLM-10B", 64, 8, 8, 1, False, 4, 8),
    ("GLM-10B", 512, 8, 64, 2, False, 1, 8),
]


def row(name, gpus, tp, dp, zero, offload, B, acc):
    P, L, C, a, T = MODELS[name]
    p = P / tp
    if zero == 0:
        state = 16 * p
    elif zero == 1:
        state = 4 * p + 12 * p / dp
    else:
        state = 2 * p + 14 * p / dp
    host = 12 * p / dp if offload else 0
    if offload:
        state -= host
    act = 2 * T * B * C * L / tp  # 16-bit layer inputs kept under full recomputation
    dp_wire = 2 * p * 2 * (dp - 1) / dp
    tp_wire = 2 * B * T * C * (4 * L + 1) * 2 * (tp - 1) / tp * acc
    t_dp = dp_wire / (NVLINK if gpus <= 8 else IB)
    t_tp = tp_wire / NVLINK
    t_off = (2 * p / dp * 2) / PCIE if offload else 0  # gradient shard down, parameters up
    compute = 8 * P * B * T * acc / tp / PEAK_EFFECTIVE  # with recomputation
    exposed = t_tp + t_off + max(0.0, t_dp - compute * 2 / 3)  # dp overlaps the backward (2/3)
    eff = compute / (compute + exposed)
    layout = f"tp {tp} x dp {dp}" if tp > 1 and dp > 1 else (f"tp {tp}" if tp > 1 else f"dp {dp}")
    layout += f", ZeRO-{zero}" if zero else ""
    layout += " + offload" if offload else ""
    layout += f", B={B}, accum {acc} (global {B * dp * acc})"
    host_s = f" + {host / 1e9:.1f} GB host" if offload else ""
    comm = []
    if dp > 1:
        comm.append(f"dp {dp_wire / 1e9:.1f} GB ({t_dp * 1e3:.0f} ms)")
    if tp > 1:
        comm.append(f"tp {tp_wire / 1e9:.1f} GB ({t_tp * 1e3:.0f} ms)")
    if offload:
        comm.append(f"PCIe {t_off * 1e3:.0f} ms")
    return (f"| {name} | {gpus} | {layout} | {state / 1e9:.1f} GB{host_s} | {act / 1e9:.2f} GB | "
            f"{'; '.join(comm)} | {compute:.2f} s | {eff * 100:.0f}% |")


if __name__ == "__main__":
    print("| model | GPUs | layout | model state / GPU | activations / GPU | comm / step / GPU (wire) | compute / step | expected efficiency |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for layout in LAYOUTS:
        print(row(*layout))
