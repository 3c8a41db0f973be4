/* test_samp.c - confidence signals against a two-pass double-precision
 * reference; greedy, seeding, and the sampling filters, checked exactly where
 * they are deterministic and statistically where they are not. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "ck_test.h"
#include "samp.h"

static uint64_t rs = 88172645463325252ull;
static double urand(void) { /* xorshift64*, [0, 1) */
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (double)((rs * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}
static double nrand(void) { /* standard normal */
    double u = urand() + 1e-300, v = urand();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* two passes, double precision. The entropy as log Z + sum p (m - x), with
 * Z = 1 + (the others), so that log Z keeps its digits when Z is near 1. */
static void ref_conf(const float *x, int n, double *h, double *pmax, double *gap, int *am) {
    double m = -INFINITY, m2 = -INFINITY;
    int a = 0;
    for (int i = 0; i < n; i++) {
        if (x[i] > m) {
            m2 = m;
            m = x[i];
            a = i;
        } else if (x[i] > m2) {
            m2 = x[i];
        }
    }
    double rest = 0.0, t = 0.0;
    for (int i = 0; i < n; i++) {
        if (i == a || x[i] == -INFINITY) continue;
        double w = exp((double)x[i] - m);
        rest += w;
        t += (m - (double)x[i]) * w;
    }
    double z = 1.0 + rest;
    *h = log1p(rest) + t / z;
    *pmax = 1.0 / z;
    *gap = -expm1(m2 - m) / z;
    *am = a;
}

static int rel_ok(double got, double want, double rel) {
    return fabs(got - want) <= rel * fabs(want) + 1e-30;
}

/* check one logit vector; returns 0 or a line number */
static int check_conf(const float *x, int n) {
    samp_conf c;
    int am = -1;
    if (samp_confidence(x, n, &c, &am) != 0) return __LINE__;
    double h, pm, g;
    int ra;
    ref_conf(x, n, &h, &pm, &g, &ra);
    if (am != ra) return __LINE__;
    if (!rel_ok(c.entropy, h, 1e-4)) {
        fprintf(stderr, "n %d: entropy %.9g vs %.9g\n", n, c.entropy, h);
        return __LINE__;
    }
    if (!rel_ok(c.pmax, pm, 1e-4)) return __LINE__;
    if (!rel_ok(c.gap, g, 1e-4) && !(fabs(c.gap - g) < 1e-7)) {
        fprintf(stderr, "n %d: gap %.9g vs %.9g\n", n, c.gap, g);
        return __LINE__;
    }
    return 0;
}

static void test_confidence_accuracy(void) {
    static const int sizes[] = {2, 3, 7, 31, 32, 33, 47, 512, 1000, 32000};
    static const double scales[] = {1e-3, 0.1, 1.0, 3.0, 10.0, 30.0};
    static float x[32000];
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++) {
        int n = sizes[a];
        for (size_t b = 0; b < sizeof scales / sizeof scales[0]; b++) {
            for (int rep = 0; rep < 3; rep++) {
                double off = (urand() - 0.5) * 200.0; /* logits need not be centred */
                for (int i = 0; i < n; i++) x[i] = (float)(off + scales[b] * nrand());
                int line = check_conf(x, n);
                CK_CHECK_MSG(line == 0, "n %d scale %g: line %d", n, scales[b], line);
            }
        }
        /* flat: entropy log n exactly, gap 0 */
        for (int i = 0; i < n; i++) x[i] = 1.25f;
        samp_conf c;
        int am;
        CK_CHECK(samp_confidence(x, n, &c, &am) == 0);
        CK_CHECK(rel_ok(c.entropy, log((double)n), 1e-5) && am == 0 && c.gap == 0.0f);
        CK_CHECK(rel_ok(c.pmax, 1.0 / n, 1e-5));
        CK_CHECK(check_conf(x, n) == 0);
        /* very peaked: one logit far above the rest, at varying positions */
        for (int gapv = 8; gapv <= 60; gapv += 13) {
            for (int i = 0; i < n; i++) x[i] = (float)nrand();
            int top = (int)(urand() * n);
            x[top] = (float)gapv;
            int line = check_conf(x, n);
            CK_CHECK_MSG(line == 0, "peaked n %d gap %d: line %d", n, gapv, line);
            CK_CHECK(samp_confidence(x, n, &c, &am) == 0 && am == top);
        }
        /* max late in the array (crosses lanes and the tail) */
        for (int i = 0; i < n; i++) x[i] = (float)(i % 5);
        x[n - 1] = 9.0f;
        CK_CHECK(check_conf(x, n) == 0);
        /* masked tokens: -inf logits */
        for (int i = 0; i < n; i++) x[i] = (i % 3 == 0) ? (float)nrand() : -INFINITY;
        CK_CHECK_MSG(check_conf(x, n) == 0, "masked n %d", n);
        for (int i = 0; i < n; i++) x[i] = -INFINITY;
        x[n / 2] = 3.0f;
        CK_CHECK(samp_confidence(x, n, &c, &am) == 0);
        CK_CHECK(c.entropy == 0.0f && c.pmax == 1.0f && c.gap == 1.0f && am == n / 2);
    }
}

static void test_confidence_ties_and_errors(void) {
    float x[100];
    for (int i = 0; i < 100; i++) x[i] = (float)(i % 10);
    samp_conf c;
    int am = -1;
    CK_CHECK(samp_confidence(x, 100, &c, &am) == 0);
    CK_CHECK(am == 9 && c.gap == 0.0f); /* first of ten maxima */
    x[0] = x[1] = 5.0f;
    CK_CHECK(samp_confidence(x, 2, &c, &am) == 0 && am == 0 && c.gap == 0.0f);
    CK_CHECK_NEAR(c.entropy, log(2.0), 1e-6);
    CK_CHECK_NEAR(c.pmax, 0.5, 1e-7);
    CK_CHECK(samp_confidence(x, 2, &c, NULL) == 0);
    CK_CHECK(samp_confidence(x, 1, &c, &am) == CK_EINVAL);
    CK_CHECK(samp_confidence(NULL, 2, &c, &am) == CK_EINVAL);
    CK_CHECK(samp_confidence(x, 2, NULL, &am) == CK_EINVAL);
    for (int i = 0; i < 100; i++) x[i] = -INFINITY;
    CK_CHECK(samp_confidence(x, 100, &c, &am) == CK_ENONFINITE);
    CK_CHECK(samp_confidence(x, 5, &c, &am) == CK_ENONFINITE);
    CK_CHECK(samp_argmax(x, 100) == CK_ENONFINITE);
    for (int i = 0; i < 100; i++) x[i] = NAN; /* a corrupt model's logits */
    CK_CHECK(samp_confidence(x, 100, &c, &am) == CK_ENONFINITE);
    CK_CHECK(samp_argmax(x, 100) == CK_ENONFINITE);
    x[37] = INFINITY;
    CK_CHECK(samp_confidence(x, 100, &c, &am) == CK_ENONFINITE);
}

/* samp_argmax against a scalar scan: every length around the vector width,
 * the max in the tail, ties across lanes, NaN and -inf mixed in. */
static void test_argmax_cases(void) {
    static float x[200];
    for (int n = 1; n <= 200; n++)
        for (int it = 0; it < 40; it++) {
            for (int i = 0; i < n; i++) {
                double u = urand();
                x[i] = u < 0.1 ? NAN : u < 0.2 ? -INFINITY : (float)(int)(4.0 * nrand()); /* many ties */
            }
            int want = CK_ENONFINITE;
            for (int i = 0; i < n; i++)
                if (x[i] > -INFINITY && (want < 0 || x[i] > x[want])) want = i;
            CK_CHECK(samp_argmax(x, n) == want);
        }
    for (int i = 0; i < 200; i++) x[i] = 1.0f;
    x[191] = 2.0f;
    CK_CHECK(samp_argmax(x, 200) == 191); /* the max in the last lane of the last set */
    x[191] = NAN;
    CK_CHECK(samp_argmax(x, 200) == 0);
    x[199] = 3.0f;
    CK_CHECK(samp_argmax(x, 200) == 199); /* in the scalar tail */
    /* samp_confidence's argmax is the same, NaN in a lane's first slot included */
    for (int n = 2; n <= 200; n++)
        for (int it = 0; it < 20; it++) {
            for (int i = 0; i < n; i++) {
                double u = urand();
                x[i] = (i < 40 && u < 0.3) || u < 0.05 ? NAN
                       : u < 0.1                       ? -INFINITY
                                                       : (float)(int)(4.0 * nrand());
            }
            samp_conf cf;
            int am = -7, want = samp_argmax(x, n);
            int rc = samp_confidence(x, n, &cf, &am);
            CK_CHECK(want < 0 ? rc == CK_ENONFINITE : rc == 0 && am == want);
        }
    CK_CHECK(samp_argmax(x, 0) == CK_EINVAL && samp_argmax(NULL, 5) == CK_EINVAL);
}

static void test_confidence_speed(void) {
    static float x[32000];
    for (int i = 0; i < 32000; i++) x[i] = (float)(3.0 * nrand());
    samp_conf c;
    int am;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int reps = 2000;
    float sink = 0;
    for (int r = 0; r < reps; r++) {
        x[r % 32000] += 1e-3f;
        CK_CHECK(samp_confidence(x, 32000, &c, &am) == 0);
        sink += c.entropy;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / reps;
    fprintf(stderr, "     samp_confidence(32000): %.1f us/call (entropy %.3f)\n", us, sink / reps);
}

/* ---------------------------------------------------------------------------
 * the sampler */

static sampler *mk(int n, float temp, float top_p, int top_k, float min_p, float pen, uint64_t seed) {
    samp_params p;
    samp_params_default(&p);
    p.temperature = temp;
    p.top_p = top_p;
    p.top_k = top_k;
    p.min_p = min_p;
    p.repeat_penalty = pen;
    p.seed = seed;
    sampler *s = NULL;
    if (samp_new(n, &p, &s) != 0) return NULL;
    return s;
}

static void test_params(void) {
    samp_params p;
    samp_params_default(&p);
    CK_CHECK(p.temperature == 1.0f && p.top_p == 1.0f && p.top_k == 0 && p.min_p == 0.0f &&
             p.repeat_penalty == 1.0f && p.repeat_last_n == 64 && p.seed == 0);
    CK_CHECK(samp_params_check(&p) == 0);
    sampler *s = (sampler *)1;
    samp_params q = p;
    q.temperature = -1;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL && s == NULL);
    q = p;
    q.temperature = NAN;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    q = p;
    q.top_p = 1.5f;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    q = p;
    q.top_k = -2;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    q = p;
    q.min_p = -0.1f;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    q = p;
    q.repeat_penalty = 0.0f;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    q = p;
    q.repeat_last_n = -2;
    CK_CHECK(samp_new(10, &q, &s) == CK_EINVAL);
    CK_CHECK(samp_new(0, &p, &s) == CK_EINVAL);
    CK_CHECK(samp_new(10, NULL, &s) == 0 && s != NULL); /* defaults */
    float l[10] = {0};
    CK_CHECK(samp_sample(s, NULL, NULL, 0) == CK_EINVAL);
    CK_CHECK(samp_sample(s, l, NULL, 3) == CK_EINVAL);
    int32_t h[2] = {3, 10};
    samp_free(s);
    s = mk(10, 1.0f, 1.0f, 0, 0.0f, 1.3f, 1);
    CK_CHECK(s != NULL);
    CK_CHECK(samp_sample(s, l, h, 2) == CK_EINVAL); /* id 10 out of range */
    for (int i = 0; i < 10; i++) l[i] = -INFINITY;
    CK_CHECK(samp_sample(s, l, NULL, 0) == CK_ENONFINITE);
    for (int i = 0; i < 10; i++) l[i] = NAN; /* a corrupt model's logits, sampled */
    CK_CHECK(samp_sample(s, l, NULL, 0) == CK_ENONFINITE);
    samp_free(s);
    s = mk(10, 0.0f, 1.0f, 0, 0.0f, 1.0f, 1); /* and greedy */
    CK_CHECK(s != NULL);
    for (int i = 0; i < 10; i++) l[i] = NAN;
    CK_CHECK(samp_sample(s, l, NULL, 0) == CK_ENONFINITE);
    samp_free(s);
    samp_free(NULL);
}

static void test_greedy(void) {
    enum { N = 1000 };
    static float l[N], c[N];
    sampler *s = mk(N, 0.0f, 1.0f, 0, 0.0f, 1.0f, 7);
    CK_CHECK(s != NULL);
    for (int it = 0; it < 50; it++) {
        for (int i = 0; i < N; i++) l[i] = (float)nrand();
        int want = 0;
        for (int i = 1; i < N; i++)
            if (l[i] > l[want]) want = i;
        memcpy(c, l, sizeof l);
        CK_CHECK(samp_sample(s, c, NULL, 0) == want);
        CK_CHECK(samp_argmax(l, N) == want);
        samp_conf cf;
        int am;
        CK_CHECK(samp_confidence(l, N, &cf, &am) == 0 && am == want);
    }
    for (int i = 0; i < N; i++) l[i] = (float)(i % 7 == 3);
    CK_CHECK(samp_sample(s, l, NULL, 0) == 3); /* ties -> lowest id */
    samp_free(s);
}

/* a stream of tokens from pseudo-random logits that depend only on the step */
static int run_stream(sampler *s, int n, int steps, int32_t *out) {
    float *l = malloc((size_t)n * sizeof *l);
    uint64_t save = rs;
    rs = 12345;
    for (int t = 0; t < steps; t++) {
        for (int i = 0; i < n; i++) l[i] = (float)(2.0 * nrand());
        int id = samp_sample(s, l, out, t);
        if (id < 0) {
            free(l);
            rs = save;
            return id;
        }
        out[t] = id;
    }
    free(l);
    rs = save;
    return 0;
}

static void test_determinism(void) {
    enum { N = 512, T = 200 };
    int32_t a[T], b[T], c[T], d[T];
    sampler *s1 = mk(N, 1.0f, 0.9f, 40, 0.05f, 1.1f, 42);
    sampler *s2 = mk(N, 1.0f, 0.9f, 40, 0.05f, 1.1f, 42);
    sampler *s3 = mk(N, 1.0f, 0.9f, 40, 0.05f, 1.1f, 43);
    CK_CHECK(s1 && s2 && s3);
    CK_CHECK(run_stream(s1, N, T, a) == 0);
    CK_CHECK(run_stream(s2, N, T, b) == 0);
    CK_CHECK(run_stream(s3, N, T, c) == 0);
    CK_CHECK(memcmp(a, b, sizeof a) == 0);
    CK_CHECK(memcmp(a, c, sizeof a) != 0);
    samp_reset(s3, 42); /* now as s1 was */
    CK_CHECK(run_stream(s3, N, T, d) == 0);
    CK_CHECK(memcmp(a, d, sizeof a) == 0);
    int distinct = 0;
    for (int t = 1; t < T; t++) distinct += a[t] != a[t - 1];
    CK_CHECK(distinct > T / 2); /* it does sample */
    samp_free(s1);
    samp_free(s2);
    samp_free(s3);
}

static void test_filters_equal_greedy(void) {
    enum { N = 2000 };
    static float l[N], c[N];
    sampler *k1 = mk(N, 1.0f, 1.0f, 1, 0.0f, 1.0f, 1);
    sampler *p0 = mk(N, 1.0f, 1e-6f, 0, 0.0f, 1.0f, 2);
    sampler *pz = mk(N, 0.7f, 0.0f, 0, 0.0f, 1.0f, 3);
    sampler *m1 = mk(N, 1.5f, 1.0f, 0, 1.0f, 1.0f, 4);
    CK_CHECK(k1 && p0 && pz && m1);
    for (int it = 0; it < 100; it++) {
        for (int i = 0; i < N; i++) l[i] = (float)(nrand() * (it % 2 ? 0.01 : 3.0));
        int want = samp_argmax(l, N);
        memcpy(c, l, sizeof l);
        CK_CHECK(samp_sample(k1, c, NULL, 0) == want);
        memcpy(c, l, sizeof l);
        CK_CHECK(samp_sample(p0, c, NULL, 0) == want);
        memcpy(c, l, sizeof l);
        CK_CHECK(samp_sample(pz, c, NULL, 0) == want);
        memcpy(c, l, sizeof l);
        CK_CHECK(samp_sample(m1, c, NULL, 0) == want);
    }
    samp_free(k1);
    samp_free(p0);
    samp_free(pz);
    samp_free(m1);
}

/* draw `draws` tokens from fixed logits; counts per id */
static int histogram(sampler *s, const float *logits, int n, int draws, long *counts) {
    float c[64];
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int d = 0; d < draws; d++) {
        memcpy(c, logits, (size_t)n * sizeof *c);
        int id = samp_sample(s, c, NULL, 0);
        if (id < 0 || id >= n) return -1;
        counts[id]++;
    }
    return 0;
}

