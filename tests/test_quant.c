/* test_quant.c - tensor type table, f32 <-> f16/bf16/q8_0 conversions and
 * the block dequantisers' layouts. (Bit-exactness against ggml's own
 * dequantisation, rounding included, is tests/llamacpp/llamacpp_dequant.c.) */
#include <float.h>
#include <math.h>
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
    CK_CHECK(quant_type_name(16) == NULL && quant_type_name(-1) == NULL);
    CK_CHECK(quant_type_name(4) == NULL && quant_type_name(43) == NULL);
    CK_CHECK(quant_type_from_name("f32") == QUANT_F32);
    CK_CHECK(quant_type_from_name("f16") == QUANT_F16);
    CK_CHECK(quant_type_from_name("q8_0") == QUANT_Q8_0);
    CK_CHECK(quant_type_from_name("bf16") == QUANT_BF16);
    CK_CHECK(quant_type_from_name("q4_K") == QUANT_Q4_K);
    CK_CHECK(quant_type_from_name("iq4_xs") == QUANT_IQ4_XS);
    CK_CHECK(quant_type_from_name("q4_k") == -1); /* ggml's spelling only */
    CK_CHECK(quant_type_from_name("iq2_xxs") == -1);
    CK_CHECK(quant_type_from_name("F32") == -1);
    CK_CHECK(quant_type_from_name(NULL) == -1);
    CK_CHECK(quant_block_size(QUANT_Q8_0) == 32);
    CK_CHECK(quant_block_size(QUANT_F16) == 1);
    CK_CHECK(quant_block_size(5) == CK_EUNSUPPORTED);
    CK_CHECK(quant_block_bytes(19) == CK_EUNSUPPORTED);
    /* every type: ggml's id, name, block elements and bytes (ggml.c's
     * type_traits; the GGUF spec's table) */
    static const struct {
        int id;
        const char *name;
        int block, bytes, weight;
    } t[] = {
        {0, "f32", 1, 4, 1},         {1, "f16", 1, 2, 1},       {2, "q4_0", 32, 18, 1},
        {3, "q4_1", 32, 20, 1},      {6, "q5_0", 32, 22, 1},    {7, "q5_1", 32, 24, 1},
        {8, "q8_0", 32, 34, 1},      {9, "q8_1", 32, 36, 0},    {10, "q2_K", 256, 84, 1},
        {11, "q3_K", 256, 110, 1},   {12, "q4_K", 256, 144, 1}, {13, "q5_K", 256, 176, 1},
        {14, "q6_K", 256, 210, 1},   {15, "q8_K", 256, 292, 0}, {20, "iq4_nl", 32, 18, 1},
        {23, "iq4_xs", 256, 136, 1}, {30, "bf16", 1, 2, 1},     {39, "mxfp4", 32, 17, 1},
    };
    int known = 0;
    for (int id = -2; id < 100; id++) known += quant_type_name(id) != NULL;
    CK_CHECK(known == (int)(sizeof t / sizeof t[0]));
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        CK_CHECK_MSG(quant_type_name(t[i].id) && strcmp(quant_type_name(t[i].id), t[i].name) == 0, "id %d",
                     t[i].id);
        CK_CHECK(quant_type_from_name(t[i].name) == t[i].id);
        CK_CHECK(strcmp(quant_ggml_type_name(t[i].id), t[i].name) == 0);
        CK_CHECK_MSG(quant_block_size(t[i].id) == t[i].block, "%s", t[i].name);
        CK_CHECK_MSG(quant_block_bytes(t[i].id) == t[i].bytes, "%s", t[i].name);
        CK_CHECK_MSG(quant_is_weight_type(t[i].id) == t[i].weight, "%s", t[i].name);
        int enc = t[i].id == 0 || t[i].id == 1 || t[i].id == 8 || t[i].id == 30 || t[i].id == 39;
        CK_CHECK_MSG(quant_can_encode(t[i].id) == enc, "%s", t[i].name);
    }
    /* names of the ggml types confkv refuses, for messages */
    CK_CHECK(strcmp(quant_ggml_type_name(16), "iq2_xxs") == 0);
    CK_CHECK(strcmp(quant_ggml_type_name(19), "iq1_s") == 0);
    CK_CHECK(strcmp(quant_ggml_type_name(29), "iq1_m") == 0);
    CK_CHECK(strcmp(quant_ggml_type_name(40), "nvfp4") == 0);
    CK_CHECK(strcmp(quant_ggml_type_name(42), "q2_0") == 0);
    CK_CHECK(quant_ggml_type_name(43) == NULL && quant_ggml_type_name(-1) == NULL);
    CK_CHECK(!quant_is_weight_type(16) && !quant_is_weight_type(-1) && !quant_can_encode(2));
}

