/* backend_cuda_build.cu - the CUDA backend's creation and destruction
 * (backend_cuda_int.h): the device, the weights uploaded once (f32, f16, or
 * quantized segments in their file bytes), every buffer a step uses, and
 * be_cuda_available / be_cuda_new. */
#include "backend_cuda_int.h"

/* ------------------------------------------------------------ destruction */

void cu_free_dev(void *p) {
    if (p) (void)cudaFree(p);
}

static void cu_mat_free(cu_mat *mt) {
    if (mt->owned)
        for (int s = 0; s < mt->nseg; s++) cu_free_dev(mt->seg[s].w);
    mt->nseg = 0;
}

void cu_destroy(backend *b) {
    cuda_backend *cb = (cuda_backend *)b;
    if (!cb) return;
    (void)cudaSetDevice(cb->dev);
    if (cb->st) (void)cudaStreamSynchronize(cb->st);
    if (cb->cst) (void)cudaStreamSynchronize(cb->cst);
    cu_mat_free(&cb->wcls);
    cu_free_dev(cb->emb);
    cu_free_dev(cb->deq);
    cu_free_dev(cb->out_norm);
    if (cb->layers) {
        for (int l = 0; l < b->m->cfg.n_layers; l++) {
            cu_layer *w = &cb->layers[l];
            cu_free_dev(w->attn_norm);
            cu_free_dev(w->ffn_norm);
            cu_mat_free(&w->wqkv);
            cu_free_dev(w->bqkv);
            cu_free_dev(w->q_norm);
            cu_free_dev(w->k_norm);
            cu_mat_free(&w->wo);
            cu_mat_free(&w->w13);
            cu_mat_free(&w->w2);
        }
        free(cb->layers);
    }
    cu_free_dev(cb->inv_freq);
    cu_free_dev(cb->kv);
    cu_free_dev(cb->kv8);
    cu_free_dev(cb->x);
    cu_free_dev(cb->xb);
    cu_free_dev(cb->att_out);
    cu_free_dev(cb->h);
    cu_free_dev(cb->xh);
    cu_free_dev(cb->qkv);
    cu_free_dev(cb->h13);
    cu_free_dev(cb->logits);
    cu_free_dev(cb->mass);
    cu_free_dev(cb->conf);
    cu_free_dev(cb->ints);
    if (cb->h_ints) (void)cudaFreeHost(cb->h_ints);
    if (cb->h_mass) (void)cudaFreeHost(cb->h_mass);
    if (cb->h_conf) (void)cudaFreeHost(cb->h_conf);
    if (cb->blas) (void)cublasDestroy(cb->blas);
    cu_free_dev(cb->blas_ws);
    if (cb->st) (void)cudaStreamDestroy(cb->st);
    if (cb->cst) (void)cudaStreamDestroy(cb->cst);
    (void)cudaGetLastError();
    free(cb->hash_key);
    free(cb->hash_val);
    free(cb->cs_view);
    free(cb->cs_nblk);
    free(cb);
}

/* ------------------------------------------------------------ construction */

/* cudaMalloc that counts; zero-sized requests still get a valid pointer. */
cudaError_t cu_malloc(cuda_backend *cb, void **p, size_t bytes) {
    if (!bytes) bytes = 256;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess)
        cb->bytes += bytes;
    else
        *p = NULL;
    return e;
}

/* Bytes of n elements of a type we upload (f32, f16, bf16, or a quantized
 * type of ck_cuda_qtype_shape with n a multiple of its block). */
static uint64_t cu_raw_bytes(int type, uint64_t n) {
    int block = 1, bytes = 0;
    switch (type) {
    case QUANT_F32: return n * 4;
    case QUANT_F16:
    case QUANT_BF16: return n * 2;
    default: (void)ck_cuda_qtype_shape(type, &block, &bytes); return n / (uint64_t)block * (uint64_t)bytes;
    }
}

/* Upload tensor t (n elements) into dst, as f16 (dst_f16) or f32, through
 * the staging buffer, in chunks of CU_STAGING_ELEMS elements. */
