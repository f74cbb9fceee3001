#!/usr/bin/env python3
"""Golden orders for --group-by-length (data_sampler_group_by_length) from HF itself:
transformers' get_length_grouped_indices (the function behind LengthGroupedSampler), with its
torch.randperm replaced by a fixed permutation, so both sides group the same shuffled order.

    /usr/bin/python3 scripts/golden/gen_length_grouped_golden.py > tests/golden/length-grouped/cases.txt

Each case is four lines: "n group_by", the n lengths, the shuffled order handed in, and HF's
grouped order. Lengths have many ties (HF's sort keeps them in shuffled order)."""
import random
import sys

import torch
import transformers
from transformers import trainer_pt_utils


def case(rng, n, group_by, max_len):
    lengths = [rng.randint(3, max_len) for _ in range(n)]
    perm = list(range(n))
    rng.shuffle(perm)
    real = torch.randperm
    torch.randperm = lambda *a, **k: torch.tensor(perm)  # the order both sides start from
    try:
        got = trainer_pt_utils.get_length_grouped_indices(lengths, group_by)
    finally:
        torch.randperm = real
    return [f"{n} {group_by}", " ".join(map(str, lengths)), " ".join(map(str, perm)), " ".join(map(str, got))]


def main():
    rng = random.Random(2026)
    print(f"# transformers {transformers.__version__}, torch {torch.__version__}: get_length_grouped_indices")
    for n, g, m in [(1000, 8, 128), (103, 8, 40), (20, 8, 12), (2000, 16, 64), (1, 4, 9)]:
        for line in case(rng, n, g, m):
            print(line)


if __name__ == "__main__":
    sys.exit(main())