static void test_row_bytes(void) {
    uint64_t b = 0;
    CK_CHECK(quant_row_bytes(QUANT_F32, 10, &b) == 0 && b == 40);
    CK_CHECK(quant_row_bytes(QUANT_F16, 10, &b) == 0 && b == 20);
    CK_CHECK(quant_row_bytes(QUANT_BF16, 7, &b) == 0 && b == 14);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 64, &b) == 0 && b == 68);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 4096, &b) == 0 && b == 4352);
    CK_CHECK(quant_row_bytes(QUANT_F32, 0, &b) == 0 && b == 0);
    /* a 4096-wide row of each block type: 4096 / block * bytes */
    CK_CHECK(quant_row_bytes(QUANT_Q4_0, 4096, &b) == 0 && b == 128 * 18);
    CK_CHECK(quant_row_bytes(QUANT_Q4_1, 4096, &b) == 0 && b == 128 * 20);
    CK_CHECK(quant_row_bytes(QUANT_Q5_0, 4096, &b) == 0 && b == 128 * 22);
    CK_CHECK(quant_row_bytes(QUANT_Q5_1, 4096, &b) == 0 && b == 128 * 24);
    CK_CHECK(quant_row_bytes(QUANT_IQ4_NL, 4096, &b) == 0 && b == 128 * 18);
    CK_CHECK(quant_row_bytes(QUANT_MXFP4, 4096, &b) == 0 && b == 128 * 17);
    CK_CHECK(quant_row_bytes(QUANT_MXFP4, 48, &b) == CK_EFORMAT);
    CK_CHECK(quant_row_bytes(QUANT_Q2_K, 4096, &b) == 0 && b == 16 * 84);
    CK_CHECK(quant_row_bytes(QUANT_Q3_K, 4096, &b) == 0 && b == 16 * 110);
    CK_CHECK(quant_row_bytes(QUANT_Q4_K, 4096, &b) == 0 && b == 16 * 144);
    CK_CHECK(quant_row_bytes(QUANT_Q5_K, 4096, &b) == 0 && b == 16 * 176);
    CK_CHECK(quant_row_bytes(QUANT_Q6_K, 4096, &b) == 0 && b == 16 * 210);
    CK_CHECK(quant_row_bytes(QUANT_IQ4_XS, 4096, &b) == 0 && b == 16 * 136);
    CK_CHECK(quant_row_bytes(QUANT_Q8_K, 4096, &b) == 0 && b == 16 * 292);
    CK_CHECK(quant_row_bytes(QUANT_Q8_1, 4096, &b) == 0 && b == 128 * 36);
    /* K-quants want multiples of 256: a 32-multiple is not enough */
    b = 777;
    CK_CHECK(quant_row_bytes(QUANT_Q4_K, 288, &b) == CK_EFORMAT && b == 777);
    CK_CHECK(quant_row_bytes(QUANT_IQ4_XS, 128, &b) == CK_EFORMAT);
    CK_CHECK(quant_row_bytes(QUANT_Q4_0, 288, &b) == 0 && b == 9 * 18);
    CK_CHECK(quant_row_bytes(QUANT_Q6_K, UINT64_MAX / 256 * 256, &b) == 0 && b == UINT64_MAX / 256 * 210);
    CK_CHECK(quant_row_bytes(QUANT_Q8_K, UINT64_MAX / 256 * 256, &b) == CK_ERANGE); /* 292 > 256 */
    b = 12345;
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 33, &b) == CK_EFORMAT && b == 12345);
    CK_CHECK(quant_row_bytes(QUANT_Q8_0, 16, &b) == CK_EFORMAT);
    CK_CHECK(quant_row_bytes(16, 256, &b) == CK_EUNSUPPORTED);
    CK_CHECK(quant_row_bytes(1000, 32, &b) == CK_EUNSUPPORTED);
    CK_CHECK(quant_row_bytes(QUANT_F32, UINT64_MAX / 2, &b) == CK_ERANGE);
    CK_CHECK(quant_row_bytes(QUANT_F32, UINT64_MAX / 4, &b) == 0 && b == UINT64_MAX / 4 * 4);
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
        {65504.0f, 0x7BFF}, /* largest finite */
        {65519.0f, 0x7BFF}, /* below the half-way point */
        {65520.0f, 0x7C00}, /* half-way: ties to even = inf */
        {-65520.0f, 0xFC00},
        {1e10f, 0x7C00},
        {0x1p-14f, 0x0400},        /* smallest normal */
        {0x1p-24f, 0x0001},        /* smallest subnormal */
        {0x1p-25f, 0x0000},        /* tie between 0 and 2^-24: even */
        {0x1.000002p-25f, 0x0001}, /* just above the tie */
        {0x1.8p-24f, 0x0002},      /* 1.5 ulp: tie, rounds to even 2 */
        {0x1.4p-23f, 0x0002},      /* 2.5 ulp: tie, rounds to even 2 */
        {0x1.ff8p-15f, 0x03FF},    /* largest subnormal */
        {0x1.ffcp-15f, 0x0400},    /* tie with the smallest normal: even */
        {0x1.ffap-15f, 0x03FF},
        {1.0f + 0x1p-11f, 0x3C00},   /* tie: even mantissa 0 */
        {1.0f + 0x1.8p-10f, 0x3C02}, /* tie between 0x3C01 and 0x3C02 */
        {1.0f + 0x1p-10f, 0x3C01},
        {0.1f, 0x2E66},
        {3.14159265f, 0x4248},
        {-1e-10f, 0x8000},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = quant_f32_to_f16(cases[i].f);
        CK_CHECK_MSG(h == cases[i].h, "%a -> 0x%04x, want 0x%04x", (double)cases[i].f, h, cases[i].h);
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
    /* signalling NaNs come out quiet with their payload, as ggml's */
    CK_CHECK(bits_of(quant_f16_to_f32(0x7C01)) == 0x7FC02000u);
    CK_CHECK(bits_of(quant_f16_to_f32(0xFDFF)) == 0xFFFFE000u);
    CK_CHECK(bits_of(quant_f16_to_f32(0x7E00)) == 0x7FC00000u);
    CK_CHECK(bits_of(quant_f16_to_f32(0x7C00)) == 0x7F800000u);
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
                CK_CHECK_MSG(quant_f32_to_f16(f) == (h | 0x200), "nan 0x%04x -> 0x%04x", h,
                             quant_f32_to_f16(f));
            continue;
        }
        double want = e ? ldexp(1.0 + m / 1024.0, (int)e - 15) : ldexp(m / 1024.0, -14);
        if (h & 0x8000) want = -want;
        CK_CHECK_MSG((double)f == want, "h=0x%04x: %a vs %a", h, (double)f, want);
        CK_CHECK_MSG(quant_f32_to_f16(f) == h, "round trip 0x%04x", h);
    }
    /* the row conversions (vectorised) agree with the scalar ones */
    static uint16_t hs[0x10000], back[0x10000];
    static float fs[0x10000];
    for (uint32_t h = 0; h < 0x10000; h++) hs[h] = (uint16_t)h;
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
        CK_CHECK_MSG(quant_f32_to_f16(-mid) == (even | 0x8000), "neg tie after 0x%04x", h);
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
        CK_CHECK_MSG(quant_f32_to_f16(fs[i]) == want, "%a: 0x%04x vs 0x%04x", (double)fs[i],
                     quant_f32_to_f16(fs[i]), want);
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
    uint16_t n = quant_f32_to_bf16(float_of(0x7F800001u));        /* sNaN */
    CK_CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0 && (n & 0x40));
    CK_CHECK(quant_bf16_to_f32(0x3F80) == 1.0f);
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = quant_bf16_to_f32((uint16_t)h);
        CK_CHECK(bits_of(f) == h << 16);
        if (!isnan(f)) CK_CHECK_MSG(quant_f32_to_bf16(f) == h, "0x%04x", h);
    }
}

