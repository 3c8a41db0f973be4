/* test_quant.c - tensor type table and f32 <-> f16/bf16/q8_0 conversions. */
#include <stdint.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "quant.h"

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* xorshift64*: deterministic test data */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static float rng_uniform(uint64_t *s) { /* [-1, 1) */
    return (float)((double)(rng_next(s) >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static void test_type_table(void) {
    CK_CHECK(strcmp(quant_type_name(QUANT_F32), "f32") == 0);
    CK_CHECK(strcmp(quant_type_name(QUANT_F16), "f16") == 0);
    CK_CHECK(strcmp(quant_type_name(QUANT_Q8_0), "q8_0") == 0);
    CK_CHECK(strcmp(quant_type_name(QUANT_BF16), "bf16") == 0);
    CK_CHECK(quant_type_name(2) == NULL && quant_type_name(-1) == NULL);
    CK_CHECK(quant_type_from_name("f32") == QUANT_F32);
    CK_CHECK(quant_type_from_name("f16") == QUANT_F16);
    CK_CHECK(quant_type_from_name("q8_0") == QUANT_Q8_0);
    CK_CHECK(quant_type_from_name("bf16") == QUANT_BF16);
    CK_CHECK(quant_type_from_name("q4_0") == -1);
    CK_CHECK(quant_type_from_name("F32") == -1);
    CK_CHECK(quant_type_from_name(NULL) == -1);
    CK_CHECK(quant_block_size(QUANT_Q8_0) == 32);
    CK_CHECK(quant_block_size(QUANT_F16) == 1);
    CK_CHECK(quant_block_size(7) == CK_EUNSUPPORTED);
}

static void test_row_bytes(void) {
    uint64_t b = 0;
    CK_CHECK(quant_row_bytes(QUANT_F32, 10, &b) == 0 && b == 40);
    CK_CHECK(quant_row_bytes(QUANT_F16, 10, &b) == 0 && b == 20);
    CK_CHECK(quant_row_bytes(QUANT_BF16, 7, &b) == 0 && b == 14);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 64, &b) == 0 && b == 68);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 4096, &b) == 0 && b == 4352);
    CK_CHECK(quant_row_bytes(QUANT_F32, 0, &b) == 0 && b == 0);
    b = 12345;
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 33, &b) == CK_EFORMAT && b == 12345);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 16, &b) == CK_EFORMAT);
    CK_CHECK(quant_row_bytes(2, 32, &b) == CK_EUNSUPPORTED);
    CK_CHECK(quant_row_bytes(1000, 32, &b) == CK_EUNSUPPORTED);
    CK_CHECK(quant_row_bytes(QUANT_F32, UINT64_MAX / 2, &b) == CK_ERANGE);
    CK_CHECK(quant_row_bytes(QUANT_F32, UINT64_MAX / 4, &b) == 0 &&
             b == UINT64_MAX / 4 * 4);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, UINT64_MAX / 32 * 32, &b) == CK_ERANGE);
    CK_CHECK(quant_row_bytes(QUANT_F16, UINT64_MAX, &b) == CK_ERANGE);
    CK_CHECK(quant_row_bytes(QUANT_F32, 1, NULL) == CK_EINVAL);
}

