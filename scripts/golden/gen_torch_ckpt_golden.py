#!/usr/bin/python3
"""Writes tests/golden/torch-ckpt/: small PyTorch checkpoints for the safe .bin reader
(checkpoints/ckpt_zip.c, ckpt_pickle.c, ckpt_source.c) and the safetensors twins the test
compares them with. The GPT-2 folders are made from tests/data/tiny-gpt2 (the shared data's
tiny-gpt2, whole). Run with /usr/bin/python3 (torch + transformers + safetensors):

    /usr/bin/python3 scripts/golden/gen_torch_ckpt_golden.py

The hostile pickle is assembled byte by byte and never loaded."""
import json
import os
import struct
import sys
import zipfile
import io

import torch
import safetensors
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(ROOT, "tests", "golden", "torch-ckpt")
GPT2 = os.path.join(ROOT, "tests", "data", "tiny-gpt2")


def small_dict():
    g = torch.Generator().manual_seed(1234)
    d = {}
    d["w_f32"] = torch.randn(3, 5, generator=g)
    d["w_f16"] = torch.randn(4, 2, generator=g).half()
    d["w_bf16"] = torch.randn(2, 3, 2, generator=g).bfloat16()
    d["scalar"] = torch.tensor(2.5)          # 0-d
    d["empty"] = torch.zeros(0, 4)           # no elements
    d["vec"] = torch.arange(7, dtype=torch.float32) * 0.25
    base = torch.randn(6, 4, generator=g)
    d["view_rows"] = base[2:5]               # a view: storage offset 8, shared storage
    d["base"] = base
    return d


def write_hostile(path):
    """A torch-zip file whose data.pkl REDUCEs posix.system('echo pwned'). Never loaded."""
    pkl = bytearray()
    pkl += b"\x80\x02"                          # PROTO 2
    pkl += b"cposix\nsystem\n"                  # GLOBAL posix.system
    s = b"echo pwned"
    pkl += b"X" + struct.pack("<I", len(s)) + s  # BINUNICODE
    pkl += b"\x85"                              # TUPLE1
    pkl += b"R"                                 # REDUCE
    pkl += b"."                                 # STOP
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(pkl))
        z.writestr("archive/version", "3\n")


def write_hostile_stack_global(path):
    """The same through STACK_GLOBAL with module 'os' (protocol 4)."""
    pkl = bytearray(b"\x80\x04")
    for s in (b"os", b"system"):
        pkl += b"\x8c" + bytes([len(s)]) + s     # SHORT_BINUNICODE
    pkl += b"\x93"                               # STACK_GLOBAL
    s = b"echo pwned"
    pkl += b"\x8c" + bytes([len(s)]) + s + b"\x85R."
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", bytes(pkl))
        z.writestr("archive/version", "3\n")


def write_deflated(src, path):
    """torch.save writes stored entries; rewrite one file with every entry deflated so the
    zlib path is exercised."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))


def write_zip64(src, path):
    """small.pt rewritten with every size and offset in ZIP64 records (0xFFFFFFFF in the
    classic fields), as torch writes them for files over 4 GB, so the ZIP64 path is tested
    on a small file. Checked below by Python's zipfile and by torch.load."""
    import zlib
    with zipfile.ZipFile(src) as zin:
        items = [(i.filename, zin.read(i.filename)) for i in zin.infolist()]
    out, cdir = bytearray(), bytearray()
    for name, data in items:
        nb, crc, off = name.encode(), zlib.crc32(data), len(out)
        extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(nb), len(extra))
        out += nb + extra + data
        cextra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        cdir += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                            len(nb), len(cextra), 0, 0, 0, 0, 0xFFFFFFFF)
        cdir += nb + cextra
    cd_off = len(out)
    out += cdir
    z64 = len(out)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(items), len(items), len(cdir), cd_off)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(path, "wb") as f:
        f.write(out)
    with zipfile.ZipFile(path) as z:
        assert [i.filename for i in z.infolist()] == [n for n, _ in items]
        assert z.testzip() is None