/* Row conversions agree with the scalar ones, accept unaligned pointers
 * and check their arguments. */
static void test_rows(void) {
    enum { N = 96 };
    float x[N], y[N];
    uint8_t buf[1 + N * 4];
    uint64_t s = 42;
    for (int i = 0; i < N; i++) x[i] = rng_uniform(&s) * 100.0f;
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
    CK_CHECK(quant_to_f32(16, buf, y, 256) == CK_EUNSUPPORTED);
    CK_CHECK(quant_from_f32(QUANT_Q4_0, x, buf, 32) == CK_EUNSUPPORTED);
    CK_CHECK(quant_from_f32(QUANT_Q4_K, x, buf, 0) == CK_EUNSUPPORTED);
    CK_CHECK(quant_to_f32(QUANT_Q4_K, buf, y, 32) == CK_EFORMAT);
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
        for (int j = 0; j < 32; j++) x[b * 32 + j] = rng_uniform(&s) * scale;
    }
    for (int j = 0; j < 32; j++) /* an all-zero block */
        x[5 * 32 + j] = 0.0f;
    uint8_t *dst = q + 1; /* unaligned */
    CK_CHECK(quant_from_f32(QUANT_Q8_0, x, dst, N) == 0);
    CK_CHECK(quant_to_f32(QUANT_Q8_0, dst, y, N) == 0);
    for (int b = 0; b < NB; b++) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
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
                         "block %d elem %d: %g vs %g (bound %g)", b, j, (double)x[b * 32 + j],
                         (double)y[b * 32 + j], bound);
        }
    }
    /* byte-identical to ggml's reference quantize_row_q8_0 (roundf) */
    for (int b = 0; b < NB; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        uint16_t dh = quant_f32_to_f16(d);
        CK_CHECK(memcmp(dst + b * 34, &dh, 2) == 0);
        for (int j = 0; j < 32; j++)
            CK_CHECK_MSG((int8_t)dst[b * 34 + 2 + j] == (int8_t)roundf(xb[j] * id), "block %d elem %d", b, j);
    }
    /* all-zero block: d = 0, q = 0, exact */
    for (int j = 0; j < 32; j++) CK_CHECK(y[5 * 32 + j] == 0.0f && dst[5 * 34 + 2 + j] == 0);
    /* a block whose max is 127: d = 1.0 (0x3C00) and q = x exactly */
    float z[32];
    uint8_t zq[34];
    for (int j = 0; j < 32; j++) z[j] = (float)(j * 8 - 127 + (j == 31 ? 2 : 0)); /* -127 .. 121 */
    z[3] = 127.0f;
    CK_CHECK(quant_from_f32(QUANT_Q8_0, z, zq, 32) == 0);
    CK_CHECK(zq[0] == 0x00 && zq[1] == 0x3C);
    for (int j = 0; j < 32; j++) CK_CHECK((int8_t)zq[2 + j] == (int)z[j]);
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