static int cu_upload(cuda_backend *cb, void *staging, void *dst, int dst_f16, const model_tensor *t,
                     uint64_t n, const char *name, char *err, size_t errlen) {
    char what[96];
    int block = 1;
    if (t->type != QUANT_F32 && t->type != QUANT_F16 && t->type != QUANT_BF16 &&
        !ck_cuda_qtype_shape(t->type, &block, NULL)) {
        snprintf(what, sizeof what, "tensor %s", name);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, what, "weight type not supported");
    }
    if (t->n != n || !t->data || n % (uint64_t)block) {
        snprintf(what, sizeof what, "tensor %s", name);
        return cu_seterr(err, errlen, CK_EFORMAT, what, "unexpected element count");
    }
    const size_t esize = dst_f16 ? 2 : 4;
    snprintf(what, sizeof what, "uploading %s", name);
    for (uint64_t off = 0; off < n; off += CU_STAGING_ELEMS) {
        const uint64_t cnt = n - off < CU_STAGING_ELEMS ? n - off : CU_STAGING_ELEMS;
        const char *src = (const char *)t->data + cu_raw_bytes(t->type, off);
        CU_NEW(cudaMemcpyAsync(staging, src, cu_raw_bytes(t->type, cnt), cudaMemcpyHostToDevice, cb->st),
               what);
        CU_NEW(ck_cuda_convert(staging, t->type, cnt, (char *)dst + off * esize, dst_f16, cb->st), what);
    }
    return CK_OK;
}

/* 1 if the backend can hold a tensor of `type`: f32, f16, bf16, or a
 * quantized type with CUDA kernels (ck_cuda_qtype_shape). */
static int cu_type_ok(int type) {
    return type == QUANT_F32 || type == QUANT_F16 || type == QUANT_BF16 ||
           ck_cuda_qtype_shape(type, NULL, NULL);
}

/* Every tensor the backend would upload has a type it computes on; else
 * CK_EUNSUPPORTED naming the tensor and the type ("tensor blk.0.attn_q:
 * weight type mxfp4 has no CUDA kernel"). Checked before the device is
 * touched, so a model the CPU reads but CUDA does not (MXFP4's experts) is
 * refused up front, on any machine, never computed wrong. */
static int cu_check_types(const model *m, char *err, size_t errlen) {
    static const char *const lnames[MODEL_LAYER_TENSORS] = {"attn_norm", "attn_q",      "attn_k",
                                                            "attn_v",    "attn_output", "ffn_norm",
                                                            "ffn_gate",  "ffn_down",    "ffn_up"};
    static const char *const xnames[MODEL_LAYER_EXTRAS] = {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                                                           "attn_q_norm", "attn_k_norm", "attn_output.bias",
                                                           "attn_sinks"};
    char what[96], why[96];
    const model_tensor *bad = NULL;
    if (!cu_type_ok(m->tok_emb.type)) {
        bad = &m->tok_emb;
        snprintf(what, sizeof what, "tensor token_embd");
    } else if (!cu_type_ok(m->wcls.type)) {
        bad = &m->wcls;
        snprintf(what, sizeof what, "tensor output");
    }
    for (int l = 0; !bad && l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS], *x[MODEL_LAYER_EXTRAS];
        model_layer_list(&m->layers[l], t);
        model_layer_extras(&m->layers[l], x);
        for (int k = 0; !bad && k < MODEL_LAYER_TENSORS; k++)
            if (!cu_type_ok(t[k]->type)) {
                bad = t[k];
                snprintf(what, sizeof what, "tensor blk.%d.%s", l, lnames[k]);
            }
        for (int k = 0; !bad && k < MODEL_LAYER_EXTRAS; k++)
            if (x[k]->n && !cu_type_ok(x[k]->type)) {
                bad = x[k];
                snprintf(what, sizeof what, "tensor blk.%d.%s", l, xnames[k]);
            }
    }
    if (!bad) return CK_OK;
    const char *tn = quant_ggml_type_name(bad->type);
    if (tn)
        snprintf(why, sizeof why, "weight type %s has no CUDA kernel", tn);
    else
        snprintf(why, sizeof why, "weight type %d has no CUDA kernel", bad->type);
    return cu_seterr(err, errlen, CK_EUNSUPPORTED, what, why);
}

/* The device type of a tensor of `type`: kept as it is when quantized
 * (unless CONFKV_CUDA_QUANT=expand), else the backend's float type. */
