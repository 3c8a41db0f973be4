/* ck_cuda_attn.cu - paged attention over block tables, for decode and
 * prefill alike (ck_cuda.h gives the contract).
 *
 * One thread block of CK_ATTN_WARPS warps per (token, query head): a prefill
 * chunk is just several tokens of one sequence, each causal by its own
 * position, exactly as the CPU's attend_one. A warp takes one key at a time
 * (lanes split the head's dimensions, so the key row is read coalesced),
 * and the warps of the block share the keys of each logical block.
 *
 * A logical block is an f32 pool block or an int8 one (kvq.h: keys scaled
 * per channel, values per token), read as backend_cpu.c reads it: the key
 * scales fold into the query (q_i * ks_i) and the value scale into p.
 *
 * Two passes over the keys: the first finds the softmax's max and sum with
 * an online softmax; the second recomputes each score, so that it has the
 * normalised probability p at hand, adds p * v into the output and sums p
 * per logical block into the sequence's mass (one atomic per warp and
 * block). Recomputing q.k costs a second read of K but needs no scratch of
 * max_ctx scores per (token, head), whatever the context length.
 *
 * Known limit: with few (token, head) pairs, e.g. one sequence decoding,
 * the grid is smaller than the GPU; a split-context (flash-decoding) variant
 * would fill it. */
#include <cuda_fp16.h>

#include "ck_cuda.h"

extern "C" {
#include "kv.h"
}

#define CK_ATTN_WARPS 4

/* One logical block of one layer and KV head, resolved: f32 keys at kb, or
 * int8 keys at k8b with the key scales folded into the query (qs) and the
 * value scales at vs. Values follow keys at + block_size * kv_dim. */
template <int PL> struct ck_blk {
    const float *kb;
    const signed char *k8b;
    const __half *vs;
    float qs[PL];
};

/* Resolve table entry e (not KV_NONE). */
template <int PL>
static __device__ __forceinline__ void ck_attn_resolve(const ck_attn_args &a, int e, int kvh,
                                                       const float (&qr)[PL], int lane, ck_blk<PL> &r) {
    const int bs = a.block_size, kvd = a.kv_dim, hd = a.head_dim;
    if (e >= 0) {
        r.kb = a.kv + (size_t)e * a.block_floats + (size_t)a.layer * 2 * bs * kvd + (size_t)kvh * hd;
        r.k8b = NULL;
        r.vs = NULL;
        return;
    }
    /* kvq.h: per layer int8 K[bs][kvd], int8 V[bs][kvd], f16 ks[kvd], f16 vs[bs] */
    const size_t layer_bytes = 2 * (size_t)bs * kvd + sizeof(__half) * ((size_t)kvd + bs);
    const unsigned char *base =
        a.kv8 + (size_t)CK_CUDA_DEC8(e) * a.kv8_block_bytes + (size_t)a.layer * layer_bytes;
    const __half *sc = (const __half *)(base + 2 * (size_t)bs * kvd);
    const __half *ks = sc + (size_t)kvh * hd;
    r.kb = NULL;
    r.k8b = (const signed char *)base + (size_t)kvh * hd;
    r.vs = sc + kvd;
#pragma unroll
    for (int kk = 0; kk < PL; kk++) {
        const int dd = lane + 32 * kk;
        r.qs[kk] = dd < hd ? qr[kk] * __half2float(ks[dd]) : 0.0f;
    }
}

/* q . k for token t of the block, the same value in every lane (not yet
 * divided by sqrt(head_dim)). The whole warp must call it. */
template <int PL>
static __device__ __forceinline__ float ck_attn_dot(const ck_blk<PL> &r, const float (&qr)[PL], int t,
                                                    int kvd, int hd, int lane) {
    float d = 0.0f;
    if (r.kb) {
        const float *k = r.kb + (size_t)t * kvd;
#pragma unroll
        for (int kk = 0; kk < PL; kk++) {
            const int dd = lane + 32 * kk;
            if (dd < hd) d += qr[kk] * k[dd];
        }
    } else {
        const signed char *k8 = r.k8b + (size_t)t * kvd;
#pragma unroll
        for (int kk = 0; kk < PL; kk++) {
            const int dd = lane + 32 * kk;
            if (dd < hd) d += r.qs[kk] * (float)k8[dd];
        }
    }
    return __shfl_sync(0xffffffffu, ck_warp_sum(d), 0);
}

