#!/usr/bin/env python3
"""Prints the layout table of docs/scaling.md from the formulas stated there (memory per
GPU, communication per step, compute per step, expected efficiency). Estimates, not
measurements: edit the assumptions below and rerun."""

PEAK_EFFECTIVE = 4e14  # H100 bf16 dense at 40% of 989 TFLOPs
NVLINK = 300e9         # bytes/s per GPU inside a node
IB = 45e9              # bytes/s per GPU between nodes (400 Gb/s)
PCIE = 25e9            # host <-> GPU, for offload
NODE = 8               # GPUs per node
HBM = 80e9             # bytes per GPU

# name: params, layers, width, heads, seq len, embedding params, largest layer block's params.
# A ZeRO-3 block is one layer, or the embeddings. GPT-2: wte + wpe = 82 M, a layer 12·C² = 31 M.
# GLM-10B: word + position embeddings about 0.21 B, a layer 12·C² = 0.20 B. T5-11B: the shared
# embedding 33 M; a decoder layer (self- and cross-attention, 4·C·16384 each, and the ReLU FFN,
# 2·C·65536, not gated) 268 M, an encoder layer 201 M; 24 + 24 layers make 11.3 B.
MODELS = {
    "GPT-2 1.5B": (1.56e9, 48, 1600, 25, 1024, 82e6, 31e6),
    "T5-11B": (11.3e9, 48, 1024, 128, 512, 33e6, 268e6),
    "GLM-10B": (9.9e9, 48, 4096, 64, 512, 210e6, 201e6),
}

# model, gpus, tp, pp, dp, zero stage, offload optimizer, offload params (ZeRO-3),
# micro-batch per GPU (B), micro-batches per step (accumulation; M with pp). tp must divide the
# heads: GPT-2 1.5B's 25 rule out tp 2, 4 and 8. Its pp rows use no ZeRO (gpt2-finetune's tied
# head on two stages takes ZeRO-1 and 2, not yet ZeRO-3).
LAYOUTS = [
    ("GPT-2 1.5B", 8, 1, 1, 8, 1, False, False, 8, 1),
    ("GPT-2 1.5B", 8, 1, 1, 8, 3, False, False, 8, 1),
    ("GPT-2 1.5B", 64, 1, 1, 64, 1, False, False, 8, 1),
    ("GPT-2 1.5B", 64, 1, 8, 8, 0, False, False, 1, 64),
    ("GPT-2 1.5B", 512, 1, 1, 512, 2, False, False, 1, 1),
    ("GPT-2 1.5B", 512, 1, 8, 64, 0, False, False, 1, 8),
    ("T5-11B", 8, 1, 1, 8, 0, False, False, 8, 1),
    ("T5-11B", 8, 1, 1, 8, 2, False, False, 8, 1),
    ("T5-11B", 8, 1, 1, 8, 3, False, False, 8, 1),
    ("T5-11B", 8, 1, 1, 8, 3, True, True, 8, 1),
    ("T5-11B", 64, 1, 1, 64, 2, False, False, 16, 1),
    ("T5-11B", 64, 1, 1, 64, 3, False, False, 16, 1),
    ("T5-11B", 512, 2, 1, 256, 2, False, False, 4, 1),
    ("T5-11B", 512, 8, 1, 64, 1, False, False, 16, 1),
    ("T5-11B", 512, 8, 4, 16, 1, False, False, 1, 64),
    ("GLM-10B", 8, 1, 1, 8, 0, False, False, 16, 2),
    ("GLM-10B", 8, 8, 1, 1, 0, False, False, 4, 8),
    ("GLM-10B", 8, 1, 1, 8, 2, True, False, 4, 8),
    ("GLM-10B", 8, 1, 1, 8, 2, False, False, 16, 2),
    ("GLM-10B", 8, 1, 1, 8, 3, False, False, 16, 2),
    ("GLM-10B", 8, 1, 1, 8, 3, True, True, 16, 2),
    ("GLM-10B", 64, 8, 1, 8, 1, False, False, 32, 1),
    ("GLM-10B", 64, 4, 1, 16, 1, False, False, 16, 1),
    ("GLM-10B", 64, 8, 2, 4, 1, False, False, 4, 16),
    ("GLM-10B", 512, 8, 1, 64, 2, False, False, 8, 1),
    ("GLM-10B", 512, 4, 8, 16, 1, False, False, 1, 32),
]