static int cu_dev_type(const cuda_backend *cb, int type) {
    return !cb->qexpand && ck_cuda_qtype_shape(type, NULL, NULL) ? type : CU_WFLOAT;
}

/* One tensor of a (possibly fused) matrix: its rows, in matrix order. */
typedef struct cu_part {
    const char *name;
    const model_tensor *t;
    int rows;
} cu_part;

/* Fill mat (K columns) from the n parts p[i], in that order: consecutive
 * tensors of one device type share a segment (one allocation); float
 * tensors are converted (cu_upload), quantized ones copied byte for byte.
 * *any_q is set when a segment is quantized. On error the segments made so
 * far stay in mat for cu_mat_free. */
static int cu_upload_mat(cuda_backend *cb, void *staging, cu_mat *mat, const cu_part *p, int n, int K,
                         int *any_q, char *err, size_t errlen) {
    char what[96];
    mat->K = K;
    mat->owned = 1;
    mat->nseg = 0;
    for (int i = 0; i < n;) {
        const int dt = cu_dev_type(cb, p[i].t->type);
        int j = i, nr = 0;
        while (j < n && cu_dev_type(cb, p[j].t->type) == dt) nr += p[j++].rows;
        size_t rb = (size_t)K * (cb->wf16 ? 2 : 4); /* bytes a row on the device */
        if (dt != CU_WFLOAT) {
            int block = 0, bytes = 0;
            (void)ck_cuda_qtype_shape(dt, &block, &bytes);
            if (K % block || (size_t)K > CU_DEQ_ELEMS) {
                snprintf(what, sizeof what, "tensor %s", p[i].name);
                return cu_seterr(err, errlen, CK_EFORMAT, what,
                                 "row length not a multiple of its type's block (or over 2^24)");
            }
            rb = (size_t)(K / block) * (size_t)bytes;
            *any_q = 1;
        }
        cu_seg *g = &mat->seg[mat->nseg];
        g->type = dt;
        g->rows = nr;
        snprintf(what, sizeof what, "allocating %s", p[i].name);
        CU_NEW(cu_malloc(cb, &g->w, (size_t)nr * rb), what);
        mat->nseg++;
        for (int k = i, r = 0; k < j; r += p[k].rows, k++) {
            char *dst = (char *)g->w + (size_t)r * rb;
            const uint64_t ne = (uint64_t)p[k].rows * (uint64_t)K;
            if (dt == CU_WFLOAT) {
                int rc = cu_upload(cb, staging, dst, cb->wf16, p[k].t, ne, p[k].name, err, errlen);
                if (rc) return rc;
                continue;
            }
            if (p[k].t->n != ne || !p[k].t->data) {
                snprintf(what, sizeof what, "tensor %s", p[k].name);
                return cu_seterr(err, errlen, CK_EFORMAT, what, "unexpected element count");
            }
            snprintf(what, sizeof what, "uploading %s", p[k].name);
            CU_NEW(cudaMemcpy(dst, p[k].t->data, (size_t)p[k].rows * rb, cudaMemcpyHostToDevice), what);
        }
        i = j;
    }
    return CK_OK;
}

static int cu_model_is_f32(const model *m) {
    if (m->tok_emb.type != QUANT_F32 || m->wcls.type != QUANT_F32) return 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const model_tensor *t[MODEL_LAYER_TENSORS];
        model_layer_list(&m->layers[l], t);
        for (int k = 0; k < MODEL_LAYER_TENSORS; k++)
            if (t[k]->type != QUANT_F32) return 0;
    }
    return 1;
}