def write_replaced(src, path, name_suffix, data):
    """src with the entry ending in name_suffix replaced by data (everything else as is)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, data if info.filename.endswith(name_suffix) else zin.read(info.filename))


def main():
    os.makedirs(OUT, exist_ok=True)
    d = small_dict()
    torch.save(d, os.path.join(OUT, "small.pt"))
    torch.save(d, os.path.join(OUT, "small_legacy.pt"), _use_new_zipfile_serialization=False)
    # safetensors cannot hold shared storage: clone every tensor
    save_file({k: v.contiguous().clone() for k, v in d.items()}, os.path.join(OUT, "small.safetensors"))
    write_deflated(os.path.join(OUT, "small.pt"), os.path.join(OUT, "small_deflated.pt"))
    write_zip64(os.path.join(OUT, "small.pt"), os.path.join(OUT, "small_zip64.pt"))
    for variant in ("small_deflated.pt", "small_zip64.pt"):
        back = torch.load(os.path.join(OUT, variant), weights_only=True)
        assert all(torch.equal(back[k], d[k]) for k in d), variant

    # what we refuse or only half-read: a transposed view, big-endian, other dtypes
    torch.save({"t": torch.arange(6, dtype=torch.float32).reshape(2, 3).t()}, os.path.join(OUT, "noncontig.pt"))
    write_replaced(os.path.join(OUT, "small.pt"), os.path.join(OUT, "bigendian.pt"), "/byteorder", b"big")
    torch.save({"f64": torch.tensor([1.5, -2.0], dtype=torch.float64), "i64": torch.arange(3)},
               os.path.join(OUT, "other_dtypes.pt"))
    torch.save({"c": torch.zeros(2, dtype=torch.complex64)}, os.path.join(OUT, "complex.pt"))

    g = torch.Generator().manual_seed(99)
    sd = {"layer.weight": torch.randn(3, 4, generator=g), "layer.bias": torch.randn(3, generator=g).half()}
    from collections import OrderedDict
    torch.save({"module": OrderedDict(sd)}, os.path.join(OUT, "flagai.pt"))
    torch.save({"model": {"language_model": {"encoder": OrderedDict(sd)}}, "checkpoint_version": 3.0,
                "iteration": 7}, os.path.join(OUT, "megatron.pt"))
    save_file({k: v.clone() for k, v in sd.items()}, os.path.join(OUT, "nested.safetensors"))

    write_hostile(os.path.join(OUT, "hostile_posix_system.pt"))
    write_hostile_stack_global(os.path.join(OUT, "hostile_os_system.pt"))

    # tiny-gpt2 as HF writes it: pytorch_model.bin (torch.save of the state dict, tied
    # lm_head sharing wte's storage), two .bin shards + index, and sharded safetensors.
    from transformers import GPT2LMHeadModel
    m = GPT2LMHeadModel.from_pretrained(GPT2)
    sd = m.state_dict()
    gdir = os.path.join(OUT, "gpt2-bin")
    os.makedirs(gdir, exist_ok=True)
    torch.save(sd, os.path.join(gdir, "pytorch_model.bin"))
    sdir = os.path.join(OUT, "gpt2-bin-sharded")
    os.makedirs(sdir, exist_ok=True)
    names = list(sd.keys())
    half = len(names) // 2
    weight_map, total = {}, 0
    for i, part in enumerate((names[:half], names[half:])):
        fn = "pytorch_model-%05d-of-00002.bin" % (i + 1)
        torch.save({k: sd[k] for k in part}, os.path.join(sdir, fn))
        for k in part:
            weight_map[k] = fn
            total += sd[k].numel() * sd[k].element_size()
    with open(os.path.join(sdir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
    tdir = os.path.join(OUT, "gpt2-st-sharded")
    m.save_pretrained(tdir, max_shard_size="250KB")
    for fn in os.listdir(tdir):
        if not (fn.endswith(".safetensors") or fn.endswith(".index.json") or fn == "config.json"):
            os.remove(os.path.join(tdir, fn))
    for dd in (gdir, sdir):
        with open(os.path.join(GPT2, "config.json")) as fi, open(os.path.join(dd, "config.json"), "w") as fo:
            fo.write(fi.read())

    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("# torch-ckpt goldens\n\nWritten by scripts/golden/gen_torch_ckpt_golden.py with python %s, "
                "torch %s, transformers %s, safetensors %s.\n\n"
                "- small.pt: torch.save (zip) of F32/F16/BF16 tensors, a 0-d and an empty one, and a view "
                "sharing its base's storage at offset 8; small.safetensors holds the same values.\n"
                "- small_deflated.pt: small.pt with every zip entry deflated; small_zip64.pt: small.pt with "
                "ZIP64 records for every size and offset (both load in torch.load).\n"
                "- noncontig.pt (a transposed view), bigendian.pt (small.pt with byteorder 'big'), "
                "other_dtypes.pt (float64 [1.5, -2] and int64 arange(3)), complex.pt (complex64).\n"
                "- small_legacy.pt: the same dict with _use_new_zipfile_serialization=False (refused).\n"
                "- flagai.pt ({'module': sd}), megatron.pt ({'model': {'language_model': {'encoder': sd}}, "
                "'checkpoint_version': 3.0, 'iteration': 7}); nested.safetensors holds sd.\n"
                "- hostile_posix_system.pt / hostile_os_system.pt: hand-assembled pickles that REDUCE "
                "posix.system / os.system (never loaded).\n"
                "- gpt2-bin/, gpt2-bin-sharded/, gpt2-st-sharded/: ../shared/data/tiny-gpt2 as "
                "pytorch_model.bin, 2 .bin shards + index, and save_pretrained(max_shard_size='250KB').\n"
                % (sys.version.split()[0], torch.__version__, __import__("transformers").__version__,
                   safetensors.__version__))


if __name__ == "__main__":
    main()
