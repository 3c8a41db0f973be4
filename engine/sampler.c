/* sampler.c - confidence signals and next-token sampling (see sampler.h). */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

/* ----------------------------------------------------------------------------
 * confidence: one pass, vectorizable
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
 * |d| is capped at 87 (e^-87 is near the smallest normal float): it keeps
 * the exp in range and turns -inf logits (d = -inf or NaN) into a weight of
 * ~1e-38 instead of a NaN. */

/* independent lanes: two vectors' worth (for instruction-level parallelism) */
#if defined(__GNUC__) && defined(__AVX512F__)
#define CONF_VL 16 /* floats in one 512-bit register */
#elif defined(__GNUC__) && defined(__AVX__)
#define CONF_VL 8  /* 256 bits */
#else
#define CONF_VL 4  /* 128 bits: wider vectors would change the psABI without AVX */
#endif
#define SC_LANES (2 * CONF_VL)

/* e^-a for a in [0, 87]: Cephes-style range reduction and polynomial,
 * about 1 ulp, written so that the compiler can vectorize it. */
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

typedef struct {
    float m[SC_LANES], s[SC_LANES], u[SC_LANES], t2[SC_LANES];
    int32_t idx[SC_LANES];
} conf_lanes;

/* One logit x (index i) into lane j. Also the scalar path of the vector
 * loop below: both sides of every choice are computed, then selected. */
