/* llamacpp_dequant.c - confkv's dequantisation against ggml's, bit for bit.
 *
 * The oracle is libggml-base (node-llama-cpp's prebuilt build, the one
 * llama.cpp itself uses): ggml_get_type_traits(t)->to_float, and for q8_K,
 * which has no to_float in the traits, the exported dequantize_row_q8_K.
 * For every type confkv reads:
 *   - the type table: ggml's name, block size and block bytes, and the row
 *     size of a few widths (ggml_row_size), equal confkv's;
 *   - random blocks: random bytes, with the f16 scale fields (and q8_K's f32
 *     d) redrawn until finite, since an inf or NaN scale makes every element
 *     inf/NaN and says nothing about the layout; subnormal scales stay;
 *   - ggml's own blocks: ggml_quantize_chunk (the quantizer llama.cpp's
 *     llama_model_quantize calls) of random rows of several scales, with
 *     outliers, zero rows and constant rows;
 * each dequantised by both, the floats compared with memcmp. f16 and bf16
 * are checked on all 65536 values, NaNs included.
 *
 * For the types confkv also writes (quant_can_encode: q8_0, mxfp4) the
 * quantized bytes are compared too: quant_from_f32 against
 * ggml_quantize_chunk on the rows above, and for mxfp4 on edge blocks (a max just
 * below and at each power of two, where log2f may round up; maxima below
 * 2^-125, subnormals, near FLT_MAX; values on the midpoints between
 * levels, where the first of equals wins).
 *
 * Prints one line a type (blocks compared, mismatches) and PASS or FAIL.
 * Exit 0 pass, 1 fail. Built and registered by tests/llamacpp/CMakeLists.txt
 * only when llama.cpp is installed (else the test SKIPs there). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "quant.h"

/* In libggml-base's exports (ggml-quants.h, not an installed header). */
void dequantize_row_q8_K(const void *x, float *y, int64_t k);

