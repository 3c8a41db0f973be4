/* cli_model.c - `confkv convert` and `confkv synth`: write GGUF models. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "cli.h"
#include "convert.h"
#include "quant.h"

int cli_convert(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "convert", 0};
    const char *from = "llama2c", *ckpt = NULL, *tok = NULL, *out = NULL, *type = "f32";
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            printf("usage: confkv convert --from llama2c CHECKPOINT --tokenizer TOK -o OUT.gguf "
                   "[--type f32|f16|bf16|q8_0|mxfp4]\n"
                   "       confkv convert --from gguf IN.gguf -o OUT.gguf --type T   (re-type)\n");
            return 0;
        }
        if (cli_str(&a, "--from", &from) || cli_str(&a, "--tokenizer", &tok) || cli_str(&a, "-o", &out) ||
            cli_str(&a, "--output", &out) || cli_str(&a, "--type", &type))
            continue;
        if (a.argv[a.i][0] != '-' && !ckpt) {
            ckpt = a.argv[a.i++];
            continue;
        }
        return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (strcmp(from, "llama2c") && strcmp(from, "gguf")) {
        cli_error(&a, "--from must be llama2c or gguf");
        return 2;
    }
    if (!ckpt || !out) {
        cli_error(&a, "need a CHECKPOINT and -o OUT.gguf (try --help)");
        return 2;
    }
    int t = quant_type_from_name(type);
    if (t < 0) {
        cli_error(&a, "--type must be f32, f16, bf16, q8_0 or mxfp4");
        return 2;
    }
    char err[512];
    model *m = NULL;
    if (model_load(ckpt, tok, &m, err, sizeof err)) {
        cli_error(&a, "%s", err);
        return 1;
    }
    if ((!strcmp(from, "gguf")) != (m->format == MODEL_FMT_GGUF)) {
        cli_error(&a, "%s is not a %s file", ckpt, from);
        model_free(m);
        return 1;
    }
    int rc = convert_write_gguf(m, t, out, err, sizeof err);
    if (rc)
        cli_error(&a, "%s", err);
    else
        fprintf(stderr, "confkv convert: wrote %s (%s, %d layers, dim %d, vocab %d)\n", out, type,
                m->cfg.n_layers, m->cfg.dim, m->cfg.vocab_size);
    model_free(m);
    return rc ? 1 : 0;
}

int cli_synth(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "synth", 0};
    synth_params p = {.dim = 288,
                      .n_layers = 6,
                      .n_heads = 6,
                      .n_kv_heads = 0,
                      .hidden_dim = 768,
                      .vocab_size = 32000,
                      .ctx = 1024,
                      .seed = 1};
    const char *out = NULL, *type = "f32", *arch = "llama", *scaling = NULL;
    int swa_pattern = -1;           /* -1: not given (the row's default) */
    const char *attn_layers = NULL; /* lfm2's attention layers, "2,5,8" */
    /* NAN: not given (mistral3 then takes Ministral 3's values) */
    float temp = NAN, log_mul = NAN;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            printf("usage: confkv synth -o OUT.gguf [--dim D] [--layers L] [--heads H] [--kv-heads K]\n"
                   "       [--ffn F] [--vocab V] [--ctx C] [--type f32|f16|bf16|q8_0|mxfp4] [--seed S]\n"
                   "       [--arch llama|qwen2|qwen3|smollm3|mistral3|qwen3moe|gpt-oss|gemma4|lfm2|lfm2moe|\n"
                   "       granitehybrid] [--ssm-state N] [--ssm-groups G] [--ssm-heads H] [--ssm-conv K]\n"
                   "       [--head-dim N] [--tied] [--vocab-from VOCAB.gguf]\n"
                   "       [--experts N --experts-used K [--expert-ffn F]] [--sliding-window N]\n"
                   "       [--swa-pattern P] [--head-dim-full N] [--kv-heads-full K]\n"
                   "       [--rope-theta-swa X] [--softcap C] [--ple P] [--kv-shared N]\n"
                   "       [--conv-l L] [--attn-layers I,J,...] [--dense-lead N]\n"
                   "       [--rope-theta X] [--rope-freqs]\n"
                   "       [--rope-scaling none|linear|yarn] [--rope-scaling-factor F] [--rope-orig-ctx N]\n"
                   "       [--rope-attn-factor A] [--yarn-ext-factor E] [--yarn-beta-fast B]\n"
                   "       [--yarn-beta-slow B] [--yarn-log-mul M] [--attn-temp-scale S]\n"
                   "defaults: the stories15M shape (288, 6, 6, 6, 768, 32000), ctx 1024, f32, seed 1,\n"
                   "llama, head_dim dim / heads, an output.weight, a synthetic vocabulary, no scaling.\n"
                   "--arch qwen2 adds q/k/v biases, qwen3 q/k head norms; smollm3 has no RoPE on\n"
                   "every fourth layer (llama.cpp's fixed step: use 4 or more layers). mistral3 writes\n"
                   "Ministral 3's keys unless given: yarn, factor 16, original context ctx / 16,\n"
                   "--yarn-log-mul 1 (mscale_all_dim), --attn-temp-scale 0.1 (its query scale,\n"
                   "changing every original-context positions); 0 writes none. --head-dim writes\n"
                   "attention.key_length/value_length; --tied writes no output.weight; --rope-freqs\n"
                   "writes Llama 3.1's rope_freqs.weight (llama3 formula: factor 8, low 1, high 4,\n"
                   "original context 8192); --vocab-from copies the tokenizer.* keys of a GGUF and\n"
                   "takes the vocabulary size from it. YaRN's keys are written only when given.\n"
                   "--arch qwen3moe (qwen3's attention, a mixture of experts for the feed-forward)\n"
                   "needs --experts N (expert_count, at most %d) and --experts-used K (expert_used_count,\n"
                   "1..N); --expert-ffn F is each expert's inner width (default ffn / K). The router\n"
                   "is written f32, the experts in --type; --ffn is written as feed_forward_length.\n"
                   "--arch gpt-oss (OpenAI's: q/k/v and output biases, a sink logit per head, a sliding\n"
                   "window on the even layers, experts with biases, the top K logits softmaxed, the\n"
                   "clamped SwiGLU) needs --experts and --experts-used too, and takes --sliding-window N\n"
                   "(attention.sliding_window, default 16: shorter than a prompt and its steps) and\n"
                   "--swa-pattern P (sliding_window_pattern: layer l is windowed when l %% P < P - 1,\n"
                   "every layer for 0; default 2, not written). It always writes output.weight.\n"
                   "--arch gemma4 (the 31B's layout): --heads, --kv-heads, --head-dim are the windowed\n"
                   "layers' (head_dim default 64), --head-dim-full (default 2x) and --kv-heads-full\n"
                   "(default half) the full ones'; every --swa-pattern P-th layer is full (default 6),\n"
                   "with no attn_v (V = K) and RoPE on a quarter of its head (rope_freqs);\n"
                   "--sliding-window N (default 16); --rope-theta the full layers' base (default 1e6),\n"
                   "--rope-theta-swa the windowed ones' (default 1e4); --softcap the final logit cap\n"
                   "(default 30). With --experts N --experts-used K [--expert-ffn F] it is the\n"
                   "26B-A4B's layout: on every layer N GELU experts beside the dense feed-forward.\n"
                   "--ple P and --kv-shared N give the E2B/E4B's per-layer embeddings (P a layer) and\n"
                   "N last layers attending over an earlier layer's KV (layer L - N - 1 must be full,\n"
                   "the one before it windowed).\n"
                   "--type mxfp4 with experts is llama.cpp's MXFP4_MOE: the experts MXFP4, the other\n"
                   "matrices q8_0 (router and vectors f32); without experts every matrix is MXFP4.\n"
                   "--arch lfm2 (LFM2: short-convolution layers beside attention ones with q/k head\n"
                   "norms) takes --conv-l L (shortconv.l_cache, 2..16, default 3) and --attn-layers\n"
                   "I,J,... (the attention layers, each below 64; default every third from layer 2,\n"
                   "as LFM2-350M's first ones); the others are convolution layers. --arch lfm2moe\n"
                   "takes them too, with --experts and --experts-used (sigmoid gating with a random\n"
                   "exp_probs_b) and --dense-lead N (leading_dense_block_count: the first N layers\n"
                   "dense, default 0). --arch granitehybrid (Granite 4.0-H, dense: Mamba2 layers\n"
                   "beside attention ones without RoPE) takes --attn-layers as lfm2 (the others are\n"
                   "Mamba2), --ssm-state N (ssm.state_size, default 16), --ssm-groups G (default 2),\n"
                   "--ssm-heads H (time_step_rank, default 2 dim / 16), --ssm-conv K (default 4); the\n"
                   "inner size is 2 dim; it writes Granite's scalars (embedding 4, residual 0.5,\n"
                   "attention 1 / head_dim, logits 6).\n",
                   MODEL_MAX_EXPERTS);
            return 0;
        }
        if (cli_flag(&a, "--tied")) {
            p.tied = 1;
            continue;
        }
        if (cli_flag(&a, "--rope-freqs")) {
            p.rope_freqs = 1;
            continue;
        }
        if (cli_str(&a, "-o", &out) || cli_str(&a, "--output", &out) || cli_str(&a, "--type", &type) ||
            cli_int(&a, "--dim", 2, 1 << 16, &p.dim) || cli_int(&a, "--layers", 1, 1024, &p.n_layers) ||
            cli_int(&a, "--heads", 1, 1024, &p.n_heads) ||
            cli_int(&a, "--kv-heads", 1, 1024, &p.n_kv_heads) ||
            cli_int(&a, "--ffn", 1, 1 << 18, &p.hidden_dim) ||
            cli_int(&a, "--vocab", 1, 1 << 22, &p.vocab_size) || cli_int(&a, "--ctx", 1, 1 << 20, &p.ctx) ||
            cli_u64(&a, "--seed", &p.seed) || cli_str(&a, "--arch", &arch) ||
            cli_int(&a, "--head-dim", 2, MODEL_MAX_HEAD_DIM, &p.head_dim) ||
            cli_str(&a, "--vocab-from", &p.vocab_from) ||
            cli_float(&a, "--rope-theta", 1.0001, 1e11, &p.rope_theta) ||
            cli_str(&a, "--rope-scaling", &scaling) ||
            cli_float(&a, "--rope-scaling-factor", 1e-3, 1e5, &p.rope_factor) ||
            cli_int(&a, "--rope-orig-ctx", 1, 1 << 20, &p.rope_orig_ctx) ||
            cli_float(&a, "--rope-attn-factor", 1e-3, 1e3, &p.rope_attn_factor) ||
            cli_float(&a, "--yarn-ext-factor", 0, 1e3, &p.yarn_ext_factor) ||
            cli_float(&a, "--yarn-beta-fast", 1e-3, 1e4, &p.yarn_beta_fast) ||
            cli_float(&a, "--yarn-beta-slow", 1e-3, 1e4, &p.yarn_beta_slow) ||
            cli_float(&a, "--yarn-log-mul", 0, 1e3, &log_mul) ||
            cli_float(&a, "--attn-temp-scale", -1e3, 1e3, &temp) ||
            cli_int(&a, "--experts", 1, MODEL_MAX_EXPERTS, &p.n_expert) ||
            cli_int(&a, "--experts-used", 1, MODEL_MAX_EXPERTS, &p.n_expert_used) ||
            cli_int(&a, "--expert-ffn", 1, 1 << 18, &p.expert_ffn) ||
            cli_int(&a, "--sliding-window", 1, 1 << 20, &p.n_swa) ||
            cli_int(&a, "--swa-pattern", 0, 1024, &swa_pattern) ||
            cli_int(&a, "--conv-l", 2, ARCH_MAX_CONV_L, &p.conv_l) ||
            cli_str(&a, "--attn-layers", &attn_layers) ||
            cli_int(&a, "--dense-lead", 0, 1024, &p.n_dense_lead) ||
            cli_int(&a, "--head-dim-full", 2, MODEL_MAX_HEAD_DIM, &p.head_dim_full) ||
            cli_int(&a, "--kv-heads-full", 1, 1024, &p.n_kv_heads_full) ||
            cli_float(&a, "--rope-theta-swa", 1.0001, 1e11, &p.rope_theta_swa) ||
            cli_float(&a, "--softcap", 1e-3, 1e6, &p.softcap) ||
            cli_int(&a, "--ple", 1, 1 << 16, &p.n_embd_pl) ||
            cli_int(&a, "--kv-shared", 1, 1022, &p.n_kv_shared) ||
            cli_int(&a, "--ssm-state", 1, ARCH_MAX_SSM_STATE, &p.ssm_d_state) ||
            cli_int(&a, "--ssm-groups", 1, 1 << 16, &p.ssm_n_group) ||
            cli_int(&a, "--ssm-heads", 1, 1 << 16, &p.ssm_n_head) ||
            cli_int(&a, "--ssm-conv", 2, ARCH_MAX_CONV_L, &p.ssm_d_conv))
            continue;
        return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if (!out) {
        cli_error(&a, "-o OUT.gguf is required");
        return 2;
    }
    if ((p.type = quant_type_from_name(type)) < 0) {
        cli_error(&a, "--type must be f32, f16, bf16, q8_0 or mxfp4");
        return 2;
    }
    const arch_info *ai = arch_find(arch, strlen(arch));
    if (!ai) {
        cli_error(&a, "--arch must be one of %s", arch_names());
        return 2;
    }
    p.arch = ai->id;
    const int moe = arch_has_block(ai, ARCH_BLOCK_MOE);
    if (!moe && (p.n_expert || p.n_expert_used || p.expert_ffn)) {
        cli_error(
            &a,
            "--experts, --experts-used and --expert-ffn need --arch qwen3moe, gpt-oss, gemma4 or lfm2moe");
        return 2;
    }
    const int g4 = ai->id == ARCH_GEMMA4;
    if (!(ai->keys & ARCH_READS_SWA) && !g4 && (p.n_swa || swa_pattern >= 0)) {
        cli_error(&a, "--sliding-window and --swa-pattern need --arch gpt-oss or gemma4");
        return 2;
    }
    if (!g4 && (p.head_dim_full || p.n_kv_heads_full || p.rope_theta_swa > 0 || p.softcap > 0 ||
                p.n_embd_pl || p.n_kv_shared)) {
        cli_error(&a,
                  "--head-dim-full, --kv-heads-full, --rope-theta-swa, --softcap, --ple and --kv-shared need "
                  "--arch gemma4");
        return 2;
    }
    if (g4) {
        if (!p.n_swa) p.n_swa = 16;
        p.swa_period = swa_pattern > 0 ? swa_pattern : 0;
        if (!p.head_dim) p.head_dim = 64;
    }
    if (ai->keys & ARCH_READS_SWA) {
        if (!p.n_swa) p.n_swa = 16;
        /* synth_params: 0 the row's default, -1 the pattern 0 (every layer windowed) */
        p.swa_period = swa_pattern > 0 ? swa_pattern : swa_pattern == 0 ? -1 : 0;
    }
    if (!(ai->keys & ARCH_READS_DENSE_LEAD) && p.n_dense_lead) {
        cli_error(&a, "--dense-lead needs --arch lfm2moe");
        return 2;
    }
    if (!(ai->keys & ARCH_READS_SHORTCONV) &&
        (p.conv_l || (attn_layers && !(ai->keys & ARCH_READS_MAMBA2)))) {
        cli_error(&a, "--conv-l needs --arch lfm2 or lfm2moe, --attn-layers those or granitehybrid");
        return 2;
    }
    if (!(ai->keys & ARCH_READS_MAMBA2) && (p.ssm_d_state || p.ssm_n_group || p.ssm_n_head || p.ssm_d_conv)) {
        cli_error(&a, "--ssm-state, --ssm-groups, --ssm-heads and --ssm-conv need --arch granitehybrid");
        return 2;
    }
    for (const char *q = attn_layers; q && *q;) { /* "2,5,8": a bit each */
        char *end;
        long l = strtol(q, &end, 10);
        if (end == q || l < 0 || l >= 64 || l >= p.n_layers || (*end && *end != ',')) {
            cli_error(&a, "--attn-layers: \"%s\" is not a list of layers below 64 and --layers", attn_layers);
            return 2;
        }
        p.attn_layers |= (uint64_t)1 << l;
        q = *end ? end + 1 : end;
    }
    if (moe && ai->id != ARCH_GEMMA4 && (!p.n_expert || !p.n_expert_used)) {
        cli_error(&a, "--arch %s needs --experts N and --experts-used K", ai->name);
        return 2;
    }
    if (moe && p.n_expert_used > p.n_expert) {
        cli_error(&a, "--experts-used %d is more than --experts %d", p.n_expert_used, p.n_expert);
        return 2;
    }
    if (ai->keys & ARCH_READS_ATTN_TEMP) {
        /* Ministral 3's shape of these (its config: yarn factor 16 over a
         * sixteenth of the context, mscale_all_dim 1, llama_4_scaling_beta 0.1) */
        if (!scaling) {
            scaling = "yarn";
            if (!p.rope_factor) p.rope_factor = 16;
            if (!p.rope_orig_ctx) p.rope_orig_ctx = p.ctx / 16 > 0 ? p.ctx / 16 : 1;
        }
        if (isnan(temp)) temp = 0.1f;
        if (isnan(log_mul) && !strcmp(scaling, "yarn")) log_mul = 1;
    }
    if (!isnan(temp) && temp != 0 && !(ai->keys & ARCH_READS_ATTN_TEMP)) {
        cli_error(&a, "--attn-temp-scale: architecture %s has no attention temperature", ai->name);
        return 2;
    }
    if (!isnan(log_mul) && log_mul != 0 && !(ai->keys & ARCH_READS_YARN_LOG_MUL)) {
        cli_error(&a, "--yarn-log-mul: architecture %s reads no yarn_log_multiplier", ai->name);
        return 2;
    }
    p.attn_temp_scale = isnan(temp) ? 0 : temp;
    p.yarn_log_mul = isnan(log_mul) ? 0 : log_mul;
    if (!scaling) scaling = "none";
    if ((p.rope_scaling = arch_scaling_from_name(scaling, strlen(scaling))) < 0) {
        cli_error(&a, "--rope-scaling must be none, linear or yarn");
        return 2;
    }
    if (p.rope_scaling != ARCH_SCALING_NONE && !p.rope_factor) {
        cli_error(&a, "--rope-scaling %s needs --rope-scaling-factor F", scaling);
        return 2;
    }
    if (p.rope_scaling == ARCH_SCALING_NONE && (p.rope_factor || p.rope_orig_ctx)) {
        cli_error(&a, "--rope-scaling-factor and --rope-orig-ctx need --rope-scaling linear|yarn");
        return 2;
    }
    if (p.rope_scaling != ARCH_SCALING_YARN &&
        (p.yarn_ext_factor || p.yarn_beta_fast || p.yarn_beta_slow || p.yarn_log_mul)) {
        cli_error(&a, "--yarn-* flags need --rope-scaling yarn");
        return 2;
    }
    char err[512];
    double t0 = cli_now();
    int rc = convert_synth(&p, out, err, sizeof err);
    if (rc) {
        cli_error(&a, "%s", err);
        return 1;
    }
    fprintf(stderr, "confkv synth: wrote %s in %.1f s\n", out, cli_now() - t0);
    return 0;
}