/* MXFP4's code q: sign bit 3, then E2M1 (2 exponent bits, 1 mantissa bit,
 * bias 1): the value, from the OCP MX spec's definition rather than a
 * table, so qblock.h's doubled table is checked too. */
static double e2m1_value(int q) {
    const int sign = q >> 3 & 1, ex = q >> 1 & 3, m = q & 1;
    const double v = ex == 0 ? 0.5 * m : ldexp(1.0 + 0.5 * m, ex - 1);
    return sign ? -v : v;
}

/* mxfp4: the exponent from the block's max, every element the nearest
 * level (the first of equals), exact for values on the grid, the edge
 * cases of ggml's reference. Bytes against libggml: llamacpp_dequant. */
static void test_mxfp4(void) {
    enum { NB = 48, N = NB * 32 };
    static float x[N], y[N];
    static uint8_t q[NB * 17 + 1];
    uint64_t s = 11;
    for (int b = 0; b < NB; b++) {
        const float scale = ldexpf(1.0f, (b % 40) - 20); /* 2^-20 .. 2^19 */
        for (int j = 0; j < 32; j++) x[b * 32 + j] = rng_uniform(&s) * scale;
    }
    for (int j = 0; j < 32; j++) x[7 * 32 + j] = 0.0f; /* an all-zero block */
    uint8_t *dst = q + 1;                              /* unaligned */
    CK_CHECK(quant_from_f32(QUANT_MXFP4, x, dst, N) == 0);
    CK_CHECK(quant_to_f32(QUANT_MXFP4, dst, y, N) == 0);
    for (int b = 0; b < NB; b++) {
        const uint8_t *blk = dst + b * 17;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[b * 32 + j]));
        if (amax == 0) {
            CK_CHECK(blk[0] == 0);
            for (int j = 0; j < 32; j++) CK_CHECK(y[b * 32 + j] == 0.0f && !signbit(y[b * 32 + j]));
            continue;
        }
        /* 2^(e - 125) covers amax: e - 125 = floor(log2 amax), or one more
         * where log2f rounds up to a power of two */
        const double d = ldexp(1.0, blk[0] - 127); /* the E2M1 values' scale */
        CK_CHECK_MSG(amax >= d * 4 * 0.999999 && amax < d * 8 * 1.000001, "block %d: e %d, max %g", b, blk[0],
                     (double)amax);
        for (int j = 0; j < 32; j++) {
            const int code = j < 16 ? blk[1 + j] & 0xf : blk[1 + j - 16] >> 4;
            const double xv = x[b * 32 + j], got = y[b * 32 + j];
            CK_CHECK(got == d * e2m1_value(code));
            /* nearest of the 16 levels; on a tie the lower code */
            double best = INFINITY;
            int bi = 0;
            for (int i = 0; i < 16; i++)
                if (fabs(d * e2m1_value(i) - xv) < best) best = fabs(d * e2m1_value(i) - xv), bi = i;
            CK_CHECK_MSG(fabs(got - xv) == best && code == bi,
                         "block %d elem %d: %g -> code %d (%g), want %d", b, j, xv, code, got, bi);
        }
    }
    /* the E2M1 grid itself, max 6: e = 127 (the values' own scale), exact;
     * -0 and 0 both code 0 */
    float z[32];
    uint8_t zq[17];
    static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    for (int j = 0; j < 32; j++) z[j] = (j & 8 ? -1.0f : 1.0f) * grid[j % 8];
    z[8] = -0.0f;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == 0 && zq[0] == 127);
    CK_CHECK(quant_to_f32(QUANT_MXFP4, zq, y, 32) == 0);
    for (int j = 0; j < 32; j++)
        CK_CHECK_MSG(y[j] == z[j], "grid %d: %g vs %g", j, (double)y[j], (double)z[j]);
    CK_CHECK((zq[1 + 8] & 0xf) == 0);
    /* ties go to the first level: 0.25 between 0 and 0.5, 5 between 4 and 6 */
    for (int j = 0; j < 32; j++) z[j] = 0.0f;
    z[0] = 6.0f, z[1] = 0.25f, z[2] = -0.25f, z[3] = 5.0f, z[4] = -5.0f, z[5] = 2.5f;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == 0 && zq[0] == 127);
    CK_CHECK((zq[2] & 0xf) == 0 && (zq[3] & 0xf) == 0 && (zq[4] & 0xf) == 6 && (zq[5] & 0xf) == 14 &&
             (zq[6] & 0xf) == 4);
    /* a max below 2^-125 has no exponent: ggml's cast keeps the low byte
     * of the negative integer (1e-40: floor(log2) = -133, e = -8 -> 248),
     * every code 0, read as zeros */
    for (int j = 0; j < 32; j++) z[j] = 0.0f;
    z[0] = 1e-40f, z[1] = -3e-41f;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == 0 && zq[0] == 248);
    for (int j = 1; j < 17; j++) CK_CHECK(zq[j] == 0);
    /* the largest exponents: FLT_MAX's log2f rounds to 128, e = 253 */
    z[0] = FLT_MAX;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == 0 && zq[0] == 253);
    CK_CHECK(quant_to_f32(QUANT_MXFP4, zq, y, 32) == 0 && isfinite(y[0]) && y[0] > 1e38f);
    /* e = 255 (the format's NaN) reads as 2^127, as ggml reads it; 12 * 2^127 overflows */
    memset(zq, 0, sizeof zq);
    zq[0] = 255, zq[1] = 0x71; /* elements 0 and 16: codes 1 and 7 */
    CK_CHECK(quant_to_f32(QUANT_MXFP4, zq, y, 32) == 0 && y[0] == 0x1p127f && isinf(y[16]));
    zq[0] = 0, zq[1] = 0xf1; /* 2^-128 subnormal: code 1 -> 2^-128, code 15 -> -12 * 2^-128 */
    CK_CHECK(quant_to_f32(QUANT_MXFP4, zq, y, 32) == 0 && y[0] == 0x1p-128f && y[16] == -12 * 0x1p-128f);
    /* non-finite inputs are refused */
    z[0] = 1.0f, z[7] = INFINITY;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == CK_ERANGE);
    z[7] = NAN;
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 32) == CK_ERANGE);
    CK_CHECK(quant_from_f32(QUANT_MXFP4, z, zq, 16) == CK_EFORMAT);
}

