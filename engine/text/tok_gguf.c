/* tok_gguf.c - a tokenizer from a GGUF file's tokenizer.ggml.* keys (see tok_int.h). */
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gguf.h"
#include "tok_pre.h"
#include "tok_int.h"

/* ----------------------------------------------------------------------------
 * GGUF vocabularies */

/* Special-token id key: the file's value when it is inside the vocabulary,
 * else the default (llama.cpp's rule: files in the wild carry ids past the
 * end, e.g. a padding id equal to the vocabulary size). A value that is
 * there but not an integer is malformed. */
static int id_key(const gguf_file *f, const char *key, int n, int dflt, int *out, char *err, size_t errlen) {
    int64_t v;
    int rc = gguf_get_int(f, key, &v);
    *out = dflt >= 0 && dflt < n ? dflt : -1;
    if (rc == CK_ENOTFOUND) return 0;
    if (rc && rc != CK_ERANGE)
        return tok__set_err(err, errlen, CK_EFORMAT, "tok_from_gguf: %s is not an integer", key);
    if (!rc && v >= 0 && v < n) *out = (int)v;
    return 0;
}

static int bool_key(const gguf_file *f, const char *key, int dflt, int *out, char *err, size_t errlen) {
    int b;
    int rc = gguf_get_bool(f, key, &b);
    if (rc == CK_ENOTFOUND) {
        *out = dflt;
        return 0;
    }
    if (rc) return tok__set_err(err, errlen, CK_EFORMAT, "tok_from_gguf: %s is not a bool", key);
    *out = b;
    return 0;
}

static int str_is(const char *s, size_t n, const char *want) {
    return strlen(want) == n && memcmp(s, want, n) == 0;
}

