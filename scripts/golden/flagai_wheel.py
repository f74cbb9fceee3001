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