/* ------------------------------------------------------------------------
 * block layouts: blocks packed from chosen codes the way ggml's reference
 * quantizers pack them (quantize_row_<type>_ref's loops in ggml-quants.c,
 * a different formulation from the unpacking in quant.c), with scales that
 * are powers of two and small integers so that every value is exact: the
 * dequantised floats must equal the formula, computed in double.
 * ------------------------------------------------------------------------ */

/* ggml-common.h's kvalues_iq4nl, copied here so that qblock.h's table is
 * checked too */
static const int iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                     1,    13,   25,  38,  53,  69,  89,  113};

typedef struct {
    int L[256];         /* element codes, unsigned as stored */
    int sc[16], mn[16]; /* sub-block scale and min codes, as stored */
    float d, m;         /* block scales (powers of two) */
} blockspec;

static void put16(uint8_t *p, float f) {
    uint16_t h = quant_f32_to_f16(f);
    memcpy(p, &h, 2);
}

/* Pack `sp` into one block of `type` at blk; write the exact values to want. */
static void pack_block(int type, const blockspec *sp, uint8_t *blk, double *want) {
    const int *L = sp->L;
    double d = sp->d, m = sp->m;
    memset(blk, 0, 292);
    switch (type) {
    case QUANT_Q4_0:
    case QUANT_Q4_1:
    case QUANT_IQ4_NL: { /* d [m] qs[16] */
        uint8_t *qs = blk + (type == QUANT_Q4_1 ? 4 : 2);
        put16(blk, sp->d);
        if (type == QUANT_Q4_1) put16(blk + 2, sp->m);
        for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | L[j + 16] << 4);
        for (int j = 0; j < 32; j++)
            want[j] = type == QUANT_Q4_0   ? d * (L[j] - 8)
                      : type == QUANT_Q4_1 ? d * L[j] + m
                                           : d * iq4nl_levels[L[j]];
        break;
    }
    case QUANT_MXFP4: { /* e qs[16]; the scale is d = 2^(e - 127) on the E2M1 values */
        int ex = 0;
        frexp(sp->d, &ex); /* d = 2^(ex - 1) */
        blk[0] = (uint8_t)(ex - 1 + 127);
        for (int j = 0; j < 16; j++) blk[1 + j] = (uint8_t)(L[j] | L[j + 16] << 4);
        for (int j = 0; j < 32; j++) want[j] = d * e2m1_value(L[j]);
        break;
    }
    case QUANT_Q5_0:
    case QUANT_Q5_1: { /* d [m] qh[4] qs[16] */
        int off = type == QUANT_Q5_1 ? 4 : 2;
        uint32_t qh = 0;
        put16(blk, sp->d);
        if (type == QUANT_Q5_1) put16(blk + 2, sp->m);
        for (int j = 0; j < 16; j++) {
            blk[off + 4 + j] = (uint8_t)((L[j] & 0xf) | (L[j + 16] & 0xf) << 4);
            qh |= (uint32_t)(L[j] >> 4) << j;
            qh |= (uint32_t)(L[j + 16] >> 4) << (j + 16);
        }
        memcpy(blk + off, &qh, 4);
        for (int j = 0; j < 32; j++) want[j] = type == QUANT_Q5_0 ? d * (L[j] - 16) : d * L[j] + m;
        break;
    }
    case QUANT_Q8_0:
    case QUANT_Q8_1: /* d [s] qs[32], L as int8 */
        put16(blk, sp->d);
        for (int j = 0; j < 32; j++) {
            blk[(type == QUANT_Q8_1 ? 4 : 2) + j] = (uint8_t)(L[j] - 128);
            want[j] = d * (L[j] - 128);
        }
        break;
    case QUANT_Q8_K: { /* float d, qs[256], bsums[16] */
        memcpy(blk, &sp->d, 4);
        for (int j = 0; j < 256; j++) {
            blk[4 + j] = (uint8_t)(L[j] - 128);
            want[j] = d * (L[j] - 128);
        }
        break;
    }
    case QUANT_Q2_K: { /* scales[16] qs[64] d dmin */
        for (int j = 0; j < 16; j++) blk[j] = (uint8_t)(sp->sc[j] | sp->mn[j] << 4);
        for (int j = 0; j < 256; j += 128)
            for (int l = 0; l < 32; l++)
                blk[16 + j / 4 + l] =
                    (uint8_t)(L[j + l] | L[j + l + 32] << 2 | L[j + l + 64] << 4 | L[j + l + 96] << 6);
        put16(blk + 80, sp->d);
        put16(blk + 82, sp->m);
        for (int j = 0; j < 256; j++) want[j] = d * sp->sc[j / 16] * L[j] - m * sp->mn[j / 16];
        break;
    }
    case QUANT_Q3_K: { /* hmask[32] qs[64] scales[12] d; L 0..7 = q + 4 */
        uint8_t *hmask = blk, *qs = blk + 32, *scales = blk + 96;
        int Lc[256];
        for (int j = 0; j < 16; j++) {
            int l = sp->sc[j]; /* 0..63, value l - 32 */
            if (j < 8)
                scales[j] = (uint8_t)(l & 0xF);
            else
                scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            l >>= 4;
            scales[j % 4 + 8] |= (uint8_t)(l << (2 * (j / 4)));
        }
        int mi = 0;
        uint8_t hm = 1;
        for (int j = 0; j < 256; j++) {
            Lc[j] = L[j];
            if (Lc[j] > 3) {
                hmask[mi] |= hm;
                Lc[j] -= 4;
            }
            if (++mi == 32) {
                mi = 0;
                hm <<= 1;
            }
        }
        for (int j = 0; j < 256; j += 128)
            for (int l = 0; l < 32; l++)
                qs[j / 4 + l] =
                    (uint8_t)(Lc[j + l] | Lc[j + l + 32] << 2 | Lc[j + l + 64] << 4 | Lc[j + l + 96] << 6);
        put16(blk + 108, sp->d);
        for (int j = 0; j < 256; j++) want[j] = d * (sp->sc[j / 16] - 32) * (L[j] - 4);
        break;
    }
    case QUANT_Q4_K:
    case QUANT_Q5_K: { /* d dmin scales[12] [qh[32]] qs[128] */
        uint8_t *scales = blk + 4;
        uint8_t *qh = blk + 16, *q = blk + (type == QUANT_Q5_K ? 48 : 16);
        put16(blk, sp->d);
        put16(blk + 2, sp->m);
        for (int j = 0; j < 8; j++) {
            int ls = sp->sc[j], lm = sp->mn[j];
            if (j < 4) {
                scales[j] = (uint8_t)ls;
                scales[j + 4] = (uint8_t)lm;
            } else {
                scales[j + 4] = (uint8_t)((ls & 0xF) | (lm & 0xF) << 4);
                scales[j - 4] |= (uint8_t)((ls >> 4) << 6);
                scales[j - 0] |= (uint8_t)((lm >> 4) << 6);
            }
        }
        if (type == QUANT_Q4_K) {
            for (int j = 0; j < 256; j += 64, q += 32)
                for (int l = 0; l < 32; l++) q[l] = (uint8_t)(L[j + l] | L[j + l + 32] << 4);
        } else {
            uint8_t m1 = 1, m2 = 2;
            for (int n = 0; n < 256; n += 64, q += 32) {
                for (int j = 0; j < 32; j++) {
                    int l1 = L[n + j], l2 = L[n + j + 32];
                    if (l1 > 15) {
                        l1 -= 16;
                        qh[j] |= m1;
                    }
                    if (l2 > 15) {
                        l2 -= 16;
                        qh[j] |= m2;
                    }
                    q[j] = (uint8_t)(l1 | l2 << 4);
                }
                m1 <<= 2;
                m2 <<= 2;
            }
        }
        for (int j = 0; j < 256; j++) want[j] = d * sp->sc[j / 32] * L[j] - m * sp->mn[j / 32];
        break;
    }
    case QUANT_Q6_K: { /* ql[128] qh[64] scales[16] (int8) d; L 0..63 = q + 32 */
        uint8_t *ql = blk, *qh = blk + 128;
        for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
            for (int l = 0; l < 32; l++) {
                int q1 = L[j + l] & 0xF, q2 = L[j + l + 32] & 0xF;
                int q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l] = (uint8_t)(q1 | q3 << 4);
                ql[l + 32] = (uint8_t)(q2 | q4 << 4);
                qh[l] = (uint8_t)(L[j + l] >> 4 | (L[j + l + 32] >> 4) << 2 | (L[j + l + 64] >> 4) << 4 |
                                  (L[j + l + 96] >> 4) << 6);
            }
        for (int j = 0; j < 16; j++) blk[192 + j] = (uint8_t)(sp->sc[j] - 128); /* int8 */
        put16(blk + 208, sp->d);
        for (int j = 0; j < 256; j++) want[j] = d * (sp->sc[j / 16] - 128) * (L[j] - 32);
        break;
    }
    case QUANT_IQ4_XS: { /* d scales_h scales_l[4] qs[128] */
        uint16_t sh = 0;
        put16(blk, sp->d);
        for (int ib = 0; ib < 8; ib++) {
            int l = sp->sc[ib]; /* 0..63, value l - 32 */
            sh |= (uint16_t)((l >> 4) << 2 * ib);
            blk[4 + ib / 2] |= (uint8_t)((l & 0xf) << 4 * (ib % 2));
            for (int j = 0; j < 16; j++)
                blk[8 + 16 * ib + j] = (uint8_t)(L[32 * ib + j] | L[32 * ib + j + 16] << 4);
        }
        memcpy(blk + 2, &sh, 2);
        for (int j = 0; j < 256; j++) want[j] = d * (sp->sc[j / 32] - 32) * iq4nl_levels[L[j]];
        break;
    }
    }
}