static inline void conf_step(conf_lanes *L, int j, float x, int32_t i) {
    float mj = L->m[j];
    float d = x - mj;
    int gt = d > 0.0f;
    float ad = fabsf(d);
    int small = ad < 87.0f; /* false for NaN (from -inf - -inf) too */
    ad = small ? ad : 87.0f;
    float e = exp_neg(ad);
    e = small ? e : 0.0f;
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
/* The same step on 8 lanes at once, with GCC/Clang vector extensions: GCC
 * will not if-convert the scalar step under the default -ftrapping-math, so
 * the selects are written as masks. */
#define CONF_NV (SC_LANES / CONF_VL)
typedef float conf_vf __attribute__((vector_size(CONF_VL * 4)));
typedef int32_t conf_vi __attribute__((vector_size(CONF_VL * 4)));

static inline conf_vf conf_sel(conf_vi m, conf_vf a, conf_vf b) {
    return (conf_vf)((m & (conf_vi)a) | (~m & (conf_vi)b));
}

static inline conf_vf conf_vexp_neg(conf_vf a) {
    const conf_vf z = {0};
    conf_vf y = -a;
    conf_vf kf = y * 1.44269504088896341f + 12582912.0f;
    kf -= 12582912.0f;
    conf_vf r = y - kf * 0.693359375f;
    r = r + kf * 2.12194440e-4f;
    conf_vf p = z + 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    conf_vi ki = __builtin_convertvector(kf, conf_vi) + 127;
    return p * (conf_vf)(ki << 23);
}

static inline void conf_vstep(conf_vf *m, conf_vf *s, conf_vf *u, conf_vf *t2, conf_vi *idx,
                              conf_vf x, conf_vi i) {
    const conf_vf zero = {0}, cap = zero + 87.0f;
    conf_vf d = x - *m;
    conf_vi gt = d > zero;
    conf_vf ad = (conf_vf)((conf_vi)d & 0x7fffffff);
    conf_vi small = ad < cap;
    ad = conf_sel(small, ad, cap);
    conf_vf e = conf_sel(small, conf_vexp_neg(ad), zero); /* exactly 0 past the cap */
    conf_vf s1 = *s + 1.0f;
    conf_vf s_new = conf_sel(gt, e * s1, *s + e);
    conf_vf u_new = conf_sel(gt, e * (*u + ad * s1), *u + ad * e);
    conf_vf t2_same = conf_sel(x > *t2, x, *t2);
    *t2 = conf_sel(gt, *m, t2_same);
    *m = conf_sel(gt, x, *m);
    *s = s_new;
    *u = u_new;
    *idx = (gt & i) | (~gt & *idx);
}
#endif

int samp_confidence(const float *logits, int n, samp_conf *out, int *argmax) {
    if (!logits || !out || n < 2) return CK_EINVAL;
    conf_lanes L;
    int lanes = n >= 2 * SC_LANES ? SC_LANES : 1;
    for (int j = 0; j < lanes; j++) {
        L.m[j] = logits[j];
        L.s[j] = 0.0f;
        L.u[j] = 0.0f;
        L.t2[j] = -INFINITY;
        L.idx[j] = j;
    }
    int i = lanes;
    if (lanes == SC_LANES) {
        int end = lanes + (n - lanes) / SC_LANES * SC_LANES;
#if defined(__GNUC__)
        conf_vf m[CONF_NV], s[CONF_NV], u[CONF_NV], t2[CONF_NV];
        conf_vi idx[CONF_NV], iota;
        for (int j = 0; j < CONF_VL; j++) iota[j] = j;
        memcpy(m, L.m, sizeof m);
        memcpy(s, L.s, sizeof s);
        memcpy(u, L.u, sizeof u);
        memcpy(t2, L.t2, sizeof t2);
        memcpy(idx, L.idx, sizeof idx);
        for (; i < end; i += SC_LANES) {
            for (int v = 0; v < CONF_NV; v++) {
                conf_vf x;
                memcpy(&x, logits + i + v * CONF_VL, sizeof x); /* unaligned load */
                conf_vi iv = iota + (i + v * CONF_VL);
                conf_vstep(&m[v], &s[v], &u[v], &t2[v], &idx[v], x, iv);
            }
        }
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
    if (!(M > -INFINITY && M < INFINITY)) return CK_EINVAL;
    double S = 0.0, U = 0.0;
    float top2 = L.t2[best];
    for (int j = 0; j < lanes; j++) {
        if (j == best) {
            S += L.s[j];
            U += L.u[j];
            continue;
        }
        if (L.m[j] > top2) top2 = L.m[j];
        if (L.t2[j] > top2) top2 = L.t2[j]; /* cannot beat L.m[j]; kept for clarity */
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

int samp_argmax(const float *logits, int n) {
    if (!logits || n < 1) return CK_EINVAL;
    int best = -1;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++)
        if (logits[i] > bv) {
            bv = logits[i];
            best = i;
        }
    return best >= 0 ? best : CK_EINVAL;
}

/* ----------------------------------------------------------------------------
 * the sampler */

typedef struct {
    float v;  /* logit, then unnormalised probability */
    int32_t id;
} samp_cand;

struct sampler {
    int n;            /* vocabulary size */
    samp_params p;
    uint64_t rng;     /* splitmix64 state */
    samp_cand *cand;  /* (n) candidates of the current step */
    uint8_t *seen;    /* (n) all 0 between calls: marks for the penalty's de-duplication */
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

/* strict total order: larger value first, then lower id */
static int cand_before(const samp_cand *a, const samp_cand *b) {
    return a->v > b->v || (a->v == b->v && a->id < b->id);
}

static void cand_swap(samp_cand *a, samp_cand *b) {
    samp_cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect: afterwards a[0..k) hold the k first candidates in cand_before
 * order (unsorted). O(n) on average; the order is total, so the set is
 * well-defined even with tied logits. */
static void select_top(samp_cand *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        /* median of three as the pivot */
        if (cand_before(&a[mid], &a[lo])) cand_swap(&a[mid], &a[lo]);
        if (cand_before(&a[hi], &a[lo])) cand_swap(&a[hi], &a[lo]);
        if (cand_before(&a[hi], &a[mid])) cand_swap(&a[hi], &a[mid]);
        samp_cand pivot = a[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (cand_before(&a[i], &pivot)) i++;
            while (cand_before(&pivot, &a[j])) j--;
            if (i <= j) {
                cand_swap(&a[i], &a[j]);
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
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
        cand_swap(&a[mid], &a[last]); /* the median, as pivot, at the end */
        samp_cand pivot = a[last];
        int st = lo;
        double w = 0.0; /* weight of the candidates before the pivot */
        for (int i = lo; i < last; i++)
            if (cand_before(&a[i], &pivot)) {
                w += a[i].v;
                cand_swap(&a[i], &a[st++]);
            }
        cand_swap(&a[st], &a[last]); /* a[lo..st) before, a[st] pivot, after that after */
        if (acc + w > target) hi = st;
        else if (acc + w + pivot.v > target) return st + 1;
        else {
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

int samp_sample(sampler *s, float *logits, const int32_t *history, int n_history) {
    if (!s || !logits || n_history < 0 || (!history && n_history > 0)) return CK_EINVAL;
    int rc = apply_penalty(s, logits, history, n_history);
    if (rc != 0) return rc;
    const samp_params *p = &s->p;
    if (p->temperature == 0.0f) return samp_argmax(logits, s->n);

    /* candidates; top-k on the logits (the temperature does not reorder them) */
    samp_cand *c = s->cand;
    int nc = s->n;
    float mx = -INFINITY;
    for (int i = 0; i < nc; i++) {
        float v = logits[i];
        if (v != v) v = -INFINITY;
        c[i].v = v;
        c[i].id = i;
        if (v > mx) mx = v;
    }
    if (mx == -INFINITY) return CK_EINVAL;
    if (p->top_k > 0 && p->top_k < nc) {
        select_top(c, nc, p->top_k);
        nc = p->top_k;
    }

    /* softmax at the temperature, unnormalised: the max gets weight 1 */
    float inv_t = 1.0f / p->temperature;
    double sum = 0.0;
    for (int i = 0; i < nc; i++) {
        c[i].v = expf((c[i].v - mx) * inv_t);
        sum += c[i].v;
    }

    /* min-p: keep p >= min_p * p_max, and p_max's weight is 1 */
    if (p->min_p > 0.0f) {
        int k = 0;
        sum = 0.0;
        for (int i = 0; i < nc; i++)
            if (c[i].v >= p->min_p) {
                c[k++] = c[i];
                sum += c[i].v;
            }
        nc = k;
    }

    /* top-p: the smallest most-probable set with mass > top_p. A candidate with
     * p < (1 - top_p) / (nc - 1) cannot be in it (all of them together hold
     * less than 1 - top_p), so those are dropped first (llama2.c's trick);
     * the rest is partitioned, not sorted. */
    if (p->top_p < 1.0f && nc > 1) {
        double cutoff = (1.0 - p->top_p) * sum / (nc - 1);
        if (cutoff > 1.0) cutoff = 1.0; /* the max (weight 1) always stays */
        int k = 0;
        for (int i = 0; i < nc; i++)
            if (c[i].v >= cutoff) c[k++] = c[i];
        nc = nucleus(c, k, p->top_p * sum);
        sum = 0.0;
        for (int i = 0; i < nc; i++) sum += c[i].v;
    }

    /* draw */
    double r = rng_unit(&s->rng) * sum, cdf = 0.0;
    for (int i = 0; i < nc; i++) {
        cdf += c[i].v;
        if (r < cdf) return c[i].id;
    }
    return c[nc - 1].id; /* rounding: r fell on the total */
}
