/* eng_types.h - the value types the engine's public API (engine.h) shares
 * with the engine's modules: sampling parameters and confidence
 * (samp.c), a KV policy's configuration (kvpol.c), a backend's memory
 * plan (backend.h). Each is defined here once, so that engine.h needs no
 * internal header; the modules include this file for them. Plain data, and
 * the two functions a client fills them with. */
#ifndef CK_ENG_TYPES_H
#define CK_ENG_TYPES_H
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------- samp.h */

typedef struct samp_params {
    float temperature;    /* 0 = greedy; >= 0 */
    float top_p;          /* 1 = off; in [0, 1] (0: only the most probable token) */
    int top_k;            /* 0 = off; >= 0 */
    float min_p;          /* 0 = off; in [0, 1]: drop tokens with p < min_p * p_max */
    float repeat_penalty; /* 1 = off; > 0 (llama.cpp semantics: each distinct token of the
                             last repeat_last_n gets logit > 0 ? logit / p : logit * p) */
    int repeat_last_n;    /* 64 default; 0 = off; -1 = the whole history */
    uint64_t seed;        /* any value */
} samp_params;

/* temperature 1, top_p 1, top_k 0, min_p 0, penalty 1, last_n 64, seed 0 (samp.c) */
void samp_params_default(samp_params *p);

/* Confidence of a next-token distribution, from softmax(logits) at
 * temperature 1 before any filter or penalty. */
typedef struct samp_conf {
    float entropy; /* nats, in [0, log n] */
    float gap;     /* p1 - p2 (0 when the top two logits tie) */
    float pmax;    /* p1 */
} samp_conf;

/* ----------------------------------------------------------- kvpol.h */

typedef struct kvpol_config {
    int kind;                 /* the policy's kind (kvpol.h's constants: only the policies test it) */
    int budget;               /* tokens (window, sinks, h2o) */
    int sink_tokens;          /* always-hot first tokens */
    int recent_window;        /* always-hot most recent tokens */
    int min_size;             /* CONF-KV budget floor, tokens */
    int base_size;            /* CONF-KV starting budget */
    int max_size;             /* CONF-KV budget ceiling */
    float scaling_factor;     /* fraction of the distance to max/min moved per step */
    float entropy_threshold;  /* nats; above = uncertain */
    float prob_gap_threshold; /* p1 - p2 below = uncertain */
    float max_prob_threshold; /* p_max below = uncertain */
    int adaptive;             /* thresholds=adaptive: calibrate from running quantiles */
    float signal_ema;         /* smoothing of the three signals (weight of the new value) */
    float score_ema;          /* decay of the attention-mass importance per step */
    float recency_weight;     /* importance bonus of recent blocks */
    int hysteresis;           /* steps a direction must hold before the budget moves */
    float retry_entropy;      /* nats (32k scale): a step above it reruns with recalled blocks; 0 = off */
    float retry_pmax;         /* a step whose p_max is below it reruns likewise; 0 = off */
    int retry_size;           /* budget, tokens, of a rerun step */
    int cache_compression;    /* int8 KV (warm, and hot blocks outside the recent window) */
    float breaker_threshold;  /* hot use / pool size that forces minimum budgets */
    float breaker_release;    /* ... until use falls below this */
} kvpol_config;

/* Parse a policy spec (kvpol.c; kvpol.h lists them): "full", "window:N",
 * "sinks:N", "h2o:N", "conf", "conf-int8", parameters after a colon
 * ("conf:min_size=32,recent_window=32"). Returns 0 or CK_EINVAL with err
 * filled. */
int kvpol_parse(const char *spec, kvpol_config *c, char *err, size_t errlen);

/* ---------------------------------------------------------- backend.h */

/* What a backend will hold, in bytes, known before anything is allocated
 * (docs/ARCHITECTURE.md, Memory plan). */
typedef struct be_memory {
    int max_ctx;               /* the context it is sized for (0 in options resolved) */
    int n_threads;             /* threads the scratch is for (0 in options resolved) */
    size_t weights;            /* its weights (CPU: packed f32 copies of f32/f16/bf16 ones,
                                  the file's bytes of quantized ones, used in the mapping) */
    size_t kv;                 /* hot KV pool: n_kv_blocks f32 blocks */
    size_t kv8;                /* int8 pool: n_kv8_blocks blocks */
    size_t activations;        /* batch buffers: max_batch_tokens rows, block lists */
    size_t scratch_per_thread; /* attention scores (n_heads, max_ctx), block pointers */
    size_t scratch;            /* every thread's */
    size_t state;              /* recurrent state slots: n_state_slots x model_state_floats
                                  (0 in a model without recurrent layers) */
    size_t total;              /* the sum of the six above */
} be_memory;

#endif
