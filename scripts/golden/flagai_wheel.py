"""FlagAI 1.8's modules run straight from its unpacked wheel (not installed), for the golden
generators that need FlagAI's own code (gen_convert_golden.py, gen_glm_golden.py):

    pip download flagai==1.8.0 --no-deps -d /tmp/flagai
    mkdir -p /tmp/flagai-dl/x && cd /tmp/flagai-dl/x && unzip -q /tmp/flagai/flagai-1.8.0-py3-none-any.whl
"""
import os
import sys
import types

# A tiny GLM: every field FlagAI 1.8's GLMModel.__init__ reads (flagai/model/glm_model.py), in
# the order the config.json files hold them. Generators copy it and change values, not keys.
GLM_CONFIG = {
    "num_layers": 2, "vocab_size": 128, "hidden_size": 64, "num_attention_heads": 4,
    "embedding_dropout_prob": 0.1, "attention_dropout_prob": 0.1, "output_dropout_prob": 0.1,
    "max_sequence_length": 64, "max_memory_length": 0, "checkpoint_activations": False,
    "checkpoint_num_layers": 1, "parallel_output": True, "relative_encoding": False,
    "block_position_encoding": True, "output_predict": True, "spell_length": None,
    "spell_func": "lstm", "attention_scale": 1.0, "tune_prefix_layers": None,
}


def load_flagai(flagai_root):
    """(glm_model, base_model, mp_tools) from the wheel at flagai_root (the folder holding
    flagai/). flagai and flagai.model are empty stand-ins so that their __init__ files (which
    import every model and heavy optional dependencies) do not run; ENV_TYPE is cleared so the
    layers are FlagAI's single-process ones (torch Linear/LayerNorm, no mpu)."""
    for pkg, sub in (("flagai", "flagai"), ("flagai.model", "flagai/model")):
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(flagai_root, sub)]
        sys.modules[pkg] = m
    os.environ.pop("ENV_TYPE", None)
    import flagai.model.glm_model as glm_model
    import flagai.model.base_model as base_model
    import flagai.mp_tools as mp_tools
    return glm_model, base_model, mp_tools


def read_flagai_source(flagai, rel):
    """rel (e.g. "flagai/data/tokenizer/tokenizer.py") from the wheel (a .whl file) or from a folder
    holding the flagai package."""
    import zipfile
    if flagai.endswith(".whl"):
        with zipfile.ZipFile(flagai) as z:
            return z.read(rel).decode("utf-8")
    with open(os.path.join(flagai, rel), encoding="utf-8") as f:
        return f.read()


def exec_flagai_modules(flagai, packages, modules):
    """Executes FlagAI modules straight from the wheel or folder `flagai`, for the tokenizer
    golden generators: packages (dotted names) become empty stand-ins, so that their __init__
    files (which import every model and heavy optional dependencies) do not run;
    flagai.model.file_utils, which the tokenizers use only to download a missing vocab, is a stub;
    then each (dotted name, path in the wheel) of modules runs in order. Returns the last one."""
    import importlib.util
    for pkg in ["flagai", "flagai.data", "flagai.data.tokenizer", "flagai.model"] + list(packages):
        m = types.ModuleType(pkg)
        m.__path__ = []
        sys.modules[pkg] = m
    stub = types.ModuleType("flagai.model.file_utils")
    stub._get_model_id = stub._get_vocab_path = lambda *a, **k: None
    sys.modules["flagai.model.file_utils"] = stub
    mod = None
    for name, rel in modules:
        spec = importlib.util.spec_from_loader(name, loader=None)
        mod = importlib.util.module_from_spec(spec)
        mod.__package__ = name.rsplit(".", 1)[0]
        sys.modules[name] = mod
        setattr(sys.modules[mod.__package__], name.rsplit(".", 1)[1], mod)
        exec(compile(read_flagai_source(flagai, rel), flagai + ":" + rel, "exec"), mod.__dict__)
    return mod
