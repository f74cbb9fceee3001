#!/usr/bin/python3
"""Writes tests/golden/convert/: the inputs of tz-convert's tests (HF .bin / sharded .bin /
sharded safetensors, Megatron-LM legacy GPT checkpoints at tp=1 and tp=2, FlagAI GLM at mp=1
and mp=2) and the README that says what each file is. Run with /usr/bin/python3 (torch,
transformers, safetensors) and FlagAI 1.8's wheel unpacked (not installed):

    pip download flagai==1.8.0 --no-deps -d /tmp/flagai
    mkdir -p /tmp/flagai-dl/x && cd /tmp/flagai-dl/x && unzip -q /tmp/flagai/flagai-1.8.0-py3-none-any.whl
    /usr/bin/python3 scripts/golden/gen_convert_golden.py /tmp/flagai-dl/x

Every tensor written from a tests/golden/<model>/model.safetensors is bit-identical to it
(checked below after writing). The FlagAI GLM comes from FlagAI's own GLMModel class and its
mp=2 files from FlagAI's own flagai/mp_tools.py (both executed from the unpacked wheel, with
the parent packages as empty stand-ins so nothing else of FlagAI is imported: flagai_wheel.py).

What is written is cut to about 3 MB (see the README for what was left out and why); --full
also writes every (model x HF format) pair, megatron-gpt2-tp2-noargs/, megatron-gpt2-tp1/ and
glm-flagai/expected.safetensors (about 6 MB; not for committing)."""
import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import OrderedDict

import torch
import safetensors
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flagai_wheel import GLM_CONFIG, load_flagai  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GOLDEN = os.path.join(ROOT, "tests", "golden")
OUT = os.path.join(GOLDEN, "convert")

# Which HF containers are written for which tiny model, and in how many shards. The containers
# do not depend on the architecture and ../torch-ckpt/gpt2-{bin,bin-sharded,st-sharded} already
# hold each (a real save_pretrained of tiny-gpt2), so the two smallest models carry the two
# sharded containers (a sharded .bin reader reads single .bin files too). --full writes the
# whole matrix.
HF_FORMATS = {
    "bert-tiny-cls": [("bin", 1)],
    "roberta-tiny-cls": [("st-sharded", 2)],
    "t5-tiny-v1_0": [("bin-sharded", 2)],
    "t5-tiny-v1_1": [("st-sharded", 3)],
    "gpt2-tiny-cls": [],
}
ALL_FORMATS = [("bin", 1), ("bin-sharded", 2), ("st-sharded", 2)]

MEGATRON_ITER = 7
MAKE_VOCAB_DIVISIBLE_BY = 128   # Megatron's default --make-vocab-size-divisible-by


def nbytes(t):
    return t.numel() * t.element_size()


def split_even(names, sd, n):
    """names (in order) cut into n contiguous runs of about equal bytes."""
    total = sum(nbytes(sd[k]) for k in names)
    parts, cur, acc = [], [], 0
    for k in names:
        cur.append(k)
        acc += nbytes(sd[k])
        if len(parts) < n - 1 and acc >= total * (len(parts) + 1) / n:
            parts.append(cur)
            cur = []
    parts.append(cur)
    assert len(parts) == n and all(parts), (n, [len(p) for p in parts])
    return parts