static void test_f16_known(void) {
    static const struct {
        float f;
        uint16_t h;
    } cases[] = {
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {1.0f, 0x3C00},
        {-2.0f, 0xC000},
        {0.5f, 0x3800},
        {65504.0f, 0x7BFF},           /* largest finite */
        {65519.0f, 0x7BFF},           /* below the half-way point */
        {65520.0f, 0x7C00},           /* half-way: ties to even = inf */
        {-65520.0f, 0xFC00},
        {1e10f, 0x7C00},
        {0x1p-14f, 0x0400},           /* smallest normal */
        {0x1p-24f, 0x0001},           /* smallest subnormal */
        {0x1p-25f, 0x0000},           /* tie between 0 and 2^-24: even */
        {0x1.000002p-25f, 0x0001},    /* just above the tie */
        {0x1.8p-24f, 0x0002},         /* 1.5 ulp: tie, rounds to even 2 */
        {0x1.4p-23f, 0x0002},         /* 2.5 ulp: tie, rounds to even 2 */
        {0x1.ff8p-15f, 0x03FF},       /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},       /* tie with the smallest normal: even */
        {0x1.ffap-15f, 0x03FF},
        {1.0f + 0x1p-11f, 0x3C00},    /* tie: even mantissa 0 */
        {1.0f + 0x1.8p-10f, 0x3C02},  /* tie between 0x3C01 and 0x3C02 */
        {1.0f + 0x1p-10f, 0x3C01},
        {0.1f, 0x2E66},
        {3.14159265f, 0x4248},
        {-1e-10f, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = quant_f32_to_f16(cases[i].f);
        CK_CHECK_MSG(h == cases[i].h, "%a -> 0x%04x, want 0x%04x",
                     (double)cases[i].f, h, cases[i].h);
    }
    CK_CHECK(quant_f32_to_f16(INFINITY) == 0x7C00);
    CK_CHECK(quant_f32_to_f16(-INFINITY) == 0xFC00);
    uint16_t hn = quant_f32_to_f16(NAN);
    CK_CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    /* a signalling NaN whose payload sits in the low bits stays a NaN */
    hn = quant_f32_to_f16(float_of(0x7F800001u));
    CK_CHECK((hn & 0x7C00) == 0x7C00 && (hn & 0x3FF) != 0);
    CK_CHECK(quant_f16_to_f32(0x3C00) == 1.0f);
    CK_CHECK(quant_f16_to_f32(0x7BFF) == 65504.0f);
    CK_CHECK(quant_f16_to_f32(0x0001) == 0x1p-24f);
    CK_CHECK(quant_f16_to_f32(0x03FF) == 0x1.ff8p-15f);
    CK_CHECK(bits_of(quant_f16_to_f32(0x8000)) == 0x80000000u);
    CK_CHECK(isinf(quant_f16_to_f32(0x7C00)) && quant_f16_to_f32(0xFC00) < 0);
    CK_CHECK(isnan(quant_f16_to_f32(0x7E00)) && isnan(quant_f16_to_f32(0x7C01)));
}

/* Every half value survives f16 -> f32 -> f16, and the f32 is the exact
 * value of the half (checked against a formula). */
static void test_f16_exhaustive(void) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
        if (e == 0x1F) {
            CK_CHECK_MSG(m ? isnan(f) : isinf(f), "h=0x%04x", h);
            if (m)
                CK_CHECK_MSG(quant_f32_to_f16(f) == (h | 0x200),
                             "nan 0x%04x -> 0x%04x", h, quant_f32_to_f16(f));
            continue;
        }
        double want = e ? ldexp(1.0 + m / 1024.0, (int)e - 15)
                        : ldexp(m / 1024.0, -14);
        if (h & 0x8000)
            want = -want;
        CK_CHECK_MSG((double)f == want, "h=0x%04x: %a vs %a", h, (double)f,
                     want);
        CK_CHECK_MSG(quant_f32_to_f16(f) == h, "round trip 0x%04x", h);
    }
    /* the row conversions (vectorised) agree with the scalar ones */
    static uint16_t hs[0x10000], back[0x10000];
    static float fs[0x10000];
    for (uint32_t h = 0; h < 0x10000; h++)
        hs[h] = (uint16_t)h;
    CK_CHECK(quant_to_f32(QUANT_F16, hs, fs, 0x10000) == 0);
    CK_CHECK(quant_from_f32(QUANT_F16, fs, back, 0x10000) == 0);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_f16_to_f32((uint16_t)h);
        CK_CHECK_MSG(bits_of(fs[h]) == bits_of(f), "row 0x%04x", h);
        CK_CHECK_MSG(back[h] == quant_f32_to_f16(f), "row back 0x%04x", h);
    }
}

/* f32 -> f16 rounds to nearest even: check every half-way point between
 * consecutive halves and the floats just around it. */
static void test_f16_rounding(void) {
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        double lo = quant_f16_to_f32((uint16_t)h);
        double hi = quant_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact in float */
        CK_CHECK((double)mid == (lo + hi) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        CK_CHECK_MSG(quant_f32_to_f16(mid) == even, "tie after 0x%04x", h);
        CK_CHECK_MSG(quant_f32_to_f16(-mid) == (even | 0x8000),
                     "neg tie after 0x%04x", h);
        CK_CHECK(quant_f32_to_f16(nextafterf(mid, 0.0f)) == h);
        CK_CHECK(quant_f32_to_f16(nextafterf(mid, INFINITY)) == h + 1);
    }
}

