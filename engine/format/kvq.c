/* kvq.c - int8 KV block codec (kvq.h). */
#include "kvq.h"

#include <math.h>
#include <string.h>

#include "quant.h"

uint16_t kvq_scale_f16(float scale) {
    uint16_t h = quant_f32_to_f16(scale);
    if (quant_f16_to_f32(h) < scale) h++; /* positive halves order like their bits */
    return h;
}

size_t kvq_block_bytes(const kvq_shape *s) { return (size_t)s->n_layers * kvq_layer_bytes(s); }

size_t kvq_f32_bytes(const kvq_shape *s) {
    return (size_t)s->n_layers * 2 * (size_t)s->block_size * s->kv_dim * sizeof(float);
}

static int8_t q8(float x, float inv) {
    float r = roundf(x * inv);
    return (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
}

void kvq_quantize(const kvq_shape *s, const float *src, int n_tokens, void *dst) {
    const int bs = s->block_size, kvd = s->kv_dim;
    unsigned char *out = dst;
    memset(dst, 0, kvq_block_bytes(s));
    for (int l = 0; l < s->n_layers; l++) {
        const float *K = src + (size_t)l * 2 * bs * kvd, *V = K + (size_t)bs * kvd;
        int8_t *qk = (int8_t *)out, *qv = qk + (size_t)bs * kvd;
        float ks[kvd > 0 ? kvd : 1], vs[bs > 0 ? bs : 1];
        uint16_t hk[kvd > 0 ? kvd : 1], hv[bs > 0 ? bs : 1];
        for (int c = 0; c < kvd; c++) {
            float m = 0;
            for (int t = 0; t < n_tokens; t++) m = fmaxf(m, fabsf(K[(size_t)t * kvd + c]));
            hk[c] = kvq_scale_f16(m / 127.0f);
            ks[c] = quant_f16_to_f32(hk[c]);
        }
        for (int t = 0; t < bs; t++) {
            float m = 0;
            for (int c = 0; t < n_tokens && c < kvd; c++) m = fmaxf(m, fabsf(V[(size_t)t * kvd + c]));
            hv[t] = kvq_scale_f16(m / 127.0f);
            vs[t] = quant_f16_to_f32(hv[t]);
        }
        for (int t = 0; t < n_tokens; t++) {
            /* cppcheck thinks ks/vs/hk/hv may be unset (VLAs): the two loops
             * above write all kvd and bs of them (n_tokens <= bs) */
            // cppcheck-suppress uninitvar
            float iv = vs[t] > 0 ? 1.0f / vs[t] : 0;
            for (int c = 0; c < kvd; c++) {
                float ik = ks[c] > 0 ? 1.0f / ks[c] : 0;
                qk[(size_t)t * kvd + c] = q8(K[(size_t)t * kvd + c], ik);
                qv[(size_t)t * kvd + c] = q8(V[(size_t)t * kvd + c], iv);
            }
        }
        unsigned char *sc = out + 2 * (size_t)bs * kvd;
        // cppcheck-suppress uninitvar
        memcpy(sc, hk, sizeof(uint16_t) * (size_t)kvd);
        // cppcheck-suppress uninitvar
        memcpy(sc + sizeof(uint16_t) * (size_t)kvd, hv, sizeof(uint16_t) * (size_t)bs);
        out += kvq_layer_bytes(s);
    }
}

void kvq_dequantize(const kvq_shape *s, const void *src, float *dst) {
    const int bs = s->block_size, kvd = s->kv_dim;
    const unsigned char *in = src;
    for (int l = 0; l < s->n_layers; l++) {
        float *K = dst + (size_t)l * 2 * bs * kvd, *V = K + (size_t)bs * kvd;
        const int8_t *qk = (const int8_t *)in, *qv = qk + (size_t)bs * kvd;
        const unsigned char *sc = in + 2 * (size_t)bs * kvd;
        float ks[kvd > 0 ? kvd : 1], vs[bs > 0 ? bs : 1];
        uint16_t h[kvd > bs ? kvd : bs];
        memcpy(h, sc, sizeof(uint16_t) * (size_t)kvd);
        for (int c = 0; c < kvd; c++) ks[c] = quant_f16_to_f32(h[c]);
        memcpy(h, sc + sizeof(uint16_t) * (size_t)kvd, sizeof(uint16_t) * (size_t)bs);
        for (int t = 0; t < bs; t++) vs[t] = quant_f16_to_f32(h[t]);
        for (int t = 0; t < bs; t++)
            for (int c = 0; c < kvd; c++) {
                K[(size_t)t * kvd + c] = qk[(size_t)t * kvd + c] * ks[c];
                V[(size_t)t * kvd + c] = qv[(size_t)t * kvd + c] * vs[t];
            }
        in += kvq_layer_bytes(s);
    }
}
