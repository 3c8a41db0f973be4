/* samp.c - confidence signals and next-token sampling (see samp.h). */
#include "samp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

/* ----------------------------------------------------------------------------
 * vector helpers
 *
 * The per-token work is a few passes over vocab_size floats. GCC will not
 * if-convert float selects under the default -ftrapping-math, so plain loops
 * with `x > m ? x : m` stay scalar; the loops that matter are written with
 * GCC/Clang vector extensions (masks for selects), with a scalar fallback
 * for other compilers. */

#if defined(__GNUC__) && defined(__AVX512F__)
#define SV_VL 16 /* floats in one 512-bit register */
#elif defined(__GNUC__) && defined(__AVX__)
#define SV_VL 8 /* 256 bits */
#else
#define SV_VL 4 /* 128 bits: wider vectors would change the psABI without AVX */
#endif

/* e^-a for a in [0, 87] (87: e^-87 is near the smallest normal float):
 * Cephes-style range reduction and polynomial, about 1 ulp. */
static inline float exp_neg(float a) {
    float y = -a;
    float kf = y * 1.44269504088896341f + 12582912.0f; /* round(y / ln 2) */
    kf -= 12582912.0f;
    float r = y - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t ki = (int32_t)kf + 127; /* in [1, 127]: a normal 2^k */
    uint32_t bits = (uint32_t)ki << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* e^-a for any a >= 0, NaN included: exactly 0 from 87 on (and for NaN) */
static inline float exp_neg_cut(float a) {
    int small = a < 87.0f;
    float e = exp_neg(small ? a : 87.0f);
    return small ? e : 0.0f;
}

#if defined(__GNUC__)
typedef float sv_f __attribute__((vector_size(SV_VL * 4)));
typedef int32_t sv_i __attribute__((vector_size(SV_VL * 4)));

static inline sv_f sv_sel(sv_i m, sv_f a, sv_f b) { return (sv_f)((m & (sv_i)a) | (~m & (sv_i)b)); }

static inline sv_f sv_load(const float *p) {
    sv_f v;
    memcpy(&v, p, sizeof v); /* unaligned */
    return v;
}

static inline sv_f sv_exp_neg(sv_f a) { /* exp_neg, lane-wise */
    const sv_f z = {0};
    sv_f y = -a;
    sv_f kf = y * 1.44269504088896341f + 12582912.0f;
    kf -= 12582912.0f;
    sv_f r = y - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    sv_f p = z + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    sv_i ki = __builtin_convertvector(kf, sv_i) + 127;
    return p * (sv_f)(ki << 23);
}

static inline sv_f sv_exp_neg_cut(sv_f a) { /* exp_neg_cut, lane-wise */
    const sv_f z = {0}, cap = z + 87.0f;
    sv_i small = a < cap;
    return sv_sel(small, sv_exp_neg(sv_sel(small, a, cap)), z);
}
#endif

/* Largest of x[0..n), NaN ignored; -inf when there is none. */
static float vmax(const float *x, int n) {
    float m = -INFINITY;
    int i = 0;
#if defined(__GNUC__)
    const sv_f ninf = {0};
    sv_f m0 = ninf - INFINITY, m1 = m0;
    for (; i + 2 * SV_VL <= n; i += 2 * SV_VL) {
        sv_f a = sv_load(x + i), b = sv_load(x + i + SV_VL);
        m0 = sv_sel(a > m0, a, m0);
        m1 = sv_sel(b > m1, b, m1);
    }
    m0 = sv_sel(m1 > m0, m1, m0);
    for (int j = 0; j < SV_VL; j++) m = m0[j] > m ? m0[j] : m;
#endif
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* x[i] = e^((x[i] - mx) * inv_t) in place (mx the max: weights in [0, 1],
 * the max's exactly 1; 0 below e^-87, for -inf and NaN). Returns their sum. */
static double vweights(float *x, int n, float mx, float inv_t) {
    double sum = 0.0;
    int i = 0;
#if defined(__GNUC__)
    typedef double sv_d __attribute__((vector_size(SV_VL * 8)));
    sv_d acc = {0};
    for (; i + SV_VL <= n; i += SV_VL) {
        sv_f e = sv_exp_neg_cut((mx - sv_load(x + i)) * inv_t);
        memcpy(x + i, &e, sizeof e);
        acc += __builtin_convertvector(e, sv_d);
    }
    for (int j = 0; j < SV_VL; j++) sum += acc[j];
#endif
    for (; i < n; i++) {
        x[i] = exp_neg_cut((mx - x[i]) * inv_t);
        sum += x[i];
    }
    return sum;
}

/* ----------------------------------------------------------------------------
 * confidence: one pass
 *
 * Each lane keeps, over the logits it has seen, the running max m, the
 * index of its first occurrence, the second-largest logit t2, and
 *     S = sum over the others of e^(x - m)           (the max itself is the
 *     U = sum over the others of (m - x) e^(x - m)    implicit "1 +")
 * For a new x, d = x - m and e = e^-|d| (one exp per logit):
 *     x <= m:  S += e;  U += |d| e
 *     x >  m:  the old max joins "the others" and everything rescales by e:
 *              S = e (S + 1);  U = e (U + |d| (S + 1));  m = x
 * Then p_max = 1 / (1 + S) and entropy = log(1 + S) + U / (1 + S): two
 * non-negative terms, so nothing cancels, even for a peaked distribution
 * (where m + log S - T/S would subtract nearly equal numbers).
 * |d| >= 87 gives e = 0 exactly: it keeps the exp in range and makes -inf
 * logits (d = -inf, or NaN for -inf - -inf) weigh nothing instead of NaN. */

#define SC_LANES (2 * SV_VL) /* two vectors' worth, for instruction-level parallelism */

typedef struct {
    float m[SC_LANES], s[SC_LANES], u[SC_LANES], t2[SC_LANES];
    int32_t idx[SC_LANES];
} conf_lanes;

/* One logit x (index i) into lane j: the scalar twin of conf_vstep. */
static inline void conf_step(conf_lanes *L, int j, float x, int32_t i) {
    float mj = L->m[j];
    float d = x - mj;
    int gt = d > 0.0f;
    float ad = fabsf(d);
    float e = exp_neg_cut(ad);
    ad = ad < 87.0f ? ad : 87.0f; /* only ever multiplied by e, which is 0 then */
    float s = L->s[j], u = L->u[j], s1 = s + 1.0f, t2 = L->t2[j];
    float s_new_max = e * s1, s_same = s + e;
    float u_new_max = e * (u + ad * s1), u_same = u + ad * e;
    float t2_same = x > t2 ? x : t2;
    L->s[j] = gt ? s_new_max : s_same;
    L->u[j] = gt ? u_new_max : u_same;
    L->t2[j] = gt ? mj : t2_same;
    L->m[j] = gt ? x : mj;
    L->idx[j] = gt ? i : L->idx[j];
}

#if defined(__GNUC__)
static inline void conf_vstep(sv_f *m, sv_f *s, sv_f *u, sv_f *t2, sv_i *idx, sv_f x, sv_i i) {
    const sv_f zero = {0}, cap = zero + 87.0f;
    sv_f d = x - *m;
    sv_i gt = d > zero;
    sv_f ad = (sv_f)((sv_i)d & 0x7fffffff);
    sv_f e = sv_exp_neg_cut(ad);
    ad = sv_sel(ad < cap, ad, cap);
    sv_f s1 = *s + 1.0f;
    sv_f s_new = sv_sel(gt, e * s1, *s + e);
    sv_f u_new = sv_sel(gt, e * (*u + ad * s1), *u + ad * e);
    sv_f t2_same = sv_sel(x > *t2, x, *t2);
    *t2 = sv_sel(gt, *m, t2_same);
    *m = sv_sel(gt, x, *m);
    *s = s_new;
    *u = u_new;
    *idx = (gt & i) | (~gt & *idx);
}
#endif

int samp_confidence(const float *logits, int n, samp_conf *out, int *argmax) {
    if (!logits || !out || n < 2) return CK_EINVAL;
    conf_lanes L;
    int lanes = n >= 2 * SC_LANES ? SC_LANES : 1;
    /* Lanes start empty (max -inf): the first logit a lane sees takes its
     * max with S = U = 0, as seeding it would, and a NaN there is skipped
     * like any other NaN instead of pinning the lane. */
    for (int j = 0; j < lanes; j++) {
        L.m[j] = -INFINITY;
        L.s[j] = 0.0f;
        L.u[j] = 0.0f;
        L.t2[j] = -INFINITY;
        L.idx[j] = j;
    }
    int i = 0;
    if (lanes == SC_LANES) {
        int end = n / SC_LANES * SC_LANES;
#if defined(__GNUC__)
        enum { NV = SC_LANES / SV_VL };
        sv_f m[NV], s[NV], u[NV], t2[NV];
        sv_i idx[NV], iota;
        // cppcheck-suppress uninitvar ; a vector filled lane by lane
        for (int j = 0; j < SV_VL; j++) iota[j] = j;
        memcpy(m, L.m, sizeof m);
        memcpy(s, L.s, sizeof s);
        memcpy(u, L.u, sizeof u);
        memcpy(t2, L.t2, sizeof t2);
        memcpy(idx, L.idx, sizeof idx);
        for (; i < end; i += SC_LANES)
            for (int v = 0; v < NV; v++)
                conf_vstep(&m[v], &s[v], &u[v], &t2[v], &idx[v], sv_load(logits + i + v * SV_VL),
                           iota + (i + v * SV_VL));
        memcpy(L.m, m, sizeof m);
        memcpy(L.s, s, sizeof s);
        memcpy(L.u, u, sizeof u);
        memcpy(L.t2, t2, sizeof t2);
        memcpy(L.idx, idx, sizeof idx);
#else
        for (; i < end; i += SC_LANES)
            for (int j = 0; j < SC_LANES; j++) conf_step(&L, j, logits[i + j], i + j);
#endif
    }
    for (; i < n; i++) conf_step(&L, 0, logits[i], i); /* the tail, into lane 0 */

    /* combine the lanes, in double: the max lane's own max is the "1 +" */
    int best = 0;
    for (int j = 1; j < lanes; j++)
        if (L.m[j] > L.m[best] || (L.m[j] == L.m[best] && L.idx[j] < L.idx[best])) best = j;
    double M = L.m[best];
    if (!(M > -INFINITY && M < INFINITY)) return CK_ENONFINITE;
    double S = L.s[best], U = L.u[best];
    float top2 = L.t2[best];
    for (int j = 0; j < lanes; j++) {
        if (j == best) continue;
        if (L.m[j] > top2) top2 = L.m[j]; /* a lane's t2 never beats its m */
        double gap = M - (double)L.m[j];
        if (!(gap < 200.0)) continue; /* -inf lanes, or weights below e^-200 */
        double w = exp(-gap), s1 = 1.0 + (double)L.s[j];
        S += w * s1;
        U += w * ((double)L.u[j] + gap * s1);
    }
    double z = 1.0 + S;
    out->entropy = (float)(log1p(S) + U / z);
    out->pmax = (float)(1.0 / z);
    double d2 = (double)top2 - M; /* <= 0; -inf when only one logit is finite */
    out->gap = (float)(-expm1(d2) / z);
    if (argmax) *argmax = L.idx[best];
    return 0;
}

/* One pass: each lane keeps its max and the index where it first appeared
 * (a strict > skips NaN and later ties), then the lanes combine by value,
 * ties to the lower index. AM_SETS independent sets of lanes keep the
 * compare-and-select chains from waiting on each other. The greedy path of
 * every decode step runs this over the whole vocabulary, where a max pass
 * and then a scalar search for it cost 3 % of a batch-32 step on a
 * 32000-entry vocabulary. */
#define AM_SETS 4
int samp_argmax(const float *logits, int n) {
    if (!logits || n < 1) return CK_EINVAL;
    float m = -INFINITY;
    int best = -1, i = 0;
#if defined(__GNUC__)
    if (n >= AM_SETS * SV_VL) {
        const sv_f z = {0};
        sv_f vm[AM_SETS];
        sv_i vi[AM_SETS], at[AM_SETS];
        for (int v = 0; v < AM_SETS; v++) {
            vm[v] = z - INFINITY;
            vi[v] = (sv_i){0} - 1;
            for (int j = 0; j < SV_VL; j++) at[v][j] = v * SV_VL + j;
        }
        for (; i + AM_SETS * SV_VL <= n; i += AM_SETS * SV_VL)
            for (int v = 0; v < AM_SETS; v++) {
                sv_f x = sv_load(logits + i + v * SV_VL);
                sv_i gt = x > vm[v];
                vm[v] = sv_sel(gt, x, vm[v]);
                vi[v] = (gt & at[v]) | (~gt & vi[v]);
                at[v] += AM_SETS * SV_VL;
            }
        for (int v = 0; v < AM_SETS; v++)
            for (int j = 0; j < SV_VL; j++)
                if (vi[v][j] >= 0 && (vm[v][j] > m || (vm[v][j] == m && vi[v][j] < best))) {
                    m = vm[v][j];
                    best = vi[v][j];
                }
    }
#endif
    for (; i < n; i++) /* the tail's indices are all higher: only a larger value wins */
        if (logits[i] > m) {
            m = logits[i];
            best = i;
        }
    return best >= 0 ? best : CK_ENONFINITE;
}

/* ----------------------------------------------------------------------------
 * the sampler */

typedef struct {
    float v; /* logit, then unnormalised probability */
    int32_t id;
} samp_cand;

struct sampler {
    int n; /* vocabulary size */
    samp_params p;
    uint64_t rng;    /* splitmix64 state */
    samp_cand *cand; /* (n) candidates of the current step */
    uint8_t *seen;   /* (n) all 0 between calls: marks for the penalty's de-duplication */
};

void samp_params_default(samp_params *p) {
    if (!p) return;
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->min_p = 0.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->seed = 0;
}

int samp_params_check(const samp_params *p) {
    if (!p) return CK_EINVAL;
    if (!(p->temperature >= 0.0f && p->temperature < INFINITY)) return CK_EINVAL;
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f)) return CK_EINVAL;
    if (p->top_k < 0) return CK_EINVAL;
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f)) return CK_EINVAL;
    if (!(p->repeat_penalty > 0.0f && p->repeat_penalty < INFINITY)) return CK_EINVAL;
    if (p->repeat_last_n < -1) return CK_EINVAL;
    return 0;
}

