/* tok_llama2c.c - a tokenizer from a llama2.c tokenizer file (see tok_int.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "tok_int.h"

/* ----------------------------------------------------------------------------
 * llama2.c tokenizer files */

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int tok_load_llama2c(const char *path, int vocab_size, tokenizer **out, char *err, size_t errlen) {
    static const char fn[] = "tok_load_llama2c";
    if (!out) return tok__set_err(err, errlen, CK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return tok__set_err(err, errlen, CK_EINVAL, "%s: path is NULL", fn);
    if (vocab_size < 3 || vocab_size > TOK_MAX_VOCAB)
        return tok__set_err(err, errlen, CK_EINVAL, "%s: vocab_size %d not in [3, %d]", fn, vocab_size,
                            TOK_MAX_VOCAB);

    int rc;
    unsigned char *buf = NULL;
    const char **pieces = NULL;
    size_t *lens = NULL;
    float *scores = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return tok__set_err(err, errlen, CK_EIO, "%s: cannot open %s", fn, path);
    long fsz = -1;
    if (fseek(f, 0, SEEK_END) == 0) fsz = ftell(f);
    if (fsz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = tok__set_err(err, errlen, CK_EIO, "%s: cannot size %s", fn, path);
        goto done;
    }
    size_t size = (size_t)fsz;
    /* the smallest file with vocab_size pieces: header + (score, len) each */
    if (size < 4 + 8 * (size_t)vocab_size) {
        rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: %s has %zu bytes, too short for %d pieces", fn, path,
                          size, vocab_size);
        goto done;
    }
    buf = malloc(size);
    pieces = malloc((size_t)vocab_size * sizeof *pieces);
    lens = malloc((size_t)vocab_size * sizeof *lens);
    scores = malloc((size_t)vocab_size * sizeof *scores);
    if (!buf || !pieces || !lens || !scores) {
        rc = tok__set_err(err, errlen, CK_ENOMEM, "%s: out of memory", fn);
        goto done;
    }
    if (fread(buf, 1, size, f) != size) {
        rc = tok__set_err(err, errlen, CK_EIO, "%s: short read on %s", fn, path);
        goto done;
    }
    int32_t max_len = rd_i32(buf);
    if (max_len < 0) {
        rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: %s: negative max_token_length %d", fn, path,
                          (int)max_len);
        goto done;
    }
    size_t pos = 4;
    for (int i = 0; i < vocab_size; i++) {
        if (size - pos < 8) {
            rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: %s: truncated at piece %d of %d", fn, path, i,
                              vocab_size);
            goto done;
        }
        uint32_t sbits = rd_u32(buf + pos);
        memcpy(&scores[i], &sbits, sizeof scores[i]);
        int32_t l = rd_i32(buf + pos + 4);
        pos += 8;
        if (l < 0 || (size_t)l > size - pos) {
            rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: %s: piece %d has length %d, %zu bytes left", fn,
                              path, i, (int)l, size - pos);
            goto done;
        }
        pieces[i] = (const char *)buf + pos;
        lens[i] = (size_t)l;
        pos += (size_t)l;
    }
    tcfg c = tok__spm_cfg(1, 2, 0);
    c.conv_u2581 = 0;
    c.from_llama2c = 1;
    rc = tok__build(vocab_size, pieces, lens, scores, NULL, &c, out, err, errlen);

done:
    fclose(f);
    free(buf);
    free(pieces);
    free(lens);
    free(scores);
    return rc;
}