static void test_block_layouts(void) {
    /* type, bits of an element code, of a scale code, of a min code */
    static const struct {
        int type, lbits, sbits, mbits;
    } t[] = {
        {QUANT_Q4_0, 4, 0, 0},   {QUANT_Q4_1, 4, 0, 0},   {QUANT_Q5_0, 5, 0, 0},  {QUANT_Q5_1, 5, 0, 0},
        {QUANT_Q8_0, 8, 0, 0},   {QUANT_Q8_1, 8, 0, 0},   {QUANT_Q2_K, 2, 4, 4},  {QUANT_Q3_K, 3, 6, 0},
        {QUANT_Q4_K, 4, 6, 6},   {QUANT_Q5_K, 5, 6, 6},   {QUANT_Q6_K, 6, 8, 0},  {QUANT_Q8_K, 8, 0, 0},
        {QUANT_IQ4_NL, 4, 0, 0}, {QUANT_IQ4_XS, 4, 6, 0}, {QUANT_MXFP4, 4, 0, 0},
    };
    enum { NB = 3 }; /* blocks a row: each block with its own codes */
    static uint8_t row[1 + NB * 292];
    static float y[NB * 256];
    static double want[NB * 256];
    uint64_t s = 99;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        int bs = quant_block_size(t[i].type), bb = quant_block_bytes(t[i].type);
        for (int trial = 0; trial < 20; trial++) {
            for (int b = 0; b < NB; b++) {
                blockspec sp;
                for (int j = 0; j < 256; j++) sp.L[j] = (int)(rng_next(&s) >> 40) & ((1 << t[i].lbits) - 1);
                for (int j = 0; j < 16; j++) {
                    sp.sc[j] = t[i].sbits ? (int)(rng_next(&s) >> 40) & ((1 << t[i].sbits) - 1) : 0;
                    sp.mn[j] = t[i].mbits ? (int)(rng_next(&s) >> 40) & ((1 << t[i].mbits) - 1) : 0;
                }
                if (trial == 0) /* the extreme codes */
                    for (int j = 0; j < 256; j++) {
                        sp.L[j] = j % 2 ? (1 << t[i].lbits) - 1 : 0;
                        sp.sc[j % 16] = t[i].sbits ? (1 << t[i].sbits) - 1 - (j % 2) : 0;
                    }
                sp.d = ldexpf(1.0f, -(int)(rng_next(&s) % 12) - 2);
                sp.m = ldexpf(1.0f, -(int)(rng_next(&s) % 12) - 2);
                if (trial % 2) sp.m = -sp.m;
                pack_block(t[i].type, &sp, row + 1 + b * bb, want + b * bs);
            }
            /* row + 1: unaligned, as in a file mapping */
            CK_CHECK(quant_to_f32(t[i].type, row + 1, y, (uint64_t)NB * bs) == 0);
            for (int j = 0; j < NB * bs; j++)
                CK_CHECK_MSG((double)y[j] == want[j], "%s trial %d elem %d: %g, want %g",
                             quant_type_name(t[i].type), trial, j, (double)y[j], want[j]);
        }
    }
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
    CK_RUN(test_mxfp4);
    CK_RUN(test_block_layouts);
    return ck_test_summary();
}