def row(name, gpus, tp, pp, dp, zero, offload, offload_params, B, acc):
    P, L, C, a, T, E, blk = MODELS[name]
    assert tp * pp * dp == gpus and a % tp == 0 and (pp == 1 or acc >= pp)
    assert zero == 3 or not offload_params  # as tunezoo refuses
    p = ((P - E) / pp + E) / tp  # parameters on this GPU's stage (the first holds the embeddings)
    window = 12 * max(E, blk) / tp  # ZeRO-3: 3 gathered blocks of bf16 weights and 3 of gradients
    host = 0.0
    if zero == 0:
        state = 16 * p
    elif zero == 1:
        state = 4 * p + 12 * p / dp
    elif zero == 2:
        state = 2 * p + 14 * p / dp
    else:
        state = 16 * p / dp + window
    if offload_params:  # GPU: gradient shard and window; host: fp32 master, m, v, gradient copy
        state, host = 2 * p / dp + window, 16 * p / dp
    elif offload:
        state, host = state - 12 * p / dp, 12 * p / dp
    # 16-bit layer inputs kept under full recomputation; the first stage holds min(P, M) sets
    act = 2 * T * B * C * (L / pp) * min(pp, acc) / tp
    dp_bw = NVLINK if tp * dp <= NODE else IB  # a dp group spans tp·dp consecutive ranks
    ring = (dp - 1) / dp
    if zero == 3:  # per micro-batch: all-gather forward and backward, reduce-scatter the gradients
        gather_wire = 2 * 2 * p * ring * acc
        dp_wire = 2 * p * ring * acc
    else:  # once per step: all-reduce, or reduce-scatter + all-gather
        gather_wire = 0.0
        dp_wire = 2 * p * 2 * ring
    tp_wire = 2 * B * T * C * (4 * L / pp + 1) * 2 * (tp - 1) / tp * acc
    # a middle stage sends B·T·C activations on and as many gradients back per micro-batch
    pp_wire = 2 * 2 * B * T * C * acc if pp > 1 else 0.0
    t_gather = gather_wire / dp_bw
    t_dp = dp_wire / dp_bw
    t_tp = tp_wire / NVLINK
    t_pp = pp_wire / (NVLINK if gpus <= NODE else IB)
    if offload_params:  # each gather copies this rank's piece up; the gradient shard goes down
        t_off = (2 * 2 * p / dp * acc + 2 * p / dp) / PCIE
    elif offload:  # gradient shard down, parameters up
        t_off = 2 * p / dp * 2 / PCIE
    else:
        t_off = 0.0
    compute = 8 * P * B * T * acc / (tp * pp) / PEAK_EFFECTIVE  # with recomputation
    # the gradient reduction overlaps the backward (2/3 of a micro-batch's compute): ZeRO-3's
    # reduce-scatters every micro-batch's, a once-per-step reduction only the last one's
    overlap = compute * 2 / 3 / (1 if zero == 3 else acc)
    exposed = t_gather + t_tp + t_pp + t_off + max(0.0, t_dp - overlap)
    step = compute * (acc + pp - 1) / acc + exposed  # the pipeline bubble
    eff = compute / step
    # ZeRO-3 gathers are exposed today; overlapped, the forward's hides behind the forward (1/3
    # of the compute) and the backward's shares the backward (2/3) with the reduce-scatters
    ov = max(0.0, t_gather / 2 - compute / 3) + max(0.0, t_gather / 2 + t_dp - compute * 2 / 3)
    eff_ov = compute / (compute + t_tp + t_pp + t_off + ov)
    dims = [f"{k} {n}" for k, n in (("tp", tp), ("pp", pp), ("dp", dp)) if n > 1]
    layout = " x ".join(dims)
    layout += f", ZeRO-{zero}" if zero else ""
    layout += " + offload-params" if offload_params else (" + offload" if offload else "")
    layout += f", B={B}, {'M' if pp > 1 else 'accum'} {acc} (global {B * dp * acc})"
    host_s = f" + {host / 1e9:.1f} GB host" if host else ""
    fits = state + act <= HBM
    comm = []
    if zero == 3 and dp > 1:
        comm.append(f"dp gathers {gather_wire / 1e9:.1f} GB ({t_gather * 1e3:.0f} ms) + "
                    f"reduce-scatters {dp_wire / 1e9:.1f} GB ({t_dp * 1e3:.0f} ms)")
    elif dp > 1:
        comm.append(f"dp {dp_wire / 1e9:.1f} GB ({t_dp * 1e3:.0f} ms)")
    if tp > 1:
        comm.append(f"tp {tp_wire / 1e9:.1f} GB ({t_tp * 1e3:.0f} ms)")
    if pp > 1:
        comm.append(f"pp {pp_wire / 1e9:.2f} GB ({t_pp * 1e3:.0f} ms), bubble "
                    f"{(pp - 1) / (acc + pp - 1) * 100:.0f}%")
    if t_off:
        comm.append(f"PCIe {t_off * 1e3:.0f} ms")
    eff_s = f"{eff * 100:.0f}%"
    if zero == 3 and dp > 1:
        eff_s += f" ({eff_ov * 100:.0f}% with overlapped gathers)"
    if not fits:
        eff_s = "does not fit"
    return (f"| {name} | {gpus} | {layout} | {state / 1e9:.1f} GB{host_s}{'' if fits else ' (over 80 GB)'} | "
            f"{act / 1e9:.2f} GB | {'; '.join(comm)} | {compute:.2f} s | {eff_s} |")


