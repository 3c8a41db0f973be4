/* test_arch_run.h - the CPU backend's side of test_arch.c and
 * test_arch_gemma4.c: a model's logits over NTOK tokens, one a call or in
 * one prefill batch (the memory plan checked against the backend), and
 * the normalised distance to a reference. */
#ifndef CONFKV_TEST_ARCH_RUN_H
#define CONFKV_TEST_ARCH_RUN_H

#include <math.h>
#include <stdio.h>

#include "backend.h"
#include "kv.h"
#include "model.h"

enum { NTOK = 40, BS = 16, NKV = 8 };

/* The CPU backend's logits (NTOK, V): one token a call (single = 1) or the
 * whole sequence in one prefill batch. */
static inline int cpu_logits(const model *m, const int32_t *tok, int single, float *out) {
    char err[256];
    backend *b = NULL;
    be_options o = {.max_batch_tokens = NTOK,
                    .n_kv_blocks = NKV,
                    .block_size = BS,
                    .n_threads = 2,
                    .max_ctx = m->cfg.seq_len < 256 ? m->cfg.seq_len : 256};
    if (be_cpu_new(m, &o, &b, err, sizeof err)) {
        fprintf(stderr, "  %s\n", err);
        return -1;
    }
    kv_pool pool;
    kv_seq q;
    int rc = -1, V = m->cfg.vocab_size;
    /* the memory plan counts the biases and head norms too */
    be_memory plan;
    if (be_cpu_plan(m, &o, &plan) || plan.total != b->ops->memory_bytes(b)) {
        fprintf(stderr, "  plan %zu bytes, backend %zu\n", plan.total, b->ops->memory_bytes(b));
        goto out_b;
    }
    if (kv_pool_init(&pool, NKV, BS)) goto out_b;
    if (kv_seq_init(&q, 0, o.max_ctx, BS)) goto out_p;
    rc = 0;
    if (single) {
        for (int p = 0; p < NTOK && !rc; p++) {
            int32_t t = tok[p], pos = p, six = 0, row = 0;
            if ((rc = kv_seq_reserve(&q, &pool, 1))) break;
            be_seq_view v = {.blocks = q.hot, .n_blocks = q.n_blocks};
            be_batch bt = {1, &t, &pos, &six, &row, 1, &v, 1};
            rc = b->ops->forward(b, &bt, out + (size_t)p * V);
            kv_seq_commit(&q, 1);
        }
    } else {
        int32_t pos[NTOK], six[NTOK] = {0}, row[NTOK];
        for (int p = 0; p < NTOK; p++) pos[p] = row[p] = p;
        if (!(rc = kv_seq_reserve(&q, &pool, NTOK))) {
            be_seq_view v = {.blocks = q.hot, .n_blocks = q.n_blocks};
            be_batch bt = {NTOK, tok, pos, six, row, 1, &v, NTOK};
            rc = b->ops->forward(b, &bt, out);
            kv_seq_commit(&q, NTOK);
        }
    }
    kv_seq_reset(&q, &pool);
    kv_seq_free(&q);
out_p:
    kv_pool_free(&pool);
out_b:
    be_free(b);
    return rc ? -1 : 0;
}

/* max over positions of max |got - ref| / max |ref|. */
static inline double worst(const float *got, const double *ref, int V) {
    double w = 0;
    for (int p = 0; p < NTOK; p++) {
        double d = 0, mx = 0;
        for (int i = 0; i < V; i++) {
            d = fmax(d, fabs(got[(size_t)p * V + i] - ref[(size_t)p * V + i]));
            mx = fmax(mx, fabs(ref[(size_t)p * V + i]));
        }
        double e = d / (mx > 0 ? mx : 1);
        w = e > w || isnan(e) ? e : w;
    }
    return w;
}

#define BOUND 2e-5 /* f32 backend against the double reference */

#endif