/* chi-square of counts against probabilities q (entries with q = 0 must be
 * empty) */
static double chi2(const long *counts, const double *q, int n, int draws, int *bad) {
    double x = 0;
    *bad = 0;
    for (int i = 0; i < n; i++) {
        if (q[i] == 0) {
            if (counts[i]) *bad = 1;
            continue;
        }
        double e = q[i] * draws;
        x += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x;
}

static void softmax_d(const float *l, int n, double t, double *q) {
    double m = -INFINITY, z = 0;
    for (int i = 0; i < n; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < n; i++) z += q[i] = exp((l[i] - m) / t);
    for (int i = 0; i < n; i++) q[i] /= z;
}

static void test_statistics(void) {
    enum { N = 10, D = 200000 };
    const float l[N] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -2.0f, 1.5f, 0.2f};
    long counts[N];
    double q[N];
    int bad;
    /* 9 degrees of freedom: P(chi2 > 33.7) = 1e-4 */
    const double lim = 33.7;

    sampler *s = mk(N, 1.0f, 1.0f, 0, 0.0f, 1.0f, 2024);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 1.0, q);
    double x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "temperature 1: chi2 %.1f", x);
    samp_free(s);

    s = mk(N, 0.6f, 1.0f, 0, 0.0f, 1.0f, 99);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 0.6, q);
    x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "temperature 0.6: chi2 %.1f", x);
    samp_free(s);

    /* top-k 3: ids 4, 6, 1, renormalised */
    s = mk(N, 1.0f, 1.0f, 3, 0.0f, 1.0f, 5);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 1.0, q);
    double z = q[4] + q[6] + q[1];
    for (int i = 0; i < N; i++) q[i] = (i == 4 || i == 6 || i == 1) ? q[i] / z : 0;
    x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "top-k 3: chi2 %.1f", x);
    samp_free(s);

    /* top-p 0.7: the smallest top set with mass > 0.7: ids 4, 6, 1 hold 0.392,
     * 0.238, 0.144 */
    s = mk(N, 1.0f, 0.7f, 0, 0.0f, 1.0f, 6);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 1.0, q);
    CK_CHECK(q[4] + q[6] < 0.7 && q[4] + q[6] + q[1] > 0.7);
    z = q[4] + q[6] + q[1];
    for (int i = 0; i < N; i++) q[i] = (i == 4 || i == 6 || i == 1) ? q[i] / z : 0;
    x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "top-p 0.7: chi2 %.1f", x);
    samp_free(s);

    /* min-p 0.2: keep p >= 0.2 p_max, i.e. logit >= 3 + log 0.2 = 1.39 */
    s = mk(N, 1.0f, 1.0f, 0, 0.2f, 1.0f, 7);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 1.0, q);
    z = 0;
    for (int i = 0; i < N; i++) z += l[i] >= 1.39f ? q[i] : 0;
    for (int i = 0; i < N; i++) q[i] = l[i] >= 1.39f ? q[i] / z : 0;
    x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "min-p 0.2: chi2 %.1f", x);
    CK_CHECK(counts[0] == 0 && counts[8] > 0); /* 1.0 cut, 1.5 kept */
    samp_free(s);

    /* min-p then top-p, renormalised over what min-p kept: min-p 0.2 keeps
     * {4, 6, 1, 8}, which hold {0.455, 0.276, 0.167, 0.102} of the kept mass;
     * top-p 0.72 then keeps {4, 6} (0.731). Without renormalising, 4 and 6
     * hold 0.630 of the whole and 1 would join. */
    s = mk(N, 1.0f, 0.72f, 0, 0.2f, 1.0f, 8);
    CK_CHECK(s && histogram(s, l, N, D, counts) == 0);
    softmax_d(l, N, 1.0, q);
    z = q[4] + q[6];
    for (int i = 0; i < N; i++) q[i] = (i == 4 || i == 6) ? q[i] / z : 0;
    x = chi2(counts, q, N, D, &bad);
    CK_CHECK_MSG(x < lim && !bad, "min-p + top-p: chi2 %.1f", x);
    samp_free(s);
}