int cu_init_device(cuda_backend *cb, char *err, size_t errlen) {
    cudaDeviceProp prop;
    CU_NEW(cudaGetDevice(&cb->dev), "cudaGetDevice");
    CU_NEW(cudaGetDeviceProperties(&prop, cb->dev), "cudaGetDeviceProperties");
    if (prop.major < 9) {
        char why[256];
        snprintf(why, sizeof why, "%.100s has compute capability %d.%d; the kernels need 9.0+", prop.name,
                 prop.major, prop.minor);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, "device", why);
    }
    CU_NEW(cudaStreamCreateWithFlags(&cb->st, cudaStreamNonBlocking), "creating the compute stream");
    CU_NEW(cudaStreamCreateWithFlags(&cb->cst, cudaStreamNonBlocking), "creating the copy stream");
    CU_NEW_BLAS(cublasCreate(&cb->blas), "cublasCreate");
    /* Stream first: cublasSetStream resets the workspace to cuBLAS's own pool. */
    CU_NEW_BLAS(cublasSetStream(cb->blas, cb->st), "cublasSetStream");
    CU_NEW(cu_malloc(cb, &cb->blas_ws, CU_WORKSPACE_BYTES), "allocating the cuBLAS workspace");
    CU_NEW_BLAS(cublasSetWorkspace(cb->blas, cb->blas_ws, CU_WORKSPACE_BYTES), "cublasSetWorkspace");
    /* No TF32: CUBLAS_COMPUTE_32F products stay in full f32. */
    CU_NEW_BLAS(cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    return CK_OK;
}

static int cu_init_weights(cuda_backend *cb, char *err, size_t errlen) {
    const model *m = cb->base.m;
    const model_config *c = &m->cfg;
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t QKV = (size_t)cb->qkv_dim, QD = (size_t)cb->q_dim, KVD = (size_t)cb->kv_dim;
    const size_t ws = cb->wf16 ? 2 : 4;
    void *staging = NULL;
    int rc = CK_OK;
    cudaError_t e = cu_malloc(cb, &staging, CU_STAGING_ELEMS * 4);
    if (e != cudaSuccess)
        return cu_seterr(err, errlen, CK_EBACKEND, "allocating the upload buffer", cudaGetErrorString(e));
#define UP(dst, f16, t, n, name) \
    if ((rc = cu_upload(cb, staging, dst, f16, t, n, name, err, errlen))) goto out
    int any_q = 0;
#define UPM(mat, K, parts)                                                                                \
    if ((rc = cu_upload_mat(cb, staging, &(mat), parts, (int)(sizeof parts / sizeof parts[0]), K, &any_q, \
                            err, errlen)))                                                                \
    goto out
#define ALLOC(p, bytes, what)                                                  \
    if ((e = cu_malloc(cb, (void **)&(p), bytes)) != cudaSuccess) {            \
        rc = cu_seterr(err, errlen, CK_EBACKEND, what, cudaGetErrorString(e)); \
        goto out;                                                              \
    }
    ALLOC(cb->emb, V * D * ws, "allocating the embedding");
    ALLOC(cb->out_norm, D * 4, "allocating the output norm");
    UP(cb->emb, cb->wf16, &m->tok_emb, V * D, "token_embd");
    UP(cb->out_norm, 0, &m->out_norm, D, "output_norm");
    if (m->tied) {
        cb->wcls.nseg = 1;
        cb->wcls.K = (int)D;
        cb->wcls.owned = 0;
        cb->wcls.seg[0].w = cb->emb;
        cb->wcls.seg[0].type = CU_WFLOAT;
        cb->wcls.seg[0].rows = (int)V;
    } else {
        const cu_part cls[] = {{"output", &m->wcls, (int)V}};
        UPM(cb->wcls, (int)D, cls);
    }
    cb->layers = (cu_layer *)calloc((size_t)c->n_layers, sizeof *cb->layers);
    if (!cb->layers) {
        rc = cu_seterr(err, errlen, CK_ENOMEM, "layer table", "out of host memory");
        goto out;
    }
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ml = &m->layers[l];
        cu_layer *w = &cb->layers[l];
        ALLOC(w->attn_norm, D * 4, "allocating layer weights");
        ALLOC(w->ffn_norm, D * 4, "allocating layer weights");
        UP(w->attn_norm, 0, &ml->attn_norm, D, "attn_norm");
        UP(w->ffn_norm, 0, &ml->ffn_norm, D, "ffn_norm");
        const cu_part qkv[] = {
            {"attn_q", &ml->wq, (int)QD}, {"attn_k", &ml->wk, (int)KVD}, {"attn_v", &ml->wv, (int)KVD}};
        const cu_part wo[] = {{"attn_output", &ml->wo, (int)D}};
        const cu_part w13[] = {{"ffn_gate", &ml->w1, (int)F}, {"ffn_up", &ml->w3, (int)F}};
        const cu_part w2[] = {{"ffn_down", &ml->w2, (int)D}};
        UPM(w->wqkv, (int)D, qkv);
        UPM(w->wo, (int)QD, wo);
        UPM(w->w13, (int)D, w13);
        UPM(w->w2, (int)F, w2);
        if (ml->bq.n || ml->bk.n || ml->bv.n) {
            ALLOC(w->bqkv, QKV * 4, "allocating layer biases");
            if ((e = cudaMemset(w->bqkv, 0, QKV * 4)) != cudaSuccess) {
                rc = cu_seterr(err, errlen, CK_EBACKEND, "clearing layer biases", cudaGetErrorString(e));
                goto out;
            }
            if (ml->bq.n) UP(w->bqkv, 0, &ml->bq, QD, "attn_q.bias");
            if (ml->bk.n) UP(w->bqkv + QD, 0, &ml->bk, KVD, "attn_k.bias");
            if (ml->bv.n) UP(w->bqkv + QD + KVD, 0, &ml->bv, KVD, "attn_v.bias");
        }
        if (ml->q_norm.n) {
            ALLOC(w->q_norm, (size_t)c->head_dim * 4, "allocating layer norms");
            UP(w->q_norm, 0, &ml->q_norm, (size_t)c->head_dim, "attn_q_norm");
        }
        if (ml->k_norm.n) {
            ALLOC(w->k_norm, (size_t)c->head_dim * 4, "allocating layer norms");
            UP(w->k_norm, 0, &ml->k_norm, (size_t)c->head_dim, "attn_k_norm");
        }
    }
    if (any_q) ALLOC(cb->deq, CU_DEQ_ELEMS * ws, "allocating the dequantization scratch");