int tok_from_gguf(const gguf_file *f, tokenizer **out, char *err, size_t errlen) {
    static const char fn[] = "tok_from_gguf";
    if (!out) return tok__set_err(err, errlen, CK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!f) return tok__set_err(err, errlen, CK_EINVAL, "%s: no file", fn);
    const char *s;
    size_t sl;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s, &sl))
        return tok__set_err(err, errlen, CK_EFORMAT, "%s: tokenizer.ggml.model missing or not a string", fn);
    tcfg c = {0};
    int gemma4 = 0;
    if (str_is(s, sl, "llama")) {
        c = tok__spm_cfg(1, 2, 0);
    } else if (str_is(s, sl, "gpt2")) {
        c.kind = TOK_KIND_BPE;
    } else if (str_is(s, sl, "gemma4")) {
        c.kind = TOK_KIND_BPE;
        gemma4 = 1;
    } else {
        return tok__set_err(err, errlen, CK_EUNSUPPORTED,
                            "%s: tokenizer.ggml.model \"%.*s\" is not supported (only \"llama\", "
                            "\"gpt2\" and \"gemma4\")",
                            fn, (int)(sl < 64 ? sl : 64), s);
    }
    c.gguf_eog = 1;

    int et;
    uint64_t nt;
    const void *data;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &nt, &data) || et != GGUF_TYPE_STRING)
        return tok__set_err(err, errlen, CK_EFORMAT,
                            "%s: tokenizer.ggml.tokens missing or not a string "
                            "array",
                            fn);
    if (nt == 0 || nt > TOK_MAX_VOCAB)
        return tok__set_err(err, errlen, CK_EFORMAT, "%s: %llu tokens, not in [1, %d]", fn,
                            (unsigned long long)nt, TOK_MAX_VOCAB);
    int n = (int)nt;

    if (c.kind == TOK_KIND_BPE) {
        /* llama.cpp's defaults: gpt2 bos = eos = 11 (dropped if outside), gemma4 none */
        c.bos = c.eos = gemma4 ? -1 : 11;
        c.unk = -1;
        c.eot = c.eom = c.pad = -1;
        c.pre = TOK_PRE_DEFAULT;
        if (gemma4) {
            c.pre = TOK_PRE_GEMMA4; /* the model decides, as in llama.cpp: `pre` is not read */
        } else if (!gguf_get_str(f, "tokenizer.ggml.pre", &s, &sl)) {
            c.pre = tok_pre_lookup(s, sl);
            if (c.pre < 0)
                return tok__set_err(err, errlen, CK_EUNSUPPORTED,
                                    "%s: pre-tokenizer \"%.*s\" (tokenizer.ggml.pre) is not supported "
                                    "(gpt-2, llama-bpe, lfm2, qwen2, qwen35, smollm, starcoder, refact, "
                                    "gemma4, gpt-4o, tekken, glm4, default)",
                                    fn, (int)(sl < 64 ? sl : 64), s);
        }
        /* llama.cpp's per-pre-tokenizer defaults, before the file's keys */
        if (c.pre == TOK_PRE_LLAMA3 || c.pre == TOK_PRE_TEKKEN) {
            c.ignore_merges = 1;
            c.add_bos = 1;
        }
        if (c.pre == TOK_PRE_GLM4) c.bos = -1; /* no BOS unless bos_token_id names one */
        c.utf8_bpe = c.pre == TOK_PRE_GEMMA4;
        if (gguf_get_arr(f, "tokenizer.ggml.merges", &et, &c.n_merges, NULL) || et != GGUF_TYPE_STRING)
            return tok__set_err(err, errlen, CK_EFORMAT,
                                "%s: tokenizer.ggml.merges missing or not a string array", fn);
        if (c.n_merges > TOK_MAX_MERGES)
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: %llu merges, more than %d", fn,
                                (unsigned long long)c.n_merges, TOK_MAX_MERGES);
        c.mf = f;
    }

    int rc;
    int bos, eos, unk, eot, eom, pad;
    if ((rc = id_key(f, "tokenizer.ggml.bos_token_id", n, c.bos, &bos, err, errlen)) ||
        (rc = id_key(f, "tokenizer.ggml.eos_token_id", n, c.eos, &eos, err, errlen)) ||
        (rc = id_key(f, "tokenizer.ggml.unknown_token_id", n, c.unk, &unk, err, errlen)) ||
        (rc = id_key(f, "tokenizer.ggml.eot_token_id", n, -1, &eot, err, errlen)) ||
        (rc = id_key(f, "tokenizer.ggml.eom_token_id", n, -1, &eom, err, errlen)) ||
        (rc = id_key(f, "tokenizer.ggml.padding_token_id", n, -1, &pad, err, errlen)) ||
        (rc = bool_key(f, "tokenizer.ggml.add_bos_token", c.add_bos, &c.add_bos, err, errlen)) ||
        (rc = bool_key(f, "tokenizer.ggml.add_eos_token", c.add_eos, &c.add_eos, err, errlen)) ||
        (rc = bool_key(f, "tokenizer.ggml.add_space_prefix", c.add_space_prefix, &c.add_space_prefix, err,
                       errlen)))
        return rc;
    /* llama.cpp adds BOS for Gemma 4 even when the file says not to */
    if (c.pre == TOK_PRE_GEMMA4) c.add_bos = 1;
    c.bos = bos;
    c.eos = eos;
    c.unk = unk;
    c.eot = eot;
    c.eom = eom;
    c.pad = pad;

    const char **pieces = calloc((size_t)n, sizeof *pieces);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    float *scores = NULL;
    int32_t *types = NULL;
    rc = CK_ENOMEM;
    if (!pieces || !lens) goto out;
    for (int i = 0; i < n; i++) {
        if (gguf_get_arr_str(f, "tokenizer.ggml.tokens", (uint64_t)i, &pieces[i], &lens[i])) {
            rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: token %d unreadable", fn, i);
            goto out;
        }
    }
    if (!gguf_get_arr(f, "tokenizer.ggml.scores", &et, &nt, &data)) {
        if ((et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32) || nt < (uint64_t)n) {
            rc = tok__set_err(err, errlen, CK_EFORMAT,
                              "%s: tokenizer.ggml.scores must be %d float32 or int32", fn, n);
            goto out;
        }
        if (!(scores = malloc((size_t)n * sizeof *scores))) goto out;
        for (int i = 0; i < n; i++) { /* elements may be unaligned in the file */
            if (et == GGUF_TYPE_FLOAT32) {
                memcpy(&scores[i], (const char *)data + 4 * (size_t)i, 4);
            } else {
                int32_t v;
                memcpy(&v, (const char *)data + 4 * (size_t)i, 4);
                scores[i] = (float)v;
            }
        }
    }
    if (!gguf_get_arr(f, "tokenizer.ggml.token_type", &et, &nt, &data)) {
        if ((et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32) || nt < (uint64_t)n) {
            rc = tok__set_err(err, errlen, CK_EFORMAT, "%s: tokenizer.ggml.token_type must be %d int32", fn,
                              n);
            goto out;
        }
        if (!(types = malloc((size_t)n * sizeof *types))) goto out;
        memcpy(types, data, (size_t)n * sizeof *types);
    }
    rc = tok__build(n, pieces, lens, scores, types, &c, out, err, errlen);
out:
    if (rc == CK_ENOMEM && err && errlen && !*out) tok__set_err(err, errlen, rc, "%s: out of memory", fn);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return rc;
}
