/* eng_memory.c - the engine's configuration defaults and its memory plan
 * (engine.h: eng_config_default, eng_fit_context, eng_memory_plan): what a
 * load will hold, computed before anything large is allocated. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "ck_err.h"
#include "eng_int.h"
#include "kvq.h"

/* The defaults, written once: eng_new fills a zero field from here, and the
 * service's configuration starts from it (svc_config.c). */
void eng_config_default(eng_config *c) {
    memset(c, 0, sizeof *c);
    c->backend = "auto";
    c->threads = 0;
    c->block_size = 0;
    c->kv_budget_bytes = (size_t)64 << 20;
    c->warm_budget_bytes = 0;
    c->max_running = 64;
    c->max_batch_tokens = 512;
    c->max_queue = 4096;
    c->aging_ms = 1000;
    kvpol_parse("conf", &c->policy, NULL, 0); /* the default policy, by its name */
}

/* ========================================================= memory plan */

/* Defaults filled in, as eng_new uses the config: eng_config_default's
 * values, the one place they are written. */
int eng__config_resolve(eng_config *c, char *err, size_t errlen) {
    eng_config d;
    eng_config_default(&d);
    if (!c->backend) c->backend = d.backend;
    if (!c->kv_budget_bytes) c->kv_budget_bytes = d.kv_budget_bytes;
    if (c->max_running <= 0) c->max_running = d.max_running;
    if (c->max_batch_tokens <= 0) c->max_batch_tokens = d.max_batch_tokens;
    if (c->max_queue <= 0) c->max_queue = d.max_queue;
    if (c->aging_ms < 0 || c->block_size < 0 || c->threads < 0 || c->max_context < 0) {
        snprintf(err, errlen, "negative aging_ms, block_size, threads or max_context");
        return CK_EINVAL;
    }
    if (c->max_memory_mb > SIZE_MAX >> 20) {
        snprintf(err, errlen, "max_memory_mb %zu is out of range", c->max_memory_mb);
        return CK_EINVAL;
    }
    /* Every running sequence must be able to put its decode token in a step. */
    if (c->max_running > c->max_batch_tokens) c->max_running = c->max_batch_tokens;
    return CK_OK;
}

static void human(size_t b, char *out, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0)
        snprintf(out, n, "%zu B", b);
    else
        snprintf(out, n, v >= 100 ? "%.0f %s" : "%.1f %s", v, unit[u]);
}

int eng_memory_describe(const eng_memory *p, char *buf, size_t len) {
    char t[16], w[16], kv[16], kv8[16], wa[16], pf[16], act[16], h[16], sc[16], spt[16], f[16];
    human(p->total, t, sizeof t);
    human(p->be.weights, w, sizeof w);
    human(p->be.kv, kv, sizeof kv);
    human(p->be.kv8, kv8, sizeof kv8);
    human(p->warm, wa, sizeof wa);
    human(p->prefix, pf, sizeof pf);
    human(p->be.activations, act, sizeof act);
    human(p->host, h, sizeof h);
    human(p->be.scratch, sc, sizeof sc);
    human(p->be.scratch_per_thread, spt, sizeof spt);
    human(p->file_bytes, f, sizeof f);
    char st[64] = "";
    if (p->be.state) {
        char s[32];
        human(p->be.state, s, sizeof s);
        snprintf(st, sizeof st, ", recurrent state %s", s);
    }
    return snprintf(buf, len,
                    "planned %s at context %d (weights %s, KV %s, int8 KV %s, warm %s, prefix %s, "
                    "batch %s, engine %s, scratch %s = %d x %s%s; file %s mapped)",
                    t, p->max_ctx, w, kv, kv8, wa, pf, act, h, sc, p->be.n_threads, spt, st, f);
}

