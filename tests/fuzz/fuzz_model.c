/* fuzz_model.c - the model loader on a GGUF file (model.h, model_load).
 *
 * Input: a whole GGUF file. Checked, when model_load accepts it: the config
 * passes model_config_check; every weight view has exactly the element count
 * its shape in the config asks for and lies inside the file mapping (so the
 * forward pass can trust it); the tokenizer inside has the model's vocabulary
 * and encodes and decodes a short text. */
#include "ck_err.h"
#include "fuzz.h"
#include "gguf.h"
#include "model.h"
#include "quant.h"

static void check_tensor(const model *m, const model_tensor *t, uint64_t want) {
    FUZZ_CHECK(t->n == want);
    FUZZ_CHECK(t->data != NULL);
    uint64_t bytes = 0;
    FUZZ_CHECK(quant_row_bytes(t->type, t->n, &bytes) == 0);
    /* the GGUF data section: where every tensor of the file lies */
    const gguf_file *g = m->gguf_;
    FUZZ_CHECK(g && gguf_n_tensors(g) > 0);
    const gguf_tensor *t0 = gguf_tensor_at(g, 0);
    const char *base = (const char *)t0->data - t0->offset, *p = t->data;
    uint64_t span = gguf_file_size(g) - gguf_data_offset(g);
    FUZZ_CHECK(p >= base && (uint64_t)(p - base) <= span && bytes <= span - (uint64_t)(p - base));
    /* first and last byte: a view outside the mapping faults here */
    volatile unsigned char x = ((const unsigned char *)p)[0];
    x ^= ((const unsigned char *)p)[bytes - 1];
    (void)x;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[512];
    int fd = fuzz_memfile(data, size, path, sizeof path);
    if (fd < 0) return 0;
    model *m = NULL;
    int rc = model_load(path, NULL, &m, err, sizeof err);
    close(fd);
    if (rc) {
        FUZZ_CHECK(rc < 0);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        return 0;
    }
    FUZZ_CHECK(m != NULL);
    const model_config *c = &m->cfg;
    char why[256];
    FUZZ_CHECK(model_config_check(c, why, sizeof why) == 0);
    FUZZ_CHECK(c->n_swa >= 0 && c->n_swa <= c->seq_len && c->swa_period >= 0);
    uint64_t D = (uint64_t)c->dim, F = (uint64_t)c->hidden_dim, V = (uint64_t)c->vocab_size;
    uint64_t Q = (uint64_t)c->n_heads * (uint64_t)c->head_dim,
             KV = (uint64_t)c->n_kv_heads * (uint64_t)c->head_dim;
    check_tensor(m, &m->tok_emb, V * D);
    check_tensor(m, &m->out_norm, D);
    check_tensor(m, &m->wcls, V * D);
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        check_tensor(m, &ly->attn_norm, D);
        check_tensor(m, &ly->wq, Q * D);
        check_tensor(m, &ly->wk, KV * D);
        check_tensor(m, &ly->wv, KV * D);
        check_tensor(m, &ly->wo, D * Q);
        check_tensor(m, &ly->ffn_norm, D);
        /* gpt-oss's attention vectors, where the file has them */
        if (ly->bo.n) check_tensor(m, &ly->bo, D);
        if (ly->sinks.n) check_tensor(m, &ly->sinks, (uint64_t)c->n_heads);
        if (!c->n_expert) {
            check_tensor(m, &ly->w1, F * D);
            check_tensor(m, &ly->w2, D * F);
            check_tensor(m, &ly->w3, F * D);
            FUZZ_CHECK(!ly->router.n && !ly->gate_exps.n && !ly->up_exps.n && !ly->down_exps.n);
            continue;
        }
        /* a MoE layer: the router and the experts instead, and each expert's
         * view (the last one's end is the tensor's) inside the file */
        const uint64_t E = (uint64_t)c->n_expert, FE = (uint64_t)c->expert_ffn;
        FUZZ_CHECK(!ly->w1.n && !ly->w2.n && !ly->w3.n);
        FUZZ_CHECK(c->n_expert_used >= 1 && c->n_expert_used <= c->n_expert &&
                   c->n_expert <= MODEL_MAX_EXPERTS);
        check_tensor(m, &ly->router, E * D);
        check_tensor(m, &ly->gate_exps, E * FE * D);
        check_tensor(m, &ly->up_exps, E * FE * D);
        check_tensor(m, &ly->down_exps, E * D * FE);
        /* gpt-oss's router and expert biases, where the file has them */
        if (ly->router_b.n) check_tensor(m, &ly->router_b, E);
        if (ly->gate_exps_b.n) check_tensor(m, &ly->gate_exps_b, E * FE);
        if (ly->up_exps_b.n) check_tensor(m, &ly->up_exps_b, E * FE);
        if (ly->down_exps_b.n) check_tensor(m, &ly->down_exps_b, E * D);
        const model_tensor *x[3] = {&ly->gate_exps, &ly->up_exps, &ly->down_exps};
        for (int i = 0; i < 3; i++) {
            const model_tensor v = model_expert(x[i], c->n_expert, c->n_expert - 1);
            check_tensor(m, &v, FE * D);
        }
    }
    FUZZ_CHECK(m->tok && tok_vocab_size(m->tok) == c->vocab_size);
    FUZZ_CHECK(memchr(m->name, 0, sizeof m->name) && memchr(m->fingerprint, 0, sizeof m->fingerprint));
    int32_t ids[64];
    int n = 0;
    rc = tok_encode(m->tok, "Once upon a time", 16, 1, ids, 64, &n);
    FUZZ_CHECK(rc == 0 || rc == CK_ENOTFOUND || rc == CK_ETOOLONG);
    if (rc == 0)
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(ids[i] >= 0 && ids[i] < c->vocab_size);
            size_t len;
            FUZZ_CHECK(tok_decode(m->tok, i ? ids[i - 1] : -1, ids[i], &len) != NULL);
        }
    (void)model_weight_bytes(m);
    (void)model_n_params(m);
    model_free(m);
    return 0;
}