static void test_penalty(void) {
    enum { N = 10, D = 100000 };
    const float l[N] = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 2.5f, -2.0f, 1.5f, 0.2f};
    float c[N];
    /* the transform itself: once per distinct token, only the last n */
    samp_params p;
    samp_params_default(&p);
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    sampler *s = NULL;
    CK_CHECK(samp_new(N, &p, &s) == 0);
    int32_t hist[] = {1, 4, 4, 3, 4}; /* last 3: 4, 3, 4 */
    memcpy(c, l, sizeof c);
    int id = samp_sample(s, c, hist, 5);
    CK_CHECK(c[4] == 1.5f && c[3] == -2.0f && c[1] == 2.0f); /* 3/2, -1*2, untouched */
    CK_CHECK(id == 6);                                       /* 2.5 is now the best */
    samp_free(s);
    p.repeat_last_n = -1; /* whole history */
    CK_CHECK(samp_new(N, &p, &s) == 0);
    memcpy(c, l, sizeof c);
    samp_sample(s, c, hist, 5);
    CK_CHECK(c[1] == 1.0f && c[4] == 1.5f && c[3] == -2.0f);
    samp_free(s);
    p.repeat_last_n = 0; /* off */
    CK_CHECK(samp_new(N, &p, &s) == 0);
    memcpy(c, l, sizeof c);
    CK_CHECK(samp_sample(s, c, hist, 5) == 4 && memcmp(c, l, sizeof c) == 0);
    samp_free(s);

    /* and in distribution: token 4's frequency drops */
    long with[N], without[N];
    s = mk(N, 1.0f, 1.0f, 0, 0.0f, 1.0f, 11);
    CK_CHECK(s && histogram(s, l, N, D, without) == 0);
    samp_free(s);
    s = mk(N, 1.0f, 1.0f, 0, 0.0f, 1.5f, 11);
    float pc[N];
    memset(with, 0, sizeof with);
    int32_t h1[] = {4};
    for (int d = 0; d < D; d++) {
        memcpy(pc, l, sizeof pc);
        id = samp_sample(s, pc, h1, 1);
        CK_CHECK(id >= 0 && id < N);
        with[id]++;
    }
    samp_free(s);
    double expect4; /* softmax with logit 4 = 3 / 1.5 = 2 */
    {
        float l2[N];
        double q[N];
        memcpy(l2, l, sizeof l2);
        l2[4] = 2.0f;
        softmax_d(l2, N, 1.0, q);
        expect4 = q[4];
    }
    CK_CHECK(with[4] < without[4] * 0.7);
    CK_CHECK_NEAR((double)with[4] / D, expect4, 0.01);
}