/* xorshift64*: deterministic test data */
static uint64_t rng_next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static float rng_normal(uint64_t *s) { /* Box-Muller, one of the pair */
    double u1 = ((double)(rng_next(s) >> 11) + 1.0) * 0x1p-53;
    double u2 = (double)(rng_next(s) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Offsets of the f16 scale fields in a block of each type (qblock.h's
 * structs, written out again from ggml-common.h); -1 ends the list. */
static const int *f16_fields(int type) {
    static const int at0[] = {0, -1}, at01[] = {0, 2, -1}, q2k[] = {80, 82, -1}, q3k[] = {108, -1},
                     q6k[] = {208, -1}, none[] = {-1};
    switch (type) {
    case QUANT_Q4_0:
    case QUANT_Q5_0:
    case QUANT_Q8_0:
    case QUANT_IQ4_NL:
    case QUANT_IQ4_XS: return at0;
    case QUANT_MXFP4: return none; /* its scale is an E8M0 byte: every value is one */
    case QUANT_Q4_1:
    case QUANT_Q5_1:
    case QUANT_Q4_K:
    case QUANT_Q5_K: return at01;
    case QUANT_Q2_K: return q2k;
    case QUANT_Q3_K: return q3k;
    case QUANT_Q6_K: return q6k;
    default: return none;
    }
}

/* Random bytes, then every scale redrawn until it is finite. */
static void random_blocks(int type, uint8_t *p, int nb, int bb, uint64_t *s) {
    for (int i = 0; i < nb * bb; i++) p[i] = (uint8_t)(rng_next(s) >> 56);
    for (int b = 0; b < nb; b++) {
        uint8_t *blk = p + (size_t)b * bb;
        for (const int *f = f16_fields(type); *f >= 0; f++) {
            uint16_t h;
            memcpy(&h, blk + *f, 2);
            while ((h & 0x7c00) == 0x7c00) h = (uint16_t)(rng_next(s) >> 48);
            memcpy(blk + *f, &h, 2);
        }
        if (type == QUANT_Q8_K) {
            float d;
            memcpy(&d, blk, 4);
            while (!isfinite(d)) {
                uint32_t u = (uint32_t)(rng_next(s) >> 32);
                memcpy(&d, &u, 4);
            }
            memcpy(blk, &d, 4);
        }
    }
}

/* Rows for ggml's quantizer: row r has its own scale, every 7th an outlier,
 * row 3 all zero, row 5 constant. */
static void source_rows(float *x, int rows, int n, uint64_t *s) {
    for (int r = 0; r < rows; r++) {
        float scale = ldexpf(1.0f, (int)(rng_next(s) % 20) - 12);
        for (int j = 0; j < n; j++) {
            float v = rng_normal(s) * scale;
            if (j % 97 == 7 * (r % 5)) v *= 30.0f;
            x[(size_t)r * n + j] = r == 3 ? 0.0f : r == 5 ? scale : v;
        }
    }
}

static void ggml_to_float(int type, const void *src, float *dst, int64_t n) {
    if (type == QUANT_Q8_K)
        dequantize_row_q8_K(src, dst, n);
    else
        ggml_get_type_traits((enum ggml_type)type)->to_float(src, dst, n);
}

/* Dequantise nb blocks both ways; the number of floats that differ in
 * bits. Where both are NaN, *nan_same counts those with equal bits too. */
static long compare(int type, const uint8_t *p, int64_t n, float *a, float *b) {
    if (quant_to_f32(type, p, a, (uint64_t)n) != 0) return n;
    ggml_to_float(type, p, b, n);
    if (memcmp(a, b, (size_t)n * sizeof *a) == 0) return 0;
    long bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            if (bad < 3)
                fprintf(stderr, "  %s element %lld: confkv %a, ggml %a\n", quant_type_name(type),
                        (long long)i, (double)a[i], (double)b[i]);
            bad++;
        }
    return bad;
}

/* Edge rows for the encoders (rows of 32-blocks; n a multiple of 32). */
static int edge_rows(float *x, int n, uint64_t *s) {
    static const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    int nb = n / 32, b = 0;
    for (int k = -130; k <= 127 && b < nb; k++, b++) { /* max at / just below 2^k */
        for (int j = 0; j < 32; j++) x[b * 32 + j] = rng_normal(s) * ldexpf(1.0f, k - 3);
        float p = ldexpf(1.0f, k);
        x[b * 32 + (k & 31)] = (k & 1) ? nextafterf(p, 0.0f) : -p;
    }
    for (; b < nb; b++) {
        const float scale = ldexpf(1.0f, (int)(rng_next(s) % 60) - 30);
        for (int j = 0; j < 32; j++) {
            float v = rng_normal(s) * scale;
            switch (b % 6) {
            case 0:
                v = (j % 2 ? -0.5f : 0.5f) * (grid[j % 8] + grid[(j + 1) % 8]) * scale;
                break;                                                 /* midpoints */
            case 1: v = rng_normal(s) * 1e-40f; break;                 /* subnormal */
            case 2: v = rng_normal(s) * 1e37f; break;                  /* huge */
            case 3: v = j == 5 ? 3.4e38f : v; break;                   /* near FLT_MAX */
            case 4: v = grid[j % 8] * (j & 8 ? -scale : scale); break; /* on the grid */
            default: break;
            }
            x[b * 32 + j] = v;
        }
    }
    return nb;
}

/* quant_from_f32 against ggml_quantize_chunk, byte for byte, over rows x
 * rows of n; the number of blocks that differ. */
static long compare_encode(int type, const float *x, int rows, int n, uint8_t *ours, uint8_t *theirs) {
    const int bb = quant_block_bytes(type), bs = quant_block_size(type);
    const size_t nbytes = (size_t)rows * (size_t)n / (size_t)bs * (size_t)bb;
    if (quant_from_f32(type, x, ours, (uint64_t)rows * (uint64_t)n) != 0) return -1;
    if (ggml_quantize_chunk((enum ggml_type)type, x, theirs, 0, rows, n, NULL) != nbytes) return -1;
    long bad = 0;
    for (size_t b = 0; b < nbytes / (size_t)bb; b++)
        if (memcmp(ours + b * bb, theirs + b * bb, (size_t)bb) != 0) {
            if (bad < 3) {
                fprintf(stderr, "  %s block %zu:", quant_type_name(type), b);
                for (int i = 0; i < bb && i < 18; i++)
                    fprintf(stderr, " %02x/%02x", ours[b * bb + i], theirs[b * bb + i]);
                fputc('\n', stderr);
            }
            bad++;
        }
    return bad;
}

int main(void) {
    static const int types[] = {QUANT_Q4_0, QUANT_Q4_1,   QUANT_Q5_0,   QUANT_Q5_1, QUANT_Q8_0,
                                QUANT_Q2_K, QUANT_Q3_K,   QUANT_Q4_K,   QUANT_Q5_K, QUANT_Q6_K,
                                QUANT_Q8_K, QUANT_IQ4_NL, QUANT_IQ4_XS, QUANT_MXFP4};
    enum { NB = 4096, ROWS = 64, N_PER_ROW = 1024 };
    int fails = 0;
    uint64_t s = 0x5eed;
    uint8_t *blocks = malloc((size_t)NB * 292);
    float *a = malloc((size_t)NB * 256 * sizeof *a), *b = malloc((size_t)NB * 256 * sizeof *b);
    float *src = malloc((size_t)ROWS * N_PER_ROW * sizeof *src);
    if (!blocks || !a || !b || !src) {
        fprintf(stderr, "llamacpp_dequant: out of memory\n");
        return 1;
    }

    /* the names of all ggml ids confkv knows, and of the ones it refuses */
    for (int id = 0; id < GGML_TYPE_COUNT; id++) {
        const struct ggml_type_traits *t = ggml_get_type_traits((enum ggml_type)id);
        const char *ours = quant_type_name(id), *any = quant_ggml_type_name(id);
        if (ours && (!t->type_name || strcmp(ours, t->type_name) || t->blck_size != quant_block_size(id) ||
                     (int64_t)t->type_size != quant_block_bytes(id))) {
            printf("FAIL: type %d: ggml %s/%lld/%zu, confkv %s/%d/%d\n", id, t->type_name,
                   (long long)t->blck_size, t->type_size, ours, quant_block_size(id), quant_block_bytes(id));
            fails++;
        }
        /* removed ids have blck_size 0 and a placeholder name in ggml */
        if (t->blck_size > 0 && (!any || strcmp(any, t->type_name))) {
            printf("FAIL: type %d: ggml calls it %s, confkv's messages %s\n", id, t->type_name,
                   any ? any : "(none)");
            fails++;
        }
    }

    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int type = types[ti], bs = quant_block_size(type), bb = quant_block_bytes(type);
        /* row sizes */
        for (int64_t w = 256; w <= 16384; w *= 4) {
            uint64_t ours = 0;
            if (quant_row_bytes(type, (uint64_t)w, &ours) || ours != ggml_row_size((enum ggml_type)type, w)) {
                printf("FAIL: %s: row of %lld: confkv %llu bytes, ggml %zu\n", quant_type_name(type),
                       (long long)w, (unsigned long long)ours, ggml_row_size((enum ggml_type)type, w));
                fails++;
            }
        }
        /* random blocks */
        random_blocks(type, blocks, NB, bb, &s);
        long bad_r = compare(type, blocks, (int64_t)NB * bs, a, b);
        /* ggml's own quantizer (q8_K has none: it is an activation type,
         * quantized by the CPU backend's from_float) */
        long bad_q = 0, nq = 0;
        if (type != QUANT_Q8_K) {
            source_rows(src, ROWS, N_PER_ROW, &s);
            size_t nbytes = ggml_quantize_chunk((enum ggml_type)type, src, blocks, 0, ROWS, N_PER_ROW, NULL);
            nq = (long)(nbytes / (size_t)bb);
            if (nbytes != (size_t)ROWS * N_PER_ROW / (size_t)bs * (size_t)bb) {
                printf("FAIL: %s: ggml_quantize_chunk wrote %zu bytes\n", quant_type_name(type), nbytes);
                fails++;
            }
            bad_q = compare(type, blocks, (int64_t)ROWS * N_PER_ROW, a, b);
        }
        printf("%-7s %4d random blocks: %ld floats differ; %4ld ggml-quantized blocks: %ld differ\n",
               quant_type_name(type), NB, bad_r, nq, bad_q);
        fails += bad_r != 0 || bad_q != 0;
    }

    /* the encoders: bytes against ggml's */
    static const int enc[] = {QUANT_Q8_0, QUANT_MXFP4};
    uint8_t *theirs = malloc((size_t)ROWS * N_PER_ROW * 2);
    if (!theirs) {
        fprintf(stderr, "llamacpp_dequant: out of memory\n");
        return 1;
    }
    for (size_t ei = 0; ei < sizeof enc / sizeof enc[0]; ei++) {
        const int type = enc[ei];
        long total = 0, bad = 0, nb;
        source_rows(src, ROWS, N_PER_ROW, &s);
        nb = compare_encode(type, src, ROWS, N_PER_ROW, blocks, theirs);
        bad += nb < 0 ? 1 : nb;
        total += (long)ROWS * N_PER_ROW / 32;
        /* the edge blocks: mxfp4 only (q8_0 refuses scales over f16, and
         * these go up to FLT_MAX) */
        if (type == QUANT_MXFP4) {
            const int erows = edge_rows(src, ROWS * N_PER_ROW, &s) / (N_PER_ROW / 32);
            nb = compare_encode(type, src, erows, N_PER_ROW, blocks, theirs);
            bad += nb < 0 ? 1 : nb;
            total += (long)erows * N_PER_ROW / 32;
        }
        printf("%-7s %5ld blocks quantized by both: %ld differ in bytes\n", quant_type_name(type), total,
               bad);
        fails += bad != 0;
    }
    free(theirs);

    /* f16 and bf16: every value */
    uint16_t *h = (uint16_t *)blocks;
    for (uint32_t i = 0; i < 65536; i++) h[i] = (uint16_t)i;
    int halves[] = {QUANT_F16, QUANT_BF16};
    for (int k = 0; k < 2; k++) {
        long bad = compare(halves[k], blocks, 65536, a, b);
        printf("%-7s all 65536 values: %ld floats differ\n", quant_type_name(halves[k]), bad);
        fails += bad != 0;
    }

    free(blocks);
    free(a);
    free(b);
    free(src);
    printf("%s\n", fails ? "FAIL" : "PASS: every dequantized float is ggml's, bit for bit");
    return fails ? 1 : 0;
}
