/* tz-convert: Hugging Face, FlagAI and Megatron-LM checkpoints to tunezoo sharded checkpoints and
 * back, streamed one tensor at a time and read without running any of the files' code. The
 * work is in checkpoints/ckpt_convert.c; this file parses the command line. */
#include <stdio.h>
#include <string.h>

#include "checkpoints/ckpt_convert.h"
#include "checkpoints/ckpt_lora_merge.h"
#include "models/param_check.h"
#include "runtime/base/rt_args.h"
#include "runtime/base/rt_signal.h"

static const char *prog = "tz-convert";

static rt_status run(int argc, char **argv) {
    rt_status st = RT_OK;
    int64_t tp = 0, vocab = 0;
    const char *dtype = NULL, *arch = NULL, *hf_config = NULL;
    /* clang-format off */
    const rt_opt opts[] = {
        {"tp", RT_OPT_INT, &tp, NULL, "N",
         "tensor-parallel ranks of the output (import: default 1; reshard: required)", NULL, 1, 4096},
        {"dtype", RT_OPT_CHOICE, &dtype, "auto", NULL,
         "import: how the output stores tensors; auto keeps the source's F32/BF16/F16", "auto|fp32|bf16|fp16", 0, 0},
        {"arch", RT_OPT_STRING, &arch, NULL, "NAME",
         "import: gpt2, bert, roberta, t5, glm or megatron-gpt2 (default: config.json's model_type; Megatron "
         "folders: megatron-gpt2)", NULL, 0, 0},
        {"hf-config", RT_OPT_STRING, &hf_config, NULL, "FILE",
         "import: the model's HF config.json when SRC has none (a Megatron folder without args)", NULL, 0, 0},
        {"vocab-size", RT_OPT_INT, &vocab, NULL, "N",
         "import: the real vocab size, dropping the embedding's padding rows of model-parallel files", NULL, 1,
         1 << 30},
    };
    /* clang-format on */
    const rt_args_spec spec = {
        prog,
        "COMMAND PATH [PATH] [OUT]",
        2,
        4,
        "Converts checkpoints between Hugging Face, FlagAI, Megatron-LM and tunezoo's sharded folder.\n"
        "commands:\n"
        "  import SRC OUT    HF folder or file (model.safetensors, pytorch_model.bin, sharded *.index.json), FlagAI\n"
        "                    GLM (pytorch_model.bin, or pytorch_model_NN.bin model-parallel files) or Megatron-LM\n"
        "                    (latest_checkpointed_iteration.txt, mp_rank_NN/) -> sharded folder at --tp\n"
        "  reshard IN OUT    sharded folder -> sharded folder at another --tp (bit-exact)\n"
        "  export IN OUT     sharded folder -> HF folder (model.safetensors, config.json, tokenizer files)\n"
        "  merge BASE ADAPTER OUT\n"
        "                    HF folder + PEFT LoRA folder (adapter_config.json, adapter_model.safetensors) -> HF\n"
        "                    folder of the merged model, as PEFT's merge_and_unload (W + alpha/r B A)\n"
        "  inspect PATH      every tensor of any of the above or a .tzck: name, dtype, shape, CRC-32\n"
        "  verify DIR        checks a sharded folder's checksums\n"
        "Tensors are converted one at a time (memory stays near the largest tensor); pickles are read by tunezoo's\n"
        "own reader, which refuses anything but tensors and plain containers. Outputs are written under a temporary\n"
        "name and renamed when complete; an existing OUT is never overwritten.",
        "examples:\n"
        "  tz-convert import tests/data/tiny-gpt2 /tmp/gpt2-tp2 --tp 2\n"
        "  tz-convert reshard /tmp/gpt2-tp2 /tmp/gpt2-tp4 --tp 4\n"
        "  tz-convert export /tmp/gpt2-tp4 /tmp/gpt2-hf\n"
        "  tz-convert merge path/to/gpt2 runs/gpt2-finetune/lora /tmp/gpt2-merged\n"
        "  tz-convert import megatron/ckpt /tmp/meg --tp 1 --vocab-size 50257\n"
        "  gpt2-classify --model /tmp/gpt2-tp2 ...   (the training programs read sharded folders at any tp)\n"
        "exit status: 0 ok, 1 bad input or I/O error, 2 usage error",
        opts,
        (int)(sizeof opts / sizeof opts[0]),
        NULL,
        NULL, /* no presets file */
    };
    const char *pos[4] = {0};
    int n_pos = 0;
    ckpt_convert_stats stats;
    RT_TRY(rt_args_parse(&spec, argc, argv, pos, &n_pos));
    const char *cmd = pos[0];
    bool two = strcmp(cmd, "import") == 0 || strcmp(cmd, "reshard") == 0 || strcmp(cmd, "export") == 0;
    bool one = strcmp(cmd, "inspect") == 0 || strcmp(cmd, "verify") == 0, merge = strcmp(cmd, "merge") == 0;
    if (!two && !one && !merge)
        RT_FAIL(RT_ERR_USAGE, "unknown command '%s' (import, reshard, export, merge, inspect or verify)", cmd);
    if (two && n_pos != 3) RT_FAIL(RT_ERR_USAGE, "%s needs two paths: %s IN OUT", cmd, cmd);
    if (one && n_pos != 2) RT_FAIL(RT_ERR_USAGE, "%s takes one path", cmd);
    if (merge && n_pos != 4) RT_FAIL(RT_ERR_USAGE, "merge needs three paths: merge BASE ADAPTER OUT");
    if (merge && tp) RT_FAIL(RT_ERR_USAGE, "merge writes one HF folder; --tp does not apply");
    if (strcmp(cmd, "import") != 0 && (strcmp(dtype, "auto") != 0 || arch || hf_config || vocab))
        RT_FAIL(RT_ERR_USAGE, "--dtype, --arch, --hf-config and --vocab-size are import options");
    if (strcmp(cmd, "import") == 0) {
        ckpt_import_opts o = {.src = pos[1],
                              .out = pos[2],
                              .tp = tp ? (int)tp : 1,
                              .keep_dtype = !strcmp(dtype, "auto"),
                              .dtype = !strcmp(dtype, "bf16")   ? RT_BF16
                                       : !strcmp(dtype, "fp16") ? RT_F16
                                                                : RT_F32,
                              .arch = arch,
                              .hf_config = hf_config,
                              .vocab_size = (int)vocab,
                              .check = mdl_check_tensors};
        RT_TRY(ckpt_convert_import(&o, &stats));
    } else if (strcmp(cmd, "reshard") == 0) {
        if (!tp) RT_FAIL(RT_ERR_USAGE, "reshard needs --tp N");
        RT_TRY(ckpt_convert_reshard(pos[1], pos[2], (int)tp, &stats));
    } else if (strcmp(cmd, "export") == 0) {
        if (tp) RT_FAIL(RT_ERR_USAGE, "export writes one HF file; --tp does not apply");
        RT_TRY(ckpt_convert_export(pos[1], pos[2], &stats));
    } else if (merge) {
        RT_TRY(ckpt_lora_merge(pos[1], pos[2], pos[3], &stats));
    } else if (strcmp(cmd, "inspect") == 0) {
        RT_TRY(ckpt_convert_inspect(pos[1], stdout));
    } else {
        RT_TRY(ckpt_convert_verify(pos[1], mdl_check_tensors, stdout));
    }
    if (fflush(stdout) != 0) RT_FAIL(RT_ERR_IO, "stdout: write error");
fail:
    return st;
}

/* SIGINT/SIGTERM stop a conversion between tensors: its half-built folder is removed and the
 * exit status is 128 + the signal, as for the training programs. */
int main(int argc, char **argv) {
    rt_signal_guard signals;
    rt_signal_catch_stop(&signals);
    rt_signal_ignore_file_limit();
    int code = rt_status_exit_code(prog, run(argc, argv));
    int sig = rt_signal_stop_requested();
    rt_signal_release(&signals);
    return sig && code ? 128 + sig : code;
}