#ifdef __FLT16_MAX__
/* Compare with the compiler's own _Float16 conversion (correctly rounded by
 * IEEE rules) on a million floats spread over all exponents. */
static void test_f16_vs_compiler(void) {
    enum { N = 1 << 20 };
    static float fs[N];
    static uint16_t hs[N];
    uint64_t s = 0x1234567;
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)rng_next(&s);
        if (i % 2) /* concentrate on the half range: exponents 96..144 */
            u = (u & 0x807FFFFFu) | ((96u + (u >> 23) % 49u) << 23);
        fs[i] = isnan(float_of(u)) ? 0.0f : float_of(u);
    }
    CK_CHECK(quant_from_f32(QUANT_F16, fs, hs, N) == 0);
    for (int i = 0; i < N; i++) {
        _Float16 c = (_Float16)fs[i];
        uint16_t want;
        memcpy(&want, &c, 2);
        CK_CHECK_MSG(quant_f32_to_f16(fs[i]) == want, "%a: 0x%04x vs 0x%04x",
                     (double)fs[i], quant_f32_to_f16(fs[i]), want);
        CK_CHECK_MSG(hs[i] == want, "row %a", (double)fs[i]);
    }
}
#endif

static void test_bf16(void) {
    CK_CHECK(quant_f32_to_bf16(1.0f) == 0x3F80);
    CK_CHECK(quant_f32_to_bf16(-2.0f) == 0xC000);
    CK_CHECK(quant_f32_to_bf16(float_of(0x3F808000u)) == 0x3F80); /* tie, even */
    CK_CHECK(quant_f32_to_bf16(float_of(0x3F818000u)) == 0x3F82); /* tie, odd */
    CK_CHECK(quant_f32_to_bf16(float_of(0x3F808001u)) == 0x3F81);
    CK_CHECK(quant_f32_to_bf16(float_of(0x3F807FFFu)) == 0x3F80);
    CK_CHECK(quant_f32_to_bf16(INFINITY) == 0x7F80);
    CK_CHECK(quant_f32_to_bf16(float_of(0x7F7FFFFFu)) == 0x7F80); /* overflow */
    uint16_t n = quant_f32_to_bf16(float_of(0x7F800001u)); /* sNaN */
    CK_CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0 && (n & 0x40));
    CK_CHECK(quant_bf16_to_f32(0x3F80) == 1.0f);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        CK_CHECK(bits_of(f) == h << 16);
        if (!isnan(f))
            CK_CHECK_MSG(quant_f32_to_bf16(f) == h, "0x%04x", h);
    }
}

/* Row conversions agree with the scalar ones, accept unaligned pointers
 * and check their arguments. */
static void test_rows(void) {
    enum { N = 96 };
    float x[N], y[N];
    uint8_t buf[1 + N * 4];
    uint64_t s = 42;
    for (int i = 0; i < N; i++)
        x[i] = rng_uniform(&s) * 100.0f;
    const int types[] = {QUANT_F32, QUANT_F16, QUANT_BF16};
    for (size_t t = 0; t < 3; t++) {
        uint8_t *dst = buf + 1; /* unaligned on purpose */
        CK_CHECK(quant_from_f32(types[t], x, dst, N) == 0);
        CK_CHECK(quant_to_f32(types[t], dst, y, N) == 0);
        for (int i = 0; i < N; i++) {
            float want = x[i];
            if (types[t] == QUANT_F16)
                want = quant_f16_to_f32(quant_f32_to_f16(x[i]));
            else if (types[t] == QUANT_BF16)
                want = quant_bf16_to_f32(quant_f32_to_bf16(x[i]));
            CK_CHECK(bits_of(y[i]) == bits_of(want));
        }
    }
    CK_CHECK(quant_to_f32(QUANT_Q8_0, buf, y, 31) == CK_EFORMAT);
    CK_CHECK(quant_from_f32(QUANT_Q8_0, x, buf, 48) == CK_EFORMAT);
    CK_CHECK(quant_to_f32(2, buf, y, 32) == CK_EUNSUPPORTED);
    CK_CHECK(quant_to_f32(QUANT_F32, NULL, y, 1) == CK_EINVAL);
    CK_CHECK(quant_from_f32(QUANT_F32, x, NULL, 1) == CK_EINVAL);
    CK_CHECK(quant_to_f32(QUANT_F32, NULL, NULL, 0) == 0);
}