/* splitmix64 (Steele, Lea, Flood): any seed, 2^64 period, passes BigCrush. */
static uint64_t rng_next(uint64_t *st) {
    uint64_t z = (*st += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static double rng_unit(uint64_t *st) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

int samp_new(int vocab_size, const samp_params *p, sampler **out) {
    if (!out) return CK_EINVAL;
    *out = NULL;
    samp_params def;
    if (!p) {
        samp_params_default(&def);
        p = &def;
    }
    if (vocab_size < 1 || samp_params_check(p) != 0) return CK_EINVAL;
    sampler *s = calloc(1, sizeof *s);
    if (!s) return CK_ENOMEM;
    s->n = vocab_size;
    s->p = *p;
    s->rng = p->seed;
    s->cand = malloc((size_t)vocab_size * sizeof *s->cand);
    s->seen = calloc((size_t)vocab_size, 1);
    if (!s->cand || !s->seen) {
        samp_free(s);
        return CK_ENOMEM;
    }
    *out = s;
    return 0;
}

void samp_free(sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->seen);
    free(s);
}

void samp_reset(sampler *s, uint64_t seed) {
    if (s) s->rng = seed;
}

/* strict total order: larger value first, then lower id (bitwise ops, not
 * && and ||: on random data the branches would mispredict half the time) */
static int cand_before(const samp_cand *a, const samp_cand *b) {
    return (a->v > b->v) | ((a->v == b->v) & (a->id < b->id));
}

static void cand_swap(samp_cand *a, samp_cand *b) {
    samp_cand t = *a;
    *a = *b;
    *b = t;
}

/* Top-k: the k first logits in cand_before order into h[0..k) (unsorted),
 * NaN read as -inf. A heap with the weakest kept candidate at its root: one
 * comparison for most logits, O(n + k log k log(n/k)) on average. */
static void top_k(const float *x, int n, int k, samp_cand *h) {
    for (int i = 0; i < n; i++) {
        samp_cand c = {x[i] == x[i] ? x[i] : -INFINITY, i};
        int at;
        if (i < k) { /* sift up from the end */
            at = i;
            while (at > 0 && cand_before(&h[(at - 1) / 2], &c)) {
                h[at] = h[(at - 1) / 2];
                at = (at - 1) / 2;
            }
            h[at] = c;
            continue;
        }
        if (!cand_before(&c, &h[0])) continue;
        at = 0; /* replace the root, sift down */
        for (;;) {
            int ch = 2 * at + 1;
            if (ch >= k) break;
            if (ch + 1 < k && cand_before(&h[ch], &h[ch + 1])) ch++;
            if (!cand_before(&c, &h[ch])) break;
            h[at] = h[ch];
            at = ch;
        }
        h[at] = c;
    }
}

/* Sum of the weights of a[0..n), four partial sums to hide the latency. */
static double cand_sum(const samp_cand *a, int n) {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i].v;
        s1 += a[i + 1].v;
        s2 += a[i + 2].v;
        s3 += a[i + 3].v;
    }
    for (; i < n; i++) s0 += a[i].v;
    return (s0 + s1) + (s2 + s3);
}