#undef UP
#undef UPM
#undef ALLOC
out:
    /* The staging buffer is reused chunk after chunk: wait before freeing. */
    e = cudaStreamSynchronize(cb->st);
    if (!rc && e != cudaSuccess)
        rc = cu_seterr(err, errlen, CK_EBACKEND, "uploading weights", cudaGetErrorString(e));
    (void)cudaFree(staging);
    cb->bytes -= CU_STAGING_ELEMS * 4;
    return rc;
}

static int cu_init_buffers(cuda_backend *cb, char *err, size_t errlen) {
    const backend *b = &cb->base;
    const model_config *c = &b->m->cfg;
    const size_t D = (size_t)c->dim, F = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    const size_t T = (size_t)b->opt.max_batch_tokens, tbl = T * (size_t)cb->tbl_cap;
    const int hd = c->head_dim;

    float *inv = (float *)malloc((size_t)(hd / 2 ? hd / 2 : 1) * sizeof(float));
    if (!inv) return cu_seterr(err, errlen, CK_ENOMEM, "RoPE table", "out of host memory");
    if (model_rope_freqs(b->m, inv, &cb->rope_mscale)) {
        free(inv);
        return cu_seterr(err, errlen, CK_EFORMAT, "RoPE table", "rope_freqs.weight unreadable");
    }
    cudaError_t e = cu_malloc(cb, (void **)&cb->inv_freq, (size_t)(hd / 2) * sizeof(float));
    if (e == cudaSuccess)
        e = cudaMemcpy(cb->inv_freq, inv, (size_t)(hd / 2) * sizeof(float), cudaMemcpyHostToDevice);
    free(inv);
    CU_NEW(e, "uploading the RoPE table");

    const size_t kv_bytes = (size_t)b->opt.n_kv_blocks * b->kv_block_floats * sizeof(float);
    CU_NEW(cu_malloc(cb, (void **)&cb->kv, kv_bytes), "allocating the KV pool");
    /* zeroed so that unused KV is finite, as on the CPU */
    CU_NEW(cudaMemset(cb->kv, 0, kv_bytes), "clearing the KV pool");
    if (b->opt.n_kv8_blocks > 0) {
        const size_t kv8_bytes = (size_t)b->opt.n_kv8_blocks * b->kv8_block_bytes;
        CU_NEW(cu_malloc(cb, (void **)&cb->kv8, kv8_bytes), "allocating the int8 KV pool");
        CU_NEW(cudaMemset(cb->kv8, 0, kv8_bytes), "clearing the int8 KV pool");
    }

    CU_NEW(cu_malloc(cb, (void **)&cb->x, T * D * 4), "allocating activations");
    if (cb->wf16) {
        size_t w = D > F ? D : F;
        if ((size_t)cb->q_dim > w) w = (size_t)cb->q_dim;
        CU_NEW(cu_malloc(cb, (void **)&cb->xh, T * w * 2), "allocating activations");
    } else {
        CU_NEW(cu_malloc(cb, (void **)&cb->xb, T * D * 4), "allocating activations");
        CU_NEW(cu_malloc(cb, (void **)&cb->att_out, T * (size_t)cb->q_dim * 4), "allocating activations");
        CU_NEW(cu_malloc(cb, (void **)&cb->h, T * F * 4), "allocating activations");
    }
    CU_NEW(cu_malloc(cb, (void **)&cb->qkv, T * (size_t)cb->qkv_dim * 4), "allocating activations");
    CU_NEW(cu_malloc(cb, (void **)&cb->h13, T * 2 * F * 4), "allocating activations");
    CU_NEW(cu_malloc(cb, (void **)&cb->logits, T * V * 4), "allocating the logits");
    CU_NEW(cu_malloc(cb, (void **)&cb->mass, tbl * 4), "allocating the mass buffer");
    CU_NEW(cu_malloc(cb, (void **)&cb->conf, T * sizeof(be_cuda_conf)), "allocating the confidence buffer");
    const size_t n_ints = 5 * T + tbl;
    CU_NEW(cu_malloc(cb, (void **)&cb->ints, n_ints * 4), "allocating the batch arrays");
    CU_NEW(cudaHostAlloc((void **)&cb->h_ints, n_ints * 4, cudaHostAllocDefault),
           "allocating pinned batch arrays");
    CU_NEW(cudaHostAlloc((void **)&cb->h_mass, tbl * 4, cudaHostAllocDefault),
           "allocating the pinned mass buffer");
    CU_NEW(cudaHostAlloc((void **)&cb->h_conf, T * sizeof(be_cuda_conf), cudaHostAllocDefault),
           "allocating the pinned confidence buffer");
    memset(cb->h_ints, 0, n_ints * 4);

    cb->hash_cap = 1;
    while ((size_t)cb->hash_cap < 2 * T) cb->hash_cap <<= 1;
    cb->hash_key = (int32_t *)malloc((size_t)cb->hash_cap * sizeof(int32_t));
    cb->hash_val = (int32_t *)malloc((size_t)cb->hash_cap * sizeof(int32_t));
    cb->cs_view = (int32_t *)malloc(T * sizeof(int32_t));
    cb->cs_nblk = (int32_t *)malloc(T * sizeof(int32_t));
    if (!cb->hash_key || !cb->hash_val || !cb->cs_view || !cb->cs_nblk)
        return cu_seterr(err, errlen, CK_ENOMEM, "batch scratch", "out of host memory");
    return CK_OK;
}

