/* model_size.c - what a loaded model weighs (model.h): the weight bytes a
 * step reads, the file's bytes, the parameter count, and one expert's view
 * of a 3-D expert tensor. */
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "model.h"
#include "quant.h"

static uint64_t tensor_bytes(const model_tensor *t) {
    uint64_t nb = 0;
    quant_row_bytes(t->type, t->n, &nb);
    return nb;
}

uint64_t model_weight_bytes(const model *m) {
    uint64_t b = tensor_bytes(&m->out_norm) + tensor_bytes(&m->wcls);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(ly, t);
        for (int i = 0; i < MODEL_LAYER_TENSORS; i++) b += tensor_bytes(t[i]);
        const model_tensor *x[MODEL_LAYER_EXTRAS];
        model_layer_extras(ly, x);
        for (int i = 0; i < MODEL_LAYER_EXTRAS; i++) b += tensor_bytes(x[i]);
        const model_tensor *sc[MODEL_LAYER_CONV];
        model_layer_conv(ly, sc);
        for (int i = 0; i < MODEL_LAYER_CONV; i++) b += tensor_bytes(sc[i]);
        /* a token reads the router and only its n_expert_used experts */
        b += tensor_bytes(&ly->router) + tensor_bytes(&ly->router_b);
        if (m->cfg.n_expert)
            b += (tensor_bytes(&ly->gate_exps) + tensor_bytes(&ly->up_exps) + tensor_bytes(&ly->down_exps) +
                  tensor_bytes(&ly->gate_exps_b) + tensor_bytes(&ly->up_exps_b) +
                  tensor_bytes(&ly->down_exps_b)) /
                 (uint64_t)m->cfg.n_expert * (uint64_t)m->cfg.n_expert_used;
    }
    /* The embedding is a gather of one row per token, not a full read. */
    return b + tensor_bytes(&m->tok_emb) / (uint64_t)m->cfg.vocab_size;
}

size_t model_file_bytes(const model *m) {
    return m->format == MODEL_FMT_GGUF ? (size_t)gguf_file_size(m->gguf_) : m->map_len_;
}

uint64_t model_n_params(const model *m) {
    uint64_t n = m->tok_emb.n + m->out_norm.n + (m->tied ? 0 : m->wcls.n);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int i = 0; i < MODEL_LAYER_TENSORS; i++) n += t[i]->n;
        const model_tensor *x[MODEL_LAYER_EXTRAS];
        model_layer_extras(&m->layers[l], x);
        for (int i = 0; i < MODEL_LAYER_EXTRAS; i++) n += x[i]->n;
        const model_tensor *e[MODEL_LAYER_MOE];
        model_layer_moe(&m->layers[l], e);
        for (int i = 0; i < MODEL_LAYER_MOE; i++) n += e[i]->n;
        const model_tensor *sc[MODEL_LAYER_CONV];
        model_layer_conv(&m->layers[l], sc);
        for (int i = 0; i < MODEL_LAYER_CONV; i++) n += sc[i]->n;
    }
    return n + m->rope_freqs.n;
}

model_tensor model_expert(const model_tensor *t, int n_expert, int e) {
    model_tensor v = {t->type, 0, NULL};
    uint64_t nb = 0;
    if (n_expert <= 0 || e < 0 || e >= n_expert || !t->data) return v;
    v.n = t->n / (uint64_t)n_expert;
    if (quant_row_bytes(t->type, v.n, &nb)) return (model_tensor){t->type, 0, NULL};
    v.data = (const char *)t->data + (size_t)nb * (size_t)e;
    return v;
}