def write_index(path, sd, weight_map):
    """HF's index layout: {"metadata": {...}, "weight_map": {name: file}}, sorted keys like
    transformers' save_pretrained."""
    meta = {"total_parameters": sum(v.numel() for v in sd.values()),
            "total_size": sum(nbytes(v) for v in sd.values())}
    with open(path, "w") as f:
        json.dump({"metadata": meta, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def write_hf(name, fmt, n_shards, sd, config_path):
    d = os.path.join(OUT, "%s-%s" % (name, fmt))
    os.makedirs(d, exist_ok=True)
    shutil.copyfile(config_path, os.path.join(d, "config.json"))
    names = list(sd.keys())
    if fmt == "bin":
        torch.save(sd, os.path.join(d, "pytorch_model.bin"))
        return d
    weight_map = {}
    for i, part in enumerate(split_even(names, sd, n_shards)):
        if fmt == "bin-sharded":
            fn = "pytorch_model-%05d-of-%05d.bin" % (i + 1, n_shards)
            torch.save({k: sd[k] for k in part}, os.path.join(d, fn))
        else:
            fn = "model-%05d-of-%05d.safetensors" % (i + 1, n_shards)
            save_file({k: sd[k] for k in part}, os.path.join(d, fn), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fn
    idx = "pytorch_model.bin.index.json" if fmt == "bin-sharded" else "model.safetensors.index.json"
    write_index(os.path.join(d, idx), sd, weight_map)
    return d


def read_hf_back(d):
    """Everything in an HF folder as one dict (torch's own readers), for the bit check."""
    out = {}
    for fn in sorted(os.listdir(d)):
        p = os.path.join(d, fn)
        if fn.endswith(".bin"):
            out.update(torch.load(p, weights_only=True))
        elif fn.endswith(".safetensors"):
            out.update(load_file(p))
    return out


def same_bits(a, b):
    flat = lambda t: t.contiguous().reshape(-1).view(torch.uint8)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(flat(a), flat(b))


def hf_fixtures(full):
    written = []
    for name, formats in HF_FORMATS.items():
        src = os.path.join(GOLDEN, name)
        sd = load_file(os.path.join(src, "model.safetensors"))
        for fmt, n in (ALL_FORMATS if full else formats):
            d = write_hf(name, fmt, n, sd, os.path.join(src, "config.json"))
            back = read_hf_back(d)
            assert set(back) == set(sd), d
            assert all(same_bits(back[k], sd[k]) for k in sd), d
            written.append((os.path.basename(d), n))
    return written


# ---------------------------------------------------------------- Megatron-LM legacy GPT

def round_up(x, m):
    return (x + m - 1) // m * m


def megatron_full(hf, cfg):
    """The unsplit Megatron GPT state (checkpoint_version >= 2 layout) from HF GPT-2 tensors:
    Conv1D [in, out] -> Linear [out, in]; query_key_value rows regrouped from HF's
    [3][heads][head_dim] to Megatron's [heads][3][head_dim]."""
    nh, h, L = cfg["n_head"], cfg["n_embd"], cfg["n_layer"]
    hd = h // nh

    def qkv(t):  # t: [3h, ...] rows q|k|v, each head-major
        return t.reshape((3, nh, hd) + t.shape[1:]).transpose(0, 1).reshape(t.shape).contiguous()

    enc = {}
    for i in range(L):
        p, q = "transformer.h.%d." % i, "layers.%d." % i
        enc[q + "input_layernorm.weight"] = hf[p + "ln_1.weight"]
        enc[q + "input_layernorm.bias"] = hf[p + "ln_1.bias"]
        enc[q + "self_attention.query_key_value.weight"] = qkv(hf[p + "attn.c_attn.weight"].t())
        enc[q + "self_attention.query_key_value.bias"] = qkv(hf[p + "attn.c_attn.bias"])
        enc[q + "self_attention.dense.weight"] = hf[p + "attn.c_proj.weight"].t().contiguous()
        enc[q + "self_attention.dense.bias"] = hf[p + "attn.c_proj.bias"]
        enc[q + "post_attention_layernorm.weight"] = hf[p + "ln_2.weight"]
        enc[q + "post_attention_layernorm.bias"] = hf[p + "ln_2.bias"]
        enc[q + "mlp.dense_h_to_4h.weight"] = hf[p + "mlp.c_fc.weight"].t().contiguous()
        enc[q + "mlp.dense_h_to_4h.bias"] = hf[p + "mlp.c_fc.bias"]
        enc[q + "mlp.dense_4h_to_h.weight"] = hf[p + "mlp.c_proj.weight"].t().contiguous()
        enc[q + "mlp.dense_4h_to_h.bias"] = hf[p + "mlp.c_proj.bias"]
    enc["final_layernorm.weight"] = hf["transformer.ln_f.weight"]
    enc["final_layernorm.bias"] = hf["transformer.ln_f.bias"]
    return enc


def megatron_rank(hf, cfg, enc, tp, rank):
    """One tensor-parallel rank as Megatron's layers hold it: column-parallel (query_key_value
    by heads, dense_h_to_4h) split dim 0 with their biases, row-parallel (self_attention.dense,
    dense_4h_to_h) split dim 1 with full biases, the vocab-parallel embedding split by rows
    after zero padding, everything else whole."""
    vocab = cfg["vocab_size"]
    padded = round_up(vocab, MAKE_VOCAB_DIVISIBLE_BY * tp)
    wte = torch.zeros(padded, cfg["n_embd"], dtype=hf["transformer.wte.weight"].dtype)
    wte[:vocab] = hf["transformer.wte.weight"]

    def rows(t):
        n = t.shape[0] // tp
        return t[rank * n:(rank + 1) * n].clone()

    def cols(t):
        n = t.shape[1] // tp
        return t[:, rank * n:(rank + 1) * n].clone()

    out = with_metadata(OrderedDict())
    for k, v in enc.items():
        if "query_key_value" in k or "dense_h_to_4h" in k:
            out[k] = rows(v)
        elif k.endswith("self_attention.dense.weight") or k.endswith("dense_4h_to_h.weight"):
            out[k] = cols(v)
        else:
            out[k] = v.clone()
    fill_metadata(out)
    lm = {"embedding": {"word_embeddings": with_metadata(OrderedDict(weight=rows(wte))),
                        "position_embeddings": with_metadata(OrderedDict(weight=hf["transformer.wpe.weight"].clone()))},
          "encoder": out}
    return {"language_model": lm}, padded


def with_metadata(od):
    """Megatron's sub-dicts are nn.Module.state_dict() results: OrderedDicts carrying a
    _metadata attribute (pickled as BUILD state after the items), like every real checkpoint."""
    od._metadata = OrderedDict([("", {"version": 1})])
    return od


def fill_metadata(od):
    prefixes = [""]
    for k in od:
        parts = k.split(".")[:-1]
        for i in range(1, len(parts) + 1):
            p = ".".join(parts[:i])
            if p not in prefixes:
                prefixes.append(p)
    od._metadata = OrderedDict((p, {"version": 1}) for p in prefixes)
    return od


def megatron_args(cfg, tp, padded):
    """The training arguments a legacy Megatron checkpoint carries (the fields readers use:
    tools/checkpoint_loader_megatron.py, transformers' convert_megatron_gpt2_checkpoint.py)."""
    return argparse.Namespace(
        num_layers=cfg["n_layer"], hidden_size=cfg["n_embd"], ffn_hidden_size=4 * cfg["n_embd"],
        num_attention_heads=cfg["n_head"], kv_channels=cfg["n_embd"] // cfg["n_head"],
        max_position_embeddings=cfg["n_positions"], seq_length=cfg["n_positions"],
        padded_vocab_size=padded, make_vocab_size_divisible_by=MAKE_VOCAB_DIVISIBLE_BY,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=1,
        virtual_pipeline_model_parallel_size=None, layernorm_epsilon=cfg["layer_norm_epsilon"],
        apply_residual_connection_post_layernorm=False, openai_gelu=False, bias_gelu_fusion=True,
        add_position_embedding=True, untie_embeddings_and_output_weights=False,
        tokenizer_type="GPT2BPETokenizer", fp16=False, bf16=False, params_dtype=torch.float32,
        iteration=MEGATRON_ITER, consumed_train_samples=0, consumed_valid_samples=0)


def megatron_fixtures(full):
    src = os.path.join(GOLDEN, "gpt2-tiny-cls")
    hf = load_file(os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    enc = megatron_full(hf, cfg)
    written = []
    # tp=2 with args, and tp=1 without: the two readers' cases (merge + args, no merge + no
    # args) in two copies instead of three. --full adds the other two combinations.
    variants = [("megatron-gpt2-tp2", 2, True), ("megatron-gpt2-tp1-noargs", 1, False)]
    if full:
        variants += [("megatron-gpt2-tp2-noargs", 2, False), ("megatron-gpt2-tp1", 1, True)]
    for dirname, tp, with_args in variants:
        d = os.path.join(OUT, dirname)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "latest_checkpointed_iteration.txt"), "w") as f:
            f.write(str(MEGATRON_ITER))
        ranks = []
        for r in range(tp):
            model, padded = megatron_rank(hf, cfg, enc, tp, r)
            ckpt = {}
            if with_args:
                ckpt["args"] = megatron_args(cfg, tp, padded)
            ckpt["checkpoint_version"] = 3.0
            ckpt["iteration"] = MEGATRON_ITER
            ckpt["model"] = model
            p = os.path.join(d, "iter_%07d" % MEGATRON_ITER, "mp_rank_%02d" % r, "model_optim_rng.pt")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            torch.save(ckpt, p)
            ranks.append(torch.load(p, weights_only=False))
        check_megatron_roundtrip(ranks, hf, cfg)
        written.append(dirname)
    return written, enc


def check_megatron_roundtrip(ranks, hf, cfg):
    """Merge the ranks back the way transformers' converter reads them and compare bits."""
    tp, nh, vocab = len(ranks), cfg["n_head"], cfg["vocab_size"]
    hd = cfg["n_embd"] // nh
    emb = [r["model"]["language_model"]["embedding"] for r in ranks]
    enc = [r["model"]["language_model"]["encoder"] for r in ranks]
    assert torch.equal(torch.cat([e["word_embeddings"]["weight"] for e in emb])[:vocab], hf["transformer.wte.weight"])
    assert not torch.cat([e["word_embeddings"]["weight"] for e in emb])[vocab:].any()
    assert torch.equal(emb[0]["position_embeddings"]["weight"], hf["transformer.wpe.weight"])

    def unqkv(t):
        return t.reshape((nh, 3, hd) + t.shape[1:]).transpose(0, 1).reshape(t.shape)

    for i in range(cfg["n_layer"]):
        p, q = "transformer.h.%d." % i, "layers.%d." % i
        w = torch.cat([e[q + "self_attention.query_key_value.weight"] for e in enc])
        assert torch.equal(unqkv(w).t(), hf[p + "attn.c_attn.weight"])
        b = torch.cat([e[q + "self_attention.query_key_value.bias"] for e in enc])
        assert torch.equal(unqkv(b), hf[p + "attn.c_attn.bias"])
        assert torch.equal(torch.cat([e[q + "self_attention.dense.weight"] for e in enc], 1).t(), hf[p + "attn.c_proj.weight"])
        assert torch.equal(torch.cat([e[q + "mlp.dense_h_to_4h.weight"] for e in enc]).t(), hf[p + "mlp.c_fc.weight"])
        assert torch.equal(torch.cat([e[q + "mlp.dense_h_to_4h.bias"] for e in enc]), hf[p + "mlp.c_fc.bias"])
        assert torch.equal(torch.cat([e[q + "mlp.dense_4h_to_h.weight"] for e in enc], 1).t(), hf[p + "mlp.c_proj.weight"])
        for e in enc:
            assert torch.equal(e[q + "self_attention.dense.bias"], hf[p + "attn.c_proj.bias"])
            assert torch.equal(e[q + "mlp.dense_4h_to_h.bias"], hf[p + "mlp.c_proj.bias"])
            assert torch.equal(e[q + "input_layernorm.weight"], hf[p + "ln_1.weight"])
            assert torch.equal(e[q + "post_attention_layernorm.bias"], hf[p + "ln_2.bias"])
    for e in enc:
        assert torch.equal(e["final_layernorm.weight"], hf["transformer.ln_f.weight"])
    # shapes a rank must have
    assert enc[0]["layers.0.self_attention.query_key_value.weight"].shape == (3 * cfg["n_embd"] // tp, cfg["n_embd"])


# ---------------------------------------------------------------- FlagAI GLM

def glm_fixtures(flagai_root, full):
    glm_model, base_model, mp_tools = load_flagai(flagai_root)
    torch.manual_seed(0)
    model = glm_model.GLMModel(base_model.change_json_to_cls(dict(GLM_CONFIG)))
    # FlagAI initialises biases to 0 and layernorms to 1: overwrite every parameter with
    # distinct seeded values so that a swapped or mis-split tensor shows.
    g = torch.Generator().manual_seed(2024)
    with torch.no_grad():
        for k, p in model.state_dict().items():
            r = torch.randn(p.shape, generator=g) * 0.05
            p.copy_(r + 1.0 if "layernorm.weight" in k else r)
    sd = {k: v.clone().contiguous() for k, v in model.state_dict().items()}

    d = os.path.join(OUT, "glm-flagai")
    os.makedirs(d, exist_ok=True)
    # model.state_dict() itself, as FlagAI's trainer saves it: an OrderedDict with _metadata
    torch.save({"module": model.state_dict()}, os.path.join(d, "pytorch_model.bin"))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(GLM_CONFIG, f, indent=4)
        f.write("\n")
    if full:  # the same bytes as pytorch_model.bin's 'module'
        save_file(sd, os.path.join(d, "expected.safetensors"), metadata={"format": "pt"})

    # FlagAI's own reader must take it whole: load_weights_glm uses strict=False, so also
    # check the keys match exactly.
    model2 = glm_model.GLMModel(base_model.change_json_to_cls(dict(GLM_CONFIG)))
    loaded = model2.load_weights_glm(os.path.join(d, "pytorch_model.bin"))
    assert set(loaded) == set(model2.state_dict())
    assert all(torch.equal(model2.state_dict()[k], sd[k]) for k in sd)

    # mp=2 with FlagAI's own splitter, run in a scratch copy (it writes next to its input).
    d2 = os.path.join(OUT, "glm-flagai-mp2")
    os.makedirs(d2, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copyfile(os.path.join(d, "pytorch_model.bin"), os.path.join(tmp, "pytorch_model.bin"))
        mp_tools.change_pytorch_model_mp_from_1_to_n_new("glm", tmp, 2)
        for r in range(2):
            fn = "pytorch_model_%02d.bin" % r
            shutil.copyfile(os.path.join(tmp, fn), os.path.join(d2, fn))
        # and FlagAI's own merge must give the original back
        os.remove(os.path.join(tmp, "pytorch_model.bin"))
        mp_tools.change_pytorch_model_mp_from_n_to_1("glm", tmp)
        merged = torch.load(os.path.join(tmp, "pytorch_model.bin"), weights_only=True)
        assert set(merged) == set(sd) and all(torch.equal(merged[k], sd[k]) for k in sd)
    shutil.copyfile(os.path.join(d, "config.json"), os.path.join(d2, "config.json"))
    check_glm_mp_split(d2, sd, GLM_CONFIG)
    return sd


def check_glm_mp_split(d2, sd, cfg):
    """The split rules, restated independently of mp_tools.py."""
    parts = [torch.load(os.path.join(d2, "pytorch_model_%02d.bin" % r), weights_only=True) for r in range(2)]
    # FlagAI's splitter reassigns its input dict to d['module'] while writing rank 0, so every
    # later rank file also gets each parameter name as a top-level key holding None, before
    # 'module'. That is what FlagAI's from_pretrain leaves on disk, so it is kept.
    assert list(parts[0].keys()) == ["module"]
    assert list(parts[1].keys()) == list(sd.keys()) + ["module"]
    assert all(parts[1][k] is None for k in sd)
    parts = [p["module"] for p in parts]
    h = cfg["hidden_size"]
    for k, v in sd.items():
        for r, p in enumerate(parts):
            if "query_key_value" in k:  # [Q;K;V], each split by rows (heads): [Q_r;K_r;V_r]
                n = h // 2
                want = torch.cat([v[j * h + r * n: j * h + (r + 1) * n] for j in range(3)])
            elif k.endswith("word_embeddings.weight") or "dense_h_to_4h" in k:
                n = v.shape[0] // 2
                want = v[r * n:(r + 1) * n]
            elif k.endswith("attention.dense.weight") or k.endswith("dense_4h_to_h.weight"):
                n = v.shape[1] // 2
                want = v[:, r * n:(r + 1) * n]
            else:
                want = v
            assert torch.equal(p[k], want), (k, r)


# ---------------------------------------------------------------- README

def sizes():
    rows = []
    for dirpath, _, files in sorted(os.walk(OUT)):
        for fn in sorted(files):
            p = os.path.join(dirpath, fn)
            rows.append((os.path.relpath(p, OUT), os.path.getsize(p)))
    return rows


def write_readme(hf_written, meg_written, enc, glm_sd, flagai_root, full):
    L = []
    w = L.append
    w("# tz-convert goldens\n")
    w("Written by scripts/golden/gen_convert_golden.py with python %s, torch %s, transformers %s, "
      "safetensors %s, FlagAI 1.8.0 (wheel unpacked at %s, not installed).\n"
      % (sys.version.split()[0], torch.__version__, __import__("transformers").__version__,
         safetensors.__version__, flagai_root))
    w("All tensors are float32. Every file was read back with torch.load / safetensors after "
      "writing and compared bit for bit with its source.\n")
    w("## Hugging Face containers\n")
    w("`<model>-bin/` (config.json + pytorch_model.bin, torch.save zip of the state dict), "
      "`<model>-bin-sharded/` (pytorch_model-0000N-of-0000M.bin + pytorch_model.bin.index.json) and "
      "`<model>-st-sharded/` (model-0000N-of-0000M.safetensors + model.safetensors.index.json): "
      "the tensors of tests/golden/<model>/model.safetensors, same key names, same order, same bits; "
      "config.json is that folder's. Shards cut the keys in file order into runs of about equal bytes. "
      "Index files as transformers 5 writes them: "
      "`{\"metadata\": {\"total_parameters\": N, \"total_size\": bytes}, \"weight_map\": {name: file}}`, "
      "keys sorted.\n")
    w("Written (model-format, shards): " + ", ".join("%s (%d)" % x for x in hf_written) + ".\n")
    if not full:
        w("Not every model x container pair is here, to keep the folder under 3 MB (the full set is "
          "~9.7 MB; `--full` writes it): the containers do not depend on the architecture, "
          "../torch-ckpt/gpt2-{bin,bin-sharded,st-sharded} already hold all three (a real "
          "save_pretrained of tiny-gpt2, GPT2LMHeadModel, whose pytorch_model.bin has lm_head.weight "
          "sharing wte's storage), and a sharded .bin reader reads single .bin files too. "
          "bert/roberta/gpt2-tiny-cls key mapping can be tested from their model.safetensors.\n")
    w("## Megatron-LM legacy GPT (checkpoint_version 3.0)\n")
    w("From ../gpt2-tiny-cls/model.safetensors (n_embd 64, n_head 4, n_layer 2, vocab 1000, "
      "n_positions 64). `score.weight` (the GPT2ForSequenceClassification head) is not part of "
      "Megatron's GPT model and is left out; the expectation for import+export is that model.safetensors "
      "minus score.weight (no separate file). Layout (Megatron-LM megatron/checkpointing.py "
      "get_checkpoint_name / save_checkpoint / get_checkpoint_tracker_filename; "
      "megatron/model/language_model.py state_dict_for_save_checkpoint):\n")
    w("```\n<dir>/latest_checkpointed_iteration.txt        \"7\" (no newline)\n"
      "<dir>/iter_0000007/mp_rank_0R/model_optim_rng.pt  torch.save zip of\n"
      "  {'args': argparse.Namespace(...),            # not in -noargs\n"
      "   'checkpoint_version': 3.0, 'iteration': 7,\n"
      "   'model': {'language_model': {\n"
      "       'embedding': {'word_embeddings': {'weight': [padded_vocab/tp, 64]},\n"
      "                     'position_embeddings': {'weight': [64, 64]}},\n"
      "       'encoder': {<flat names below>}}}}\n```\n")
    w("No 'optimizer', 'opt_param_scheduler' or 'rng_state' (as with --no-save-optim --no-save-rng). "
      "Key order in the file: args, checkpoint_version, iteration, model.\n")
    w("Encoder keys and shapes, unsplit (tp=1) / per rank at tp=2:\n")
    w("| key | tp=1 | tp=2 rank | split |\n|---|---|---|---|")
    for k, v in enc.items():
        if k.startswith("layers.1."):
            continue
        s1 = list(v.shape)
        if "query_key_value" in k or "dense_h_to_4h" in k:
            s2, how = [v.shape[0] // 2] + list(v.shape[1:]), "dim 0 (column-parallel)"
        elif k.endswith("self_attention.dense.weight") or k.endswith("dense_4h_to_h.weight"):
            s2, how = [v.shape[0], v.shape[1] // 2], "dim 1 (row-parallel)"
        else:
            s2, how = s1, "replicated"
        w("| %s | %s | %s | %s |" % (k, s1, s2, how))
    w("| (layers.1.* the same) | | | |\n")
    w("Names: v3 checkpoints use `language_model.encoder` (older ones `transformer`; "
      "TransformerLanguageModel.load_state_dict maps 'transformer' -> encoder) and "
      "`self_attention` (older ones `attention`; load_state_dict rewrites '.attention.' -> "
      "'.self_attention.'), `final_layernorm` (renamed `final_norm` only in later Megatron-core era "
      "code). transformers' convert_megatron_gpt2_checkpoint.py accepts both spellings.\n")
    w("Weights are Linear [out, in] (HF Conv1D [in, out] transposed). query_key_value rows are "
      "in the checkpoint_version >= 2 order [heads][q,k,v][head_dim] (ParallelAttention views its "
      "output as [np, 3*hn] and splits q,k,v inside each head): full = HF c_attn.weight.T viewed "
      "[3, nh, hd, h], transposed to [nh, 3, hd, h]; rank r holds heads r*nh/tp .. (r+1)*nh/tp-1, "
      "i.e. rows [r*3h/tp, (r+1)*3h/tp). Bias the same. word_embeddings is padded with zero rows "
      "to round_up(1000, 128*tp) = 1024 (tp 1 and 2) and split by rows (512 each at tp=2); "
      "rows 1000..1023 are zero.\n")
    w("Sources read: NVIDIA/Megatron-LM megatron/checkpointing.py (legacy, commit 0229a695), "
      "megatron/model/language_model.py (commit 01e9ce60), the ParallelTransformerLayer / "
      "ParallelAttention code of megatron/model/transformer.py, and transformers' "
      "src/transformers/models/megatron_gpt2/convert_megatron_gpt2_checkpoint.py (commit 0e97420c; "
      "the module is no longer shipped in transformers 5.23's wheel). The split rules follow "
      "Megatron's ColumnParallelLinear / RowParallelLinear / VocabParallelEmbedding.\n")
    w("Pickle details: encoder and the two embedding sub-dicts are OrderedDicts carrying a "
      "_metadata attribute (module prefixes -> {'version': 1}), as nn.Module.state_dict() returns "
      "them, so their pickles end in a BUILD after the items; 'model', 'language_model' and "
      "'embedding' are plain dicts. Globals used: argparse Namespace, torch float32, "
      "collections OrderedDict, torch._utils _rebuild_tensor_v2, torch FloatStorage.\n")
    w("args (argparse.Namespace; pickled as GLOBAL 'argparse Namespace', EMPTY_TUPLE, NEWOBJ, then BUILD of its __dict__; "
      "params_dtype is the GLOBAL torch.float32): num_layers 2, hidden_size 64, ffn_hidden_size 256, "
      "num_attention_heads 4, kv_channels 16, max_position_embeddings 64, seq_length 64, "
      "padded_vocab_size 1024, make_vocab_size_divisible_by 128, tensor_model_parallel_size tp, "
      "pipeline_model_parallel_size 1, layernorm_epsilon 1e-5, tokenizer_type GPT2BPETokenizer, "
      "fp16/bf16 False, iteration 7, and a few flags. Real checkpoints carry ~300 more args, some "
      "of them Megatron enum objects.\n")
    about = {"megatron-gpt2-tp2": "mp_rank_00 and mp_rank_01, with args",
             "megatron-gpt2-tp1-noargs": "mp_rank_00 only, no 'args'",
             "megatron-gpt2-tp2-noargs": "megatron-gpt2-tp2 without 'args'",
             "megatron-gpt2-tp1": "mp_rank_00 only, with args"}
    w("Folders: " + "; ".join("%s/ (%s)" % (m, about[m]) for m in meg_written) + ". Without 'args' the "
      "dimensions (heads above all, needed to undo the query_key_value interleave) must come from "
      "../gpt2-tiny-cls/config.json or flags, as transformers' converter takes --config_file; the "
      "true vocab 1000 is in no Megatron GPT checkpoint (only padded_vocab_size, in args, or the "
      "embedding's rows). The tp=2-without-args and tp=1-with-args combinations are left to --full "
      "(each ~0.7 MB).\n")
    w("## FlagAI GLM\n")
    w("glm-flagai/: FlagAI 1.8's own GLMModel (flagai/model/glm_model.py) instantiated from "
      "config.json (every field its __init__ reads: %s), every parameter then overwritten with "
      "seeded random values (N(0, 0.05), layernorm weights 1 + that). pytorch_model.bin is "
      "torch.save({'module': state_dict}) as FlagAI's hub files and trainer (flagai/utils.py "
      "save_checkpoint) hold it; FlagAI's load_weights_glm reads it back whole (checked). "
      "vocab_size is 128 (not GLM-large-ch's 50048) to keep it small. %s\n"
      % (", ".join(GLM_CONFIG),
         "expected.safetensors: the same state dict, same names." if full else
         "No expected.safetensors (it would be a 470 KB copy): the expectation is "
         "pytorch_model.bin's 'module', which the .bin reader already reads (as ../torch-ckpt/flagai.pt)."))
    w("| key | shape |\n|---|---|")
    for k, v in glm_sd.items():
        if ".layers.1." in k:
            continue
        w("| %s | %s |" % (k, list(v.shape)))
    w("| (transformer.layers.1.* the same) | |\n")
    w("Notes: position_embeddings and block_position_embeddings have max_sequence_length + 1 = 65 "
      "rows (block_position_encoding). query_key_value is [Q; K; V] (each [h, h], head-major rows; "
      "FlagAI's ParallelSelfAttention splits the output in three along the last dim), *not* "
      "Megatron's per-head interleave. There is no lm head: output_predict uses word_embeddings.weight. "
      "load_weights_glm strips a leading 'model.' from keys (k[6:] when k[:5] == 'model').\n")
    w("glm-flagai-mp2/: config.json + pytorch_model_00.bin, pytorch_model_01.bin (name "
      "`pytorch_model_{:02d}.bin`.format(rank)), written by FlagAI's own "
      "flagai/mp_tools.py change_pytorch_model_mp_from_1_to_n_new('glm', dir, 2) (the call "
      "from_pretrain makes when MODEL_PARALLEL_SIZE > 1); each file holds 'module': rank_state_dict "
      "(of the source's other top-level keys only those in its preserve list keep their values, "
      "mp_world_size becomes the target, the rest become None). "
      "FlagAI's change_pytorch_model_mp_from_n_to_1 merges them back to the original (checked). "
      "FlagAI quirk kept as is: the splitter rebinds its input to d['module'] while writing rank 0, "
      "so pytorch_model_01.bin also holds every parameter name as a top-level key with value None, "
      "followed by 'module' (rank 0's file holds only 'module'); a reader must take 'module' and "
      "ignore the rest, as FlagAI's load_weights_glm does. "
      "Split rules (mp_tools.from_1_to_n_models['glm'], matched by substring): "
      "word_embeddings.weight dim 0; attention.query_key_value.weight/.bias code 30 = each of the "
      "Q, K, V blocks split by rows and the rank's pieces concatenated [Q_r; K_r; V_r]; "
      "attention.dense.weight dim 1; mlp.dense_h_to_4h.weight and .bias dim 0; "
      "mlp.dense_4h_to_h.weight dim 1; everything else (layernorms, attention.dense.bias, "
      "mlp.dense_4h_to_h.bias, position_embeddings, block_position_embeddings) whole.\n")
    w("## Sizes (bytes)\n")
    rows = sizes()
    for rel, n in rows:
        w("- %s: %d" % (rel, n))
    w("\nTotal (before this README): %d bytes.\n" % sum(n for _, n in rows))
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("flagai", help="folder holding FlagAI 1.8's unpacked wheel (the one with flagai/)")
    ap.add_argument("--full", action="store_true", help="everything, ~6 MB (not for committing)")
    a = ap.parse_args()
    # export.tsv is gen_convert_export_golden.py's: kept
    export = os.path.join(OUT, "export.tsv")
    kept = open(export).read() if os.path.exists(export) else None
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    if kept is not None:
        open(export, "w").write(kept)
    hf_written = hf_fixtures(a.full)
    meg_written, enc = megatron_fixtures(a.full)
    glm_sd = glm_fixtures(os.path.abspath(a.flagai), a.full)
    write_readme(hf_written, meg_written, enc, glm_sd, a.flagai, a.full)
    total = sum(n for _, n in sizes())
    print("wrote %s: %d bytes" % (OUT, total))


if __name__ == "__main__":
    main()