template <int PL, typename OutT>
static __global__ void __launch_bounds__(CK_ATTN_WARPS * 32) ck_attn_kernel(ck_attn_args a) {
    __shared__ float sh_m[CK_ATTN_WARPS], sh_s[CK_ATTN_WARPS];
    __shared__ float sh_acc[CK_ATTN_WARPS][PL * 32];
    const int i = blockIdx.x, h = blockIdx.y;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int hd = a.head_dim, bs = a.block_size, kvd = a.kv_dim;
    const int kvh = h / (a.n_heads / a.n_kv_heads);
    const float *q = a.qkv + (size_t)i * a.qkv_stride + (size_t)h * hd;
    float qr[PL];
#pragma unroll
    for (int kk = 0; kk < PL; kk++) {
        const int d = lane + 32 * kk;
        qr[kk] = d < hd ? q[d] : 0.0f;
    }
    const int pos = a.pos[i], last = pos / bs;
    const int off = a.seq_off[a.cseq[i]];
    const int32_t *blk = a.blocks + off;
    const float scale = sqrtf((float)hd);
    ck_blk<PL> r;

    /* pass 1: max and sum of exp, online */
    float m = -INFINITY, s = 0.0f;
    for (int j = 0; j <= last; j++) {
        const int e = blk[j];
        if (e == KV_NONE) continue;
        ck_attn_resolve<PL>(a, e, kvh, qr, lane, r);
        const int tn = j == last ? pos - j * bs + 1 : bs;
        for (int t = warp; t < tn; t += CK_ATTN_WARPS) {
            const float sc = ck_attn_dot<PL>(r, qr, t, kvd, hd, lane) / scale;
            if (sc > m) {
                s = s * expf(m - sc) + 1.0f;
                m = sc;
            } else {
                s += expf(sc - m);
            }
        }
    }
    if (lane == 0) {
        sh_m[warp] = m;
        sh_s[warp] = s;
    }
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < CK_ATTN_WARPS; w++) M = fmaxf(M, sh_m[w]);
    float S = 0.0f;
#pragma unroll
    for (int w = 0; w < CK_ATTN_WARPS; w++)
        if (sh_m[w] != -INFINITY) S += sh_s[w] * expf(sh_m[w] - M);

    /* pass 2: probabilities, output and mass */
    float acc[PL];
#pragma unroll
    for (int kk = 0; kk < PL; kk++) acc[kk] = 0.0f;
    for (int j = 0; j <= last; j++) {
        const int e = blk[j];
        if (e == KV_NONE) continue;
        ck_attn_resolve<PL>(a, e, kvh, qr, lane, r);
        const int tn = j == last ? pos - j * bs + 1 : bs;
        float wm = 0.0f;
        for (int t = warp; t < tn; t += CK_ATTN_WARPS) {
            const float p = expf(ck_attn_dot<PL>(r, qr, t, kvd, hd, lane) / scale - M) / S;
            if (r.kb) {
                const float *v = r.kb + (size_t)bs * kvd + (size_t)t * kvd;
#pragma unroll
                for (int kk = 0; kk < PL; kk++) {
                    const int dd = lane + 32 * kk;
                    if (dd < hd) acc[kk] += p * v[dd];
                }
            } else {
                const signed char *v8 = r.k8b + (size_t)bs * kvd + (size_t)t * kvd;
                const float pv = p * __half2float(r.vs[t]);
#pragma unroll
                for (int kk = 0; kk < PL; kk++) {
                    const int dd = lane + 32 * kk;
                    if (dd < hd) acc[kk] += pv * (float)v8[dd];
                }
            }
            wm += p;
        }
        if (a.mass && lane == 0 && warp < tn) atomicAdd(&a.mass[off + j], wm * a.mass_scale);
    }
#pragma unroll
    for (int kk = 0; kk < PL; kk++) sh_acc[warp][lane + 32 * kk] = acc[kk];
    __syncthreads();
    OutT *out = (OutT *)a.out + (size_t)i * a.n_heads * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float rs = 0.0f;
#pragma unroll
        for (int w = 0; w < CK_ATTN_WARPS; w++) rs += sh_acc[w][d];
        ck_store(out + d, rs);
    }
}

template <int PL> static cudaError_t ck_attn_launch(const ck_attn_args *a, cudaStream_t st) {
    const dim3 grid((unsigned)a->T, (unsigned)a->n_heads); /* y <= 65535: heads */
    if (a->out_f16)
        ck_attn_kernel<PL, __half><<<grid, CK_ATTN_WARPS * 32, 0, st>>>(*a);
    else
        ck_attn_kernel<PL, float><<<grid, CK_ATTN_WARPS * 32, 0, st>>>(*a);
    return cudaGetLastError();
}

cudaError_t ck_cuda_attention(const ck_attn_args *a, cudaStream_t st) {
    if (a->T <= 0) return cudaSuccess;
    if (a->head_dim <= 0 || a->head_dim > CK_CUDA_MAX_HEAD_DIM || a->n_kv_heads <= 0 ||
        a->n_heads % a->n_kv_heads)
        return cudaErrorInvalidValue;
    if (a->head_dim <= 32) return ck_attn_launch<1>(a, st);
    if (a->head_dim <= 64) return ck_attn_launch<2>(a, st);
    if (a->head_dim <= 128) return ck_attn_launch<4>(a, st);
    return ck_attn_launch<8>(a, st);
}