/* Top-p without a full sort: move to a[0..k) the fewest most probable
 * candidates whose weight exceeds `target` (all n when none do) and return k.
 * Quickselect-style, expected O(n): a[0..lo) are known to be in (weight acc,
 * which stays <= target), a[hi..n) known to be out. */
static int nucleus(samp_cand *a, int n, double target) {
    int lo = 0, hi = n;
    double acc = 0.0;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2, last = hi - 1;
        if (cand_before(&a[mid], &a[lo])) cand_swap(&a[mid], &a[lo]);
        if (cand_before(&a[last], &a[lo])) cand_swap(&a[last], &a[lo]);
        if (cand_before(&a[last], &a[mid])) cand_swap(&a[last], &a[mid]);
        cand_swap(&a[mid], &a[last]); /* the median of three, as pivot, at the end */
        samp_cand pivot = a[last];
        int st = lo;
        for (int i = lo; i < last; i++) { /* Lomuto, branch-free */
            samp_cand x = a[i];
            int b = cand_before(&x, &pivot);
            a[i] = a[st];
            a[st] = x;
            st += b;
        }
        double w = cand_sum(a + lo, st - lo); /* weight of those before the pivot */
        cand_swap(&a[st], &a[last]);          /* a[lo..st) before, a[st] pivot, then after */
        if (acc + w > target) {
            hi = st;
        } else if (acc + w + pivot.v > target) {
            return st + 1;
        } else {
            acc += w + pivot.v;
            lo = st + 1;
        }
    }
    return lo + 1 < n ? lo + 1 : n;
}

