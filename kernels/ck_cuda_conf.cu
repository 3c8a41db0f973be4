/* ck_cuda_conf.cu - the confidence of a logits row in one pass: entropy,
 * p_max, gap (p_max - p_second) and argmax (ck_cuda.h gives the contract).
 *
 * Online softmax: a state holds the running max m, s = sum exp(x - m) and
 * u = sum exp(x - m) (x - m), which rescale together when m grows; then
 * entropy = log s - u / s, since -sum p log p with p = exp(x - m) / s. The
 * state also keeps the two largest logits. Each thread folds a strided
 * slice of the row, then states merge across the warp and the block.
 * A -inf logit has probability 0 and is skipped. */
#include "ck_cuda.h"

#define CK_CONF_THREADS 256

typedef struct ck_conf_state {
    float m, s, u; /* max, sum exp(x - m), sum exp(x - m) (x - m) */
    float v1, v2;  /* largest and second largest logit */
    int i1;        /* index of v1 (lowest on a tie) */
} ck_conf_state;

static __device__ __forceinline__ void ck_conf_add(ck_conf_state *a, float x, int idx) {
    if (!(x > -INFINITY)) return; /* -inf and NaN take no part */
    if (x > a->m) {
        const float r = expf(a->m - x);
        a->u = a->s > 0.0f ? r * (a->u + (a->m - x) * a->s) : 0.0f;
        a->s = r * a->s + 1.0f;
        a->m = x;
    } else {
        const float e = expf(x - a->m);
        a->s += e;
        a->u += e * (x - a->m);
    }
    if (x > a->v1 || (x == a->v1 && idx < a->i1)) {
        a->v2 = a->v1;
        a->v1 = x;
        a->i1 = idx;
    } else if (x > a->v2) {
        a->v2 = x;
    }
}

static __device__ __forceinline__ ck_conf_state ck_conf_merge(ck_conf_state a, ck_conf_state b) {
    ck_conf_state r;
    if (b.v1 > a.v1 || (b.v1 == a.v1 && b.i1 < a.i1)) {
        r.v1 = b.v1;
        r.i1 = b.i1;
        r.v2 = fmaxf(a.v1, b.v2);
    } else {
        r.v1 = a.v1;
        r.i1 = a.i1;
        r.v2 = fmaxf(a.v2, b.v1);
    }
    if (a.s == 0.0f) {
        r.m = b.m, r.s = b.s, r.u = b.u;
    } else if (b.s == 0.0f) {
        r.m = a.m, r.s = a.s, r.u = a.u;
    } else {
        const float M = fmaxf(a.m, b.m);
        const float ra = expf(a.m - M), rb = expf(b.m - M);
        r.m = M;
        r.s = ra * a.s + rb * b.s;
        r.u = ra * (a.u + (a.m - M) * a.s) + rb * (b.u + (b.m - M) * b.s);
    }
    return r;
}

static __device__ __forceinline__ ck_conf_state ck_conf_shfl(ck_conf_state a, int o) {
    ck_conf_state b;
    b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
    b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
    b.u = __shfl_xor_sync(0xffffffffu, a.u, o);
    b.v1 = __shfl_xor_sync(0xffffffffu, a.v1, o);
    b.v2 = __shfl_xor_sync(0xffffffffu, a.v2, o);
    b.i1 = __shfl_xor_sync(0xffffffffu, a.i1, o);
    return b;
}

static __global__ void __launch_bounds__(CK_CONF_THREADS)
    ck_conf_kernel(const float *logits, int vocab, float *out) {
    __shared__ ck_conf_state sh[CK_CONF_THREADS / 32];
    const int r = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *x = logits + (size_t)r * vocab;
    ck_conf_state st = {-INFINITY, 0.0f, 0.0f, -INFINITY, -INFINITY, 0x7fffffff};
    for (int k = threadIdx.x; k < vocab; k += blockDim.x) ck_conf_add(&st, x[k], k);
    for (int o = 16; o > 0; o >>= 1) st = ck_conf_merge(st, ck_conf_shfl(st, o));
    if (lane == 0) sh[warp] = st;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < CK_CONF_THREADS / 32; w++) st = ck_conf_merge(st, sh[w]);
    float *o = out + (size_t)r * 4;
    if (st.s > 0.0f) {
        const float p1 = expf(st.v1 - st.m) / st.s;
        const float p2 = st.v2 > -INFINITY ? expf(st.v2 - st.m) / st.s : 0.0f;
        o[0] = logf(st.s) - st.u / st.s;
        o[1] = p1 - p2;
        o[2] = p1;
    } else {
        o[0] = o[1] = o[2] = 0.0f;
    }
    ((int32_t *)o)[3] = st.i1 == 0x7fffffff ? 0 : st.i1;
}

cudaError_t ck_cuda_confidence(const float *logits, int n_rows, int vocab, void *out, cudaStream_t st) {
    if (n_rows <= 0) return cudaSuccess;
    ck_conf_kernel<<<n_rows, CK_CONF_THREADS, 0, st>>>(logits, vocab, (float *)out);
    return cudaGetLastError();
}