/* q8_0: ggml's layout and the error bound per block. */
static void test_q8_0(void) {
    enum { NB = 64, N = NB * 32 };
    static float x[N], y[N];
    static uint8_t q[NB * 34 + 1];
    uint64_t s = 7;
    for (int b = 0; b < NB; b++) {
        float scale = ldexpf(1.0f, (b % 24) - 12); /* 2^-12 .. 2^11 */
        for (int j = 0; j < 32; j++)
            x[b * 32 + j] = rng_uniform(&s) * scale;
    }
    for (int j = 0; j < 32; j++) /* an all-zero block */
        x[5 * 32 + j] = 0.0f;
    uint8_t *dst = q + 1; /* unaligned */
    CK_CHECK(quant_from_f32(QUANT_Q8_0, x, dst, N) == 0);
    CK_CHECK(quant_to_f32(QUANT_Q8_0, dst, y, N) == 0);
    for (int b = 0; b < NB; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        double d = amax / 127.0f;
        uint16_t dh;
        memcpy(&dh, dst + b * 34, 2);
        CK_CHECK(dh == quant_f32_to_f16((float)d));
        double d16 = quant_f16_to_f32(dh);
        double bound = d16 / 2 + 128 * fabs(d - d16) + 1e-6 * amax;
        for (int j = 0; j < 32; j++) {
            int8_t qj = (int8_t)dst[b * 34 + 2 + j];
            CK_CHECK(qj != -128);
            CK_CHECK_MSG(fabs(x[b * 32 + j] - y[b * 32 + j]) <= bound,
                         "block %d elem %d: %g vs %g (bound %g)", b, j,
                         (double)x[b * 32 + j], (double)y[b * 32 + j], bound);
        }
    }
    /* byte-identical to ggml's reference quantize_row_q8_0 (roundf) */
    for (int b = 0; b < NB; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t dh = quant_f32_to_f16(d);
        CK_CHECK(memcmp(dst + b * 34, &dh, 2) == 0);
        for (int j = 0; j < 32; j++)
            CK_CHECK_MSG((int8_t)dst[b * 34 + 2 + j] == (int8_t)roundf(xb[j] * id),
                         "block %d elem %d", b, j);
    }
    /* all-zero block: d = 0, q = 0, exact */
    for (int j = 0; j < 32; j++)
        CK_CHECK(y[5 * 32 + j] == 0.0f && dst[5 * 34 + 2 + j] == 0);
    /* a block whose max is 127: d = 1.0 (0x3C00) and q = x exactly */
    float z[32];
    uint8_t zq[34];
    for (int j = 0; j < 32; j++)
        z[j] = (float)(j * 8 - 127 + (j == 31 ? 2 : 0)); /* -127 .. 121 */
    z[3] = 127.0f;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == 0);
    CK_CHECK(zq[0] == 0x00 && zq[1] == 0x3C);
    for (int j = 0; j < 32; j++)
        CK_CHECK((int8_t)zq[2 + j] == (int)z[j]);
    /* rounding of q: half away from zero, as roundf in ggml */
    z[0] = 2.5f;
    z[1] = -2.5f;
    z[2] = 0.49999997f; /* x + 0.5 would round this up */
    z[4] = -126.5f;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == 0);
    CK_CHECK((int8_t)zq[2] == 3 && (int8_t)zq[3] == -3);
    CK_CHECK((int8_t)zq[4] == 0 && (int8_t)zq[6] == -127);
    /* non-finite inputs and scales that overflow f16 are refused */
    z[7] = INFINITY;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == CK_ERANGE);
    z[7] = NAN;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == CK_ERANGE);
    z[7] = 1e7f;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == CK_ERANGE);
    z[7] = 8e6f; /* d = 62992, fits */
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == 0);
}

int main(void) {
    CK_RUN(test_type_table);
    CK_RUN(test_row_bytes);
    CK_RUN(test_f16_known);
    CK_RUN(test_f16_exhaustive);
    CK_RUN(test_f16_rounding);
#ifdef __FLT16_MAX__
    CK_RUN(test_f16_vs_compiler);
#endif
    CK_RUN(test_bf16);
    CK_RUN(test_rows);
    CK_RUN(test_q8_0);
    return ck_test_summary();
}