static int apply_penalty(sampler *s, float *logits, const int32_t *history, int n_history) {
    float pen = s->p.repeat_penalty;
    int last = s->p.repeat_last_n;
    if (pen == 1.0f || last == 0 || n_history == 0) return 0;
    int start = last < 0 || last >= n_history ? 0 : n_history - last;
    for (int k = start; k < n_history; k++)
        if (history[k] < 0 || history[k] >= s->n) return CK_EINVAL;
    /* once per distinct token, as llama.cpp */
    for (int k = start; k < n_history; k++) {
        int id = history[k];
        if (s->seen[id]) continue;
        s->seen[id] = 1;
        float x = logits[id];
        logits[id] = x > 0.0f ? x / pen : x * pen;
    }
    for (int k = start; k < n_history; k++) s->seen[history[k]] = 0;
    return 0;
}

/* One draw from weights w[0..n) of total `sum` (> 0). */
static int draw_array(sampler *s, const float *w, int n, double sum) {
    double r = rng_unit(&s->rng) * sum, cdf = 0.0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0.0f) continue;
        cdf += w[i];
        if (r < cdf) return i;
        last = i;
    }
    return last; /* r fell past the total by rounding */
}

static int draw_cands(sampler *s, const samp_cand *c, int n, double sum) {
    double r = rng_unit(&s->rng) * sum, cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += c[i].v;
        if (r < cdf) return c[i].id;
    }
    return c[n - 1].id; /* r fell past the total by rounding */
}