extern "C" int be_cuda_available(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it: it is not sticky, but keep state clean */
        return 0;
    }
    return n > 0;
}

/* What the model's attention and layers ask that the CUDA pass does not
 * compute, named for a message, or NULL: nothing. cu_gemma_extra:
 * gemma4's; cu_attn_extra: gpt-oss's attention. */
static const char *cu_gemma_extra(const model *m) {
    /* gemma4's, named before its layer kinds: none has a CUDA kernel */
    const model_config *c = &m->cfg;
    if (c->n_embd_pl) return "per-layer embeddings";
    if (c->n_kv_shared) return "shared KV layers";
    if (c->q_dim_max || c->kv_dim_max || c->head_dim_swa) return "per-layer head counts and head sizes";
    if (c->v_norm) return "RMS-normed V heads";
    if (c->kq_div != 0) return "unscaled attention scores";
    if (c->ffn_act != ARCH_ACT_SWIGLU) return "the GELU feed-forward";
    if (c->emb_scale != 0) return "the embedding scale";
    if (c->logit_softcap != 0) return "final logit soft-capping";
    for (int l = 0; l < c->n_layers; l++) {
        const model_layer *ly = &m->layers[l];
        if (!ly->wv.n) return "V = K (no attn_v)";
        if (ly->attn_post_norm.n || ly->ffn_post_norm.n) return "norms after attention and feed-forward";
        if (ly->out_scale.n) return "the layer output scale";
    }
    return NULL;
}