int eng_fit_context(const model *m, int max_context, size_t max_memory_mb, int block_size, eng_plan_cb plan,
                    void *ud, eng_memory *p, char *err, size_t errlen) {
    const int seq = m->cfg.seq_len, bs = block_size > 0 ? block_size : 1;
    int ctx = max_context > 0 ? (max_context < seq ? max_context : seq) : be_default_ctx(m);
    int rc = plan(ud, ctx, p);
    if (rc) {
        snprintf(err, errlen, "planning memory for context %d: %s", ctx, ck_strerror(rc));
        return rc;
    }
    p->limit_mb = max_memory_mb;
    if (!max_memory_mb || max_memory_mb > SIZE_MAX >> 20) return CK_OK;
    const size_t limit = max_memory_mb << 20;
    if (p->total <= limit) return CK_OK;
    if (max_context <= 0 && ctx > bs) {
        /* The default yields: the largest whole number of blocks below it
         * that fits (every size grows with the context, so bisect). */
        int lo = 1, hi = (ctx - 1) / bs, found = 0;
        eng_memory q, best;
        while (lo <= hi) {
            int mid = lo + (hi - lo) / 2;
            if (!plan(ud, mid * bs, &q) && q.total <= limit) {
                best = q;
                found = 1;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        if (found) {
            *p = best;
            p->limit_mb = max_memory_mb;
            return CK_OK;
        }
        if ((rc = plan(ud, bs, p))) return rc; /* the least it could plan, for the message */
        p->limit_mb = max_memory_mb;
    }
    char d[400];
    eng_memory_describe(p, d, sizeof d);
    snprintf(err, errlen, "%s exceeds max_memory_mb=%zu%s", d, max_memory_mb,
             max_context > 0 ? " (lower max_context)" : "");
    return CK_ENOSPACE;
}

static int eng_plan_at(void *ud_, int ctx, eng_memory *p) {
    const eng_plan_ud *u = ud_;
    const eng_config *c = u->c;
    const model_config *mc = &u->m->cfg;
    memset(p, 0, sizeof *p);
    be_options bo = {.max_batch_tokens = c->max_batch_tokens,
                     .n_kv_blocks = (int)u->n_blocks,
                     .block_size = u->bs,
                     .n_threads = c->threads,
                     .max_ctx = ctx,
                     .n_kv8_blocks = (int)u->n_blocks,
                     .n_state_slots = c->max_running};
    int rc = be_cpu_plan(u->m, &bo, &p->be);
    if (rc) return rc;
    /* tier.c and pfx.c: a slab of whole slots, at least one, capped */
    kvq_shape shape = {mc->n_layers, u->bs, model_kv_dim(mc)};
    size_t warm_budget = c->warm_budget_bytes ? c->warm_budget_bytes : 4 * u->n_blocks * u->block_bytes;
    size_t slot = kvq_f32_bytes(&shape), n = warm_budget / slot;
    n = n > (1u << 30) ? 1u << 30 : n ? n : 1;
    p->warm = n * slot;
    /* the int8 tier: built whatever the default policy (kvm.c) */
    slot = kvq_block_bytes(&shape);
    n = warm_budget / slot;
    n = n > (1u << 30) ? 1u << 30 : n ? n : 1;
    p->warm += n * slot;
    if (!c->prefix_cache_off && !model_state_floats(mc)) { /* none for a hybrid model (eng_new) */
        size_t budget = c->prefix_cache_bytes ? c->prefix_cache_bytes : u->n_blocks * u->block_bytes;
        n = budget / u->block_bytes;
        n = n > (1u << 24) ? 1u << 24 : n ? n : 1;
        p->prefix = n * u->block_bytes;
    }
    /* eng_new's buffers: logits, the step arrays, the prompt scratch, the KV
     * manager's blocks in transit and its movers' batches, and the two
     * pools' bookkeeping (three int32 a block each) */
    const size_t R = (size_t)c->max_running, T = (size_t)c->max_batch_tokens;
    p->host = R * (size_t)mc->vocab_size * sizeof(float) + 4 * T * sizeof(int32_t) +
              (size_t)ctx * sizeof(int32_t) +
              kvm_host_bytes(u->block_bytes, kvq_block_bytes(&shape), ENG_STAGING_BYTES) +
              2 * 3 * u->n_blocks * sizeof(int32_t);
    p->total = p->be.total + p->warm + p->prefix + p->host;
    p->max_ctx = ctx;
    p->file_bytes = model_file_bytes(u->m);
    return CK_OK;
}

/* The plan, and the pool geometry eng_new builds with. */
int eng__plan(const eng_config *c, const model *m, eng_memory *p, eng_plan_ud *u, char *err, size_t errlen) {
    const model_config *mc = &m->cfg;
    u->c = c;
    u->m = m;
    u->bs = c->block_size > 0 ? c->block_size : kv_default_block_size(mc->seq_len);
    u->block_bytes = (size_t)mc->n_layers * 2 * (size_t)u->bs * (size_t)model_kv_dim(mc) * sizeof(float);
    u->n_blocks = c->kv_budget_bytes / u->block_bytes;
    if (u->n_blocks < 1 || u->n_blocks > (1u << 30)) {
        snprintf(err, errlen, "a KV budget of %zu bytes holds %zu blocks of %zu bytes", c->kv_budget_bytes,
                 u->n_blocks, u->block_bytes);
        return CK_EINVAL;
    }
    return eng_fit_context(m, c->max_context, c->max_memory_mb, u->bs, eng_plan_at, u, p, err, errlen);
}

int eng_memory_plan(const eng_config *cfg, const model *m, eng_memory *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    eng_config c = *cfg;
    int rc = eng__config_resolve(&c, err, errlen);
    if (rc) return rc;
    eng_plan_ud u;
    return eng__plan(&c, m, p, &u, err, errlen);
}