# LoRA on one GPU (issue 36): the linears of a layer as (in, out), each adapted with A (r, in) and
# B (out, r). GLM-10B: query_key_value, dense, dense_h_to_4h, dense_4h_to_h. T5-3B (d_model 1024,
# 32 heads of 128, d_ff 16384, 24 + 24 layers, 2.85 B): q, k, v, o in each attention (the
# decoder's cross-attention too) and wi, wo.
LORA_MODELS = {
    "GLM-10B": (9.9e9, 48, 4096, 512, [(4096, 12288), (4096, 4096), (4096, 16384), (16384, 4096)] * 48),
    "T5-3B": (2.85e9, 48, 1024, 512,
              ([(1024, 4096)] * 3 + [(4096, 1024)] + [(1024, 16384), (16384, 1024)]) * 24 +
              ([(1024, 4096)] * 3 + [(4096, 1024)]) * 2 * 24 + [(1024, 16384), (16384, 1024)] * 24),
}


def lora_row(name, r, B):
    """Full fine-tuning against LoRA r on one GPU with full recomputation: full keeps fp32 weights,
    gradients and AdamW's two moments (16 bytes a parameter); LoRA keeps the frozen base's fp32
    weights (4 bytes a parameter, no gradient, no moments) and the adapters' 16 bytes. Activations
    as above (16-bit layer inputs); compute 8 Psi tokens full, 6 with LoRA (no weight gradients)."""
    P, L, C, T, linears = LORA_MODELS[name]
    adapters = r * sum(i + o for i, o in linears)
    full, lora = 16 * P, 4 * P + 16 * adapters
    act = 2 * T * B * C * L
    tokens = B * T

    def fits(x):
        return "fits" if x + act <= HBM else "does not fit"
    return (f"| {name} | r {r}, every linear: {adapters / 1e6:.0f} M trained ({100 * adapters / P:.2f}%) | "
            f"{full / 1e9:.1f} GB ({fits(full)}) | {lora / 1e9:.1f} GB ({fits(lora)}) | {act / 1e9:.2f} GB (B={B}, T={T}) | "
            f"{8 * P * tokens / PEAK_EFFECTIVE:.2f} s | {6 * P * tokens / PEAK_EFFECTIVE:.2f} s |")


if __name__ == "__main__":
    print("| model | GPUs | layout | model state / GPU | activations / GPU | comm / step / GPU (wire) | compute / step | expected efficiency |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for layout in LAYOUTS:
        print(row(*layout))
    print()
    print("| model | LoRA | full: model state | LoRA: model state | activations | compute / step, full | with LoRA |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name in LORA_MODELS:
        print(lora_row(name, 8, 8))