static const char *cu_attn_extra(const model *m) {
    if (m->cfg.n_swa) return "sliding-window attention";
    for (int l = 0; l < m->cfg.n_layers; l++) {
        if (m->layers[l].sinks.n) return "attention sinks";
        if (m->layers[l].bo.n) return "attention output bias";
    }
    return NULL;
}

extern "C" int be_cuda_new(const model *m, const be_options *o, backend **out, char *err, size_t errlen) {
    if (!out) return CK_EINVAL;
    *out = NULL;
    if (!m || !o) return cu_seterr(err, errlen, CK_EINVAL, "options", "NULL model or options");
    const model_config *c = &m->cfg;
    if (o->max_batch_tokens <= 0 || o->n_kv_blocks <= 0 || o->block_size <= 0 || o->n_kv8_blocks < 0 ||
        o->max_ctx < 0 || o->max_ctx > c->seq_len) {
        if (err && errlen)
            snprintf(err, errlen,
                     "cuda backend: invalid options (batch %d, blocks %d, block size %d, ctx %d)",
                     o->max_batch_tokens, o->n_kv_blocks, o->block_size, o->max_ctx);
        return CK_EINVAL;
    }
    /* Every layer runs attention then the SwiGLU feed-forward (the forward
     * pass of backend_cuda.cu): any other block of the architecture table
     * (qwen3moe's experts) is refused by name, never run unverified; the CPU
     * backend computes it. */
    const arch_info *ai = arch_by_id(c->arch ? c->arch : ARCH_LLAMA);
    if (!ai) return cu_seterr(err, errlen, CK_EUNSUPPORTED, "architecture", "not in the table");
    /* A recurrent layer kind first: its model may share a scalar with
     * gemma4's (Granite's embedding scale), and the kind is what is missing. */
    for (int k = 0; k < ARCH_MAX_BLOCKS && ai->blocks[k] != ARCH_BLOCK_END; k++)
        if (ai->blocks[k] == ARCH_BLOCK_SHORTCONV || ai->blocks[k] == ARCH_BLOCK_MAMBA2) {
            if (err && errlen)
                snprintf(err, errlen,
                         "cuda backend: architecture %s: layer kind %s has no CUDA kernel (the CPU "
                         "backend computes it: --backend cpu)",
                         ai->name, arch_block_name(ai->blocks[k]));
            return CK_EUNSUPPORTED;
        }
    const char *g4 = cu_gemma_extra(m);
    if (g4) {
        if (err && errlen)
            snprintf(err, errlen,
                     "cuda backend: architecture %s: %s has no CUDA kernel (the CPU backend computes it: "
                     "--backend cpu)",
                     ai->name, g4);
        return CK_EUNSUPPORTED;
    }
    for (int k = 0; k < ARCH_MAX_BLOCKS; k++) {
        const int want = k == 0 ? ARCH_BLOCK_ATTN : k == 1 ? ARCH_BLOCK_FFN : ARCH_BLOCK_END;
        if (ai->blocks[k] != want) {
            if (err && errlen)
                snprintf(err, errlen,
                         "cuda backend: architecture %s: layer kind %s has no CUDA kernel (the CPU "
                         "backend computes it: --backend cpu)",
                         ai->name, arch_block_name(ai->blocks[k] != ARCH_BLOCK_END ? ai->blocks[k] : want));
            return CK_EUNSUPPORTED;
        }
        if (want == ARCH_BLOCK_END) break;
    }
    /* A recurrent state per sequence (lfm2's short convolutions,
     * granitehybrid's Mamba2): the CUDA pass has no state slots and no
     * kernel for either. Both are refused above for their block; this keeps
     * any recurrent layer out. */
    if (model_state_floats(c)) {
        if (err && errlen)
            snprintf(err, errlen,
                     "cuda backend: architecture %s: recurrent layers (short convolution, Mamba2) have no "
                     "CUDA kernel (the CPU backend computes them: --backend cpu)",
                     ai->name);
        return CK_EUNSUPPORTED;
    }
    /* RoPE on every layer, queries unscaled: the CUDA pass has neither
     * smollm3's RoPE-less layers nor mistral3's query temperature, and no
     * GPU has checked them, so a model that asks for either is refused by
     * name. (mistral3's yarn_log_multiplier is in rope_mscale, from
     * model_rope_freqs as on the CPU; a mistral3 without a temperature is
     * the llama compute.) */
    if (c->no_rope_step || c->attn_temp_scale != 0) {
        if (err && errlen)
            snprintf(err, errlen, "cuda backend: architecture %s has no verified CUDA kernel (%s)", ai->name,
                     c->no_rope_step ? "layers without RoPE" : "query scale by position");
        return CK_EUNSUPPORTED;
    }
    /* gpt-oss's attention: a sliding window, sink logits, an output bias.
     * The CUDA attention has none of them; gpt-oss is refused above for its
     * experts, and this keeps them from slipping through with any other
     * architecture's layers. */
    const char *attn_extra = cu_attn_extra(m);
    if (attn_extra) {
        if (err && errlen)
            snprintf(err, errlen,
                     "cuda backend: architecture %s: %s has no CUDA kernel (the CPU backend computes it: "
                     "--backend cpu)",
                     ai->name, attn_extra);
        return CK_EUNSUPPORTED;
    }
    if (c->head_dim > CK_CUDA_MAX_HEAD_DIM || c->head_dim % 2 || c->n_kv_heads <= 0 ||
        c->n_heads % c->n_kv_heads || c->n_heads > 65535) {
        char why[96];
        snprintf(why, sizeof why, "head_dim %d / %d heads not supported (head_dim <= %d)", c->head_dim,
                 c->n_heads, CK_CUDA_MAX_HEAD_DIM);
        return cu_seterr(err, errlen, CK_EUNSUPPORTED, "model", why);
    }
    const int max_ctx = o->max_ctx ? o->max_ctx : be_default_ctx(m); /* as the CPU backend */
    const long long tbl_cap = (long long)max_ctx / o->block_size + 1;
    /* The int32 batch arrays and offsets must stay inside int. */
    if ((long long)o->max_batch_tokens * (tbl_cap + 5) > 0x3fffffffLL)
        return cu_seterr(err, errlen, CK_EINVAL, "options", "max_batch_tokens x context blocks too large");
    int rc = cu_check_types(m, err, errlen);
    if (rc) return rc;
    if (!be_cuda_available())
        return cu_seterr(err, errlen, CK_EBACKEND, "device", "no CUDA device or driver");

    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return cu_seterr(err, errlen, CK_ENOMEM, "backend", "out of host memory");
    backend *b = &cb->base;
    b->ops = &cu_ops_table_;
    b->m = m;
    b->opt = *o;
    b->opt.max_ctx = max_ctx;
    b->opt.n_threads = 1;
    cb->q_dim = c->n_heads * c->head_dim;
    cb->kv_dim = c->n_kv_heads * c->head_dim;
    cb->qkv_dim = cb->q_dim + 2 * cb->kv_dim;
    cb->max_ctx = max_ctx;
    cb->tbl_cap = (int)tbl_cap;
    b->kv_block_floats = (size_t)c->n_layers * 2 * (size_t)o->block_size * (size_t)cb->kv_dim;
    b->kv8_block_bytes = cu_kv8_bytes(cb);
    cb->wf16 = !cu_model_is_f32(m);
    const char *wenv = getenv("CONFKV_CUDA_WEIGHTS");
    if (wenv && !strcmp(wenv, "f32")) cb->wf16 = 0;
    if (wenv && !strcmp(wenv, "f16")) cb->wf16 = 1;
    const char *qenv = getenv("CONFKV_CUDA_QUANT");
    cb->qexpand = qenv && !strcmp(qenv, "expand");

    if ((rc = cu_init_device(cb, err, errlen)) || (rc = cu_init_weights(cb, err, errlen)) ||
        (rc = cu_init_buffers(cb, err, errlen))) {
        cu_destroy(b);
        return rc;
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cu_destroy(b);
        return cu_seterr(err, errlen, CK_EBACKEND, "finishing setup", cudaGetErrorString(e));
    }
    *out = b;
    return CK_OK;
}