static void test_large_vocab(void) {
    /* 32000 tokens, all filters on: valid ids, and the top-p path is quick */
    enum { N = 32000 };
    static float l[N], c[N];
    for (int i = 0; i < N; i++) l[i] = (float)(2.5 * nrand());
    sampler *s = mk(N, 0.8f, 0.95f, 0, 0.0f, 1.0f, 3);
    sampler *k = mk(N, 1.0f, 0.9f, 100, 0.01f, 1.1f, 3);
    CK_CHECK(s && k);
    int32_t hist[64];
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int it = 0; it < 200; it++) {
        memcpy(c, l, sizeof l);
        int id = samp_sample(s, c, NULL, 0);
        CK_CHECK(id >= 0 && id < N);
        memcpy(c, l, sizeof l);
        hist[it % 64] = id;
        id = samp_sample(k, c, hist, it < 64 ? it + 1 : 64);
        CK_CHECK(id >= 0 && id < N);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / 400;
    fprintf(stderr, "     samp_sample(32000): %.1f us/call\n", us);
    /* top-k equals the k largest: with k = 5 only those ever come out */
    sampler *k5 = mk(N, 5.0f, 1.0f, 5, 0.0f, 1.0f, 9);
    CK_CHECK(k5 != NULL);
    for (int i = 0; i < N; i++) l[i] = (float)(i % 1000); /* 32 tokens tie at 999 */
    for (int it = 0; it < 500; it++) {
        memcpy(c, l, sizeof l);
        int id = samp_sample(k5, c, NULL, 0);
        /* ties broken towards low ids: 999, 1999, ..., 4999 */
        CK_CHECK_MSG(id % 1000 == 999 && id < 5000, "id %d", id);
    }
    samp_free(s);
    samp_free(k);
    samp_free(k5);
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x > y ? -1 : x < y ? 1 : 0;
}

