/* test_arch_params.h - the small synthetic shapes test_arch.c and
 * test_arch_refusals.c both build (confkv synth's parameters). */
#ifndef CONFKV_TEST_ARCH_PARAMS_H
#define CONFKV_TEST_ARCH_PARAMS_H

#include "arch.h"
#include "convert.h"
#include "quant.h"

static inline synth_params base_params(int arch) {
    synth_params sp = {.dim = 64,
                       .n_layers = 2,
                       .n_heads = 4,
                       .n_kv_heads = 2,
                       .hidden_dim = 96,
                       .vocab_size = 400,
                       .ctx = 256,
                       .type = QUANT_F32,
                       .seed = 11,
                       .arch = arch};
    return sp;
}

/* gpt-oss in small: 3 layers (0 and 2 windowed, 1 not: period 2), a
 * window of 11 over 40 tokens in blocks of 16 (so a window starts inside
 * a block and spans two), head_dim 32 (the vector kernels' shapes), YaRN,
 * 8 experts of which 2 a token. */
static inline synth_params gpt_oss_params(void) {
    synth_params sp = base_params(ARCH_GPT_OSS);
    sp.n_layers = 3;
    sp.head_dim = 32;
    sp.rope_theta = 150000;
    sp.rope_scaling = ARCH_SCALING_YARN;
    sp.rope_factor = 4;
    sp.rope_orig_ctx = 16;
    sp.n_expert = 8;
    sp.n_expert_used = 2;
    sp.expert_ffn = 48;
    sp.n_swa = 11;
    return sp;
}

/* gemma4 in small: 6 layers, 2 and 5 full (period 3); windowed ones head 32
 * with 2 KV heads for 4 query heads, full ones head 64 with one KV head;
 * a window of 11 over 40 tokens in blocks of 16. */
static inline synth_params g4_params(void) {
    synth_params sp = base_params(ARCH_GEMMA4);
    sp.n_layers = 6;
    sp.head_dim = 32;
    sp.head_dim_full = 64;
    sp.n_kv_heads_full = 1;
    sp.swa_period = 3;
    sp.n_swa = 11;
    sp.rope_theta = 1000000;
    sp.rope_theta_swa = 10000;
    sp.softcap = 5; /* low enough that the cap bends the logits */
    return sp;
}

#endif