/* 1 / temperature; INFINITY means greedy (0, or so small its inverse overflows) */
static float inv_temperature(const samp_params *p) {
    return p->temperature > 0.0f ? 1.0f / p->temperature : INFINITY;
}

int samp_plain_greedy(const sampler *s) {
    return s && !(inv_temperature(&s->p) < INFINITY) &&
           (s->p.repeat_penalty == 1.0f || s->p.repeat_last_n == 0);
}

int samp_sample(sampler *s, float *logits, const int32_t *history, int n_history) {
    if (!s || !logits || n_history < 0 || (!history && n_history > 0)) return CK_EINVAL;
    int rc = apply_penalty(s, logits, history, n_history);
    if (rc != 0) return rc;
    const samp_params *p = &s->p;
    float inv_t = inv_temperature(p);
    if (!(inv_t < INFINITY)) return samp_argmax(logits, s->n); /* greedy */

    samp_cand *c = s->cand;
    int nc;
    double total;        /* the weight top-p's fraction is of: what min-p kept */
    int min_p_done = 0;  /* min-p applied while gathering the candidates */
    int prefiltered = 0; /* top-p's cut-off applied while gathering */
    if (p->top_k > 0 && p->top_k < s->n) {
        /* top-k on the logits (the temperature does not reorder them) */
        nc = p->top_k;
        top_k(logits, s->n, nc, c);
        float mx = -INFINITY;
        for (int i = 0; i < nc; i++) mx = c[i].v > mx ? c[i].v : mx;
        if (!(mx > -INFINITY && mx < INFINITY)) return CK_ENONFINITE;
        total = 0.0;
        for (int i = 0; i < nc; i++) {
            c[i].v = exp_neg_cut((mx - c[i].v) * inv_t);
            total += c[i].v;
        }
    } else {
        float mx = vmax(logits, s->n);
        if (!(mx > -INFINITY && mx < INFINITY)) return CK_ENONFINITE;
        total = vweights(logits, s->n, mx, inv_t); /* the max weighs 1 */
        if (p->min_p == 0.0f && p->top_p >= 1.0f) return draw_array(s, logits, s->n, total);
        /* gather what the first filter keeps */
        float thr;
        if (p->min_p > 0.0f) {
            thr = p->min_p;
            min_p_done = 1;
        } else {
            double cut = (1.0 - p->top_p) * total / (s->n > 1 ? s->n - 1 : 1);
            thr = cut < 1.0 ? (float)cut : 1.0f; /* the max (weight 1) always stays */
            prefiltered = 1;
        }
        nc = 0;
        for (int i = 0; i < s->n; i++) { /* branch-free: the test is a coin flip */
            c[nc].v = logits[i];
            c[nc].id = i;
            nc += (logits[i] >= thr) & (logits[i] > 0.0f);
        }
        if (min_p_done) total = cand_sum(c, nc);
    }

    /* min-p: keep p >= min_p * p_max, and p_max's weight is 1 */
    if (p->min_p > 0.0f && !min_p_done) {
        int k = 0;
        total = 0.0;
        for (int i = 0; i < nc; i++)
            if (c[i].v >= p->min_p) {
                c[k++] = c[i];
                total += c[i].v;
            }
        nc = k;
    }

    /* top-p: the smallest most-probable set with mass > top_p. A candidate with
     * p < (1 - top_p) / (nc - 1) cannot be in it (all of them together hold
     * less than 1 - top_p), so those go first (llama2.c's trick); the rest is
     * partitioned, not sorted. */
    if (p->top_p < 1.0f && nc > 1) {
        int k = nc;
        if (!prefiltered) {
            double cut = (1.0 - p->top_p) * total / (nc - 1);
            if (cut > 1.0) cut = 1.0;
            k = 0;
            for (int i = 0; i < nc; i++)
                if (c[i].v >= cut) c[k++] = c[i];
        }
        nc = nucleus(c, k, p->top_p * total);
    }

    return draw_cands(s, c, nc, cand_sum(c, nc));
}