static void test_top_p_large(void) {
    /* the nucleus on a big vocabulary (partitioned, several levels deep) is
     * the sorted prefix: every draw is inside it, and most of it is drawn */
    enum { N = 5000, D = 3000 };
    static float l[N], c[N];
    static double q[N], sorted[N];
    static char drawn[N];
    const float tps[] = {0.3f, 0.8f, 0.97f};
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < N; i++) l[i] = (float)(1.5 * nrand());
        softmax_d(l, N, 1.0, q);
        memcpy(sorted, q, sizeof q);
        qsort(sorted, N, sizeof sorted[0], cmp_desc);
        double cum = 0, floor_p = 0;
        int k = 0;
        while (k < N) {
            cum += sorted[k++];
            if (cum > tps[t]) break;
        }
        floor_p = sorted[k - 1]; /* the least probable member */
        sampler *s = mk(N, 1.0f, tps[t], 0, 0.0f, 1.0f, 77 + t);
        CK_CHECK(s != NULL);
        memset(drawn, 0, sizeof drawn);
        int distinct = 0;
        for (int d = 0; d < D; d++) {
            memcpy(c, l, sizeof l);
            int id = samp_sample(s, c, NULL, 0);
            CK_CHECK(id >= 0 && id < N);
            CK_CHECK_MSG(q[id] >= floor_p * (1 - 1e-6), "top-p %g: id %d outside", tps[t], id);
            distinct += !drawn[id];
            drawn[id] = 1;
        }
        samp_free(s);
        /* expected distinct draws from k candidates: a good share of them */
        CK_CHECK_MSG(distinct > (k < D ? k : D) / 4, "top-p %g: %d distinct of %d", tps[t], distinct, k);
    }
}

int main(void) {
    CK_RUN(test_confidence_accuracy);
    CK_RUN(test_confidence_ties_and_errors);
    CK_RUN(test_confidence_speed);
    CK_RUN(test_params);
    CK_RUN(test_greedy);
    CK_RUN(test_argmax_cases);
    CK_RUN(test_determinism);
    CK_RUN(test_filters_equal_greedy);
    CK_RUN(test_statistics);
    CK_RUN(test_penalty);
    CK_RUN(test_large_vocab);
    CK_RUN(test_top_p_large);
    return ck_test_summary();
}
