/* tok_build.c - building a tokenizer from its pieces: GPT-2's byte-level
 * alphabet, the merges, piece types, and tok_from_arrays (see tok_int.h). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "gguf.h"
#include "tok_int.h"

/* ----------------------------------------------------------------------------
 * GPT-2's byte-to-unicode alphabet: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
 * stand for themselves (as codepoints), the 68 others, in byte order, for
 * U+0100, U+0101, ... So every byte is one printable codepoint. */

static int bl_is_self(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

/* The codepoint byte b is written as. */
static unsigned bl_cp_of(unsigned b) {
    if (bl_is_self(b)) return b;
    unsigned k = 0; /* b's rank among the non-self bytes */
    for (unsigned c = 0; c < b; c++) k += !bl_is_self(c);
    return 256 + k;
}

/* The byte codepoint cp stands for, or -1. */
static int bl_byte_of(unsigned cp) {
    if (cp < 256) return bl_is_self(cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    unsigned k = cp - 256;
    for (unsigned b = 0; b < 256; b++)
        if (!bl_is_self(b) && k-- == 0) return (int)b;
    return -1;
}

/* Decode s (n bytes, UTF-8 in the alphabet) into raw bytes at out (room for
 * n). Returns the raw length, or -1 when s is not in the alphabet. The
 * alphabet's codepoints are all below U+0800: one or two UTF-8 bytes. */
static long bl_decode(const int16_t *rev, const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned c = (unsigned char)s[i], cp;
        if (c < 0x80) {
            cp = c;
            i += 1;
        } else if ((c & 0xE0) == 0xC0 && i + 1 < n && ((unsigned char)s[i + 1] & 0xC0) == 0x80) {
            cp = (c & 0x1F) << 6 | ((unsigned char)s[i + 1] & 0x3F);
            i += 2;
        } else {
            return -1;
        }
        if (cp >= 0x800 || rev[cp] < 0) return -1;
        out[o++] = (char)rev[cp];
    }
    return (long)o;
}

/* rev[cp] = byte for the alphabet's codepoints (cp < 0x800), -1 otherwise */
static void bl_reverse_table(int16_t *rev) {
    for (unsigned cp = 0; cp < 0x800; cp++) rev[cp] = (int16_t)bl_byte_of(cp);
}

size_t tok__unescape_u2581(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t k = 0; k < n; k++) {
        if (k + 2 < n && (unsigned char)s[k] == 0xE2 && (unsigned char)s[k + 1] == 0x96 &&
            (unsigned char)s[k + 2] == 0x81) {
            out[o++] = ' ';
            k += 2;
        } else {
            out[o++] = s[k];
        }
    }
    return o;
}

/* ----------------------------------------------------------------------------
 * construction */

static int hex_val(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* The byte of a "<0xXX>" piece, or -1. */
static int parse_byte_piece(const char *p, size_t n) {
    if (n != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
    int hi = hex_val((unsigned char)p[3]), lo = hex_val((unsigned char)p[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
}

/* llama.cpp's texts of end-of-generation pieces (llama-vocab.cpp, the
 * special_eog_ids rule); the first eleven are also its end-of-turn texts. */
static const char *const eog_texts[] = {
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<end_of_utterance>",
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<|return|>",
    "<|call|>",
    "<|eom_id|>",
    "[EOS]",
    "</s>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<|flush|>",
    "<|calls|>",
};
#define N_EOT_TEXTS 11

static int text_in(const char *p, size_t n, const char *const *list, size_t k) {
    for (size_t i = 0; i < k; i++)
        if (strlen(list[i]) == n && memcmp(list[i], p, n) == 0) return 1;
    return 0;
}

/* Read and decode the merges into t (BPE): from the byte-level alphabet, or
 * for utf8_bpe "▁" to ' ' (the pieces are stored so). */
static int load_merges(tokenizer *t, const tcfg *c, const int16_t *rev, char *err, size_t errlen) {
    static const char fn[] = "tok_from_gguf";
    const char *key = "tokenizer.ggml.merges";
    int n = (int)c->n_merges;
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        const char *s;
        size_t l;
        if (gguf_get_arr_str(c->mf, key, (uint64_t)r, &s, &l))
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: merge %d unreadable", fn, r);
        total += l;
    }
    t->n_merges = n;
    t->m_arena = malloc(total + 1);
    t->m_off = malloc(((size_t)n + 1) * sizeof *t->m_off);
    t->m_left = malloc(((size_t)n + 1) * sizeof *t->m_left);
    t->m_len = malloc(((size_t)n + 1) * sizeof *t->m_len);
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    t->m_slots = malloc(cap * sizeof *t->m_slots);
    t->m_mask = cap - 1;
    if (!t->m_arena || !t->m_off || !t->m_left || !t->m_len || !t->m_slots)
        return tok__set_err(err, errlen, CK_ENOMEM, "%s: out of memory", fn);
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        const char *s;
        size_t l;
        gguf_get_arr_str(c->mf, key, (uint64_t)r, &s, &l);
        /* as llama.cpp: the sides split at the first space after byte 0 */
        const char *sp = l > 1 ? memchr(s + 1, ' ', l - 1) : NULL;
        if (!sp || sp + 1 == s + l)
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: merge %d (\"%.*s\") is not \"left right\"", fn,
                                r, (int)(l < 40 ? l : 40), s);
        size_t ll = (size_t)(sp - s), rl = l - ll - 1;
        long a, b;
        if (t->utf8_bpe) {
            a = (long)tok__unescape_u2581(s, ll, t->m_arena + at);
            b = (long)tok__unescape_u2581(sp + 1, rl, t->m_arena + at + a);
        } else {
            a = bl_decode(rev, s, ll, t->m_arena + at);
            b = a < 0 ? -1 : bl_decode(rev, sp + 1, rl, t->m_arena + at + a);
        }
        t->m_off[r] = at;
        if (a < 0 || b < 0) { /* outside the alphabet: no text can reach it */
            t->m_left[r] = t->m_len[r] = 0;
            continue;
        }
        t->m_left[r] = (uint32_t)a;
        t->m_len[r] = (uint32_t)(a + b);
        at += (size_t)(a + b);
    }
    return 0;
}

/* The one constructor behind every loader. pieces/lens/scores as
 * tok_from_arrays (lens non-NULL); types NULL or 0 entries: inferred. */
int tok__build(int n, const char *const *pieces, const size_t *lens, const float *scores,
               const int32_t *types, const tcfg *c, tokenizer **out, char *err, size_t errlen) {
    static const char fn[] = "tok_build";
    int rc = CK_ENOMEM;
    tokenizer *t = NULL;
    int16_t *rev = NULL;
    *out = NULL;
    int bos = c->bos, eos = c->eos, unk = c->unk;
    if (n <= 0 || n > TOK_MAX_VOCAB)
        return tok__set_err(err, errlen, CK_EINVAL, "%s: vocabulary size %d not in [1, %d]", fn, n,
                            TOK_MAX_VOCAB);
    if (bos < -1 || bos >= n || eos < -1 || eos >= n || unk < -1 || unk >= n)
        return tok__set_err(err, errlen, CK_EINVAL, "%s: bos/eos/unk ids %d/%d/%d outside [-1, %d)", fn, bos,
                            eos, unk, n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!pieces[i] && lens[i] > 0)
            return tok__set_err(err, errlen, CK_EINVAL, "%s: piece %d is NULL", fn, i);
        if (lens[i] > SIZE_MAX / 2 - total - 1)
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: pieces too long", fn);
        total += lens[i] + 1;
        if (scores && isnan(scores[i]))
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: piece %d has a NaN score", fn, i);
        if (types && (types[i] < 0 || types[i] > TOK_TYPE_BYTE))
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: piece %d has token type %d", fn, i,
                                (int)types[i]);
    }

    t = calloc(1, sizeof *t);
    if (!t) goto fail;
    t->n = n;
    t->kind = c->kind;
    t->pre = c->pre;
    t->bos = bos;
    t->eos = eos;
    t->unk = unk;
    t->eot = c->eot;
    t->eom = c->eom;
    t->pad = c->pad;
    t->add_bos = c->add_bos && bos >= 0;
    t->add_eos = c->add_eos && eos >= 0;
    t->add_space_prefix = c->kind == TOK_KIND_SPM && c->add_space_prefix;
    t->ignore_merges = c->ignore_merges;
    t->utf8_bpe = c->kind == TOK_KIND_BPE && c->utf8_bpe;
    t->from_llama2c = c->from_llama2c;
    t->arena = malloc(total);
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->type = malloc((size_t)n);
    t->eog = calloc((size_t)n, 1);
    t->blevel = calloc((size_t)n, 1);
    t->byte_val = malloc((size_t)n * sizeof *t->byte_val);
    if (!t->arena || !t->off || !t->len || !t->score || !t->type || !t->eog || !t->blevel || !t->byte_val)
        goto fail;
    if (c->kind == TOK_KIND_BPE && !t->utf8_bpe) {
        if (!(rev = malloc(0x800 * sizeof *rev))) goto fail;
        bl_reverse_table(rev);
    }

    /* llama.cpp's rule for Gemma 4 (and PaddleOCR): a vocabulary with
     * "<|tool_response>" uses "</s>" as plain text, neither end of
     * generation nor special, whatever its type in the file */
    int plain_eos_text = 0;
    for (int i = 0; c->gguf_eog && i < n && !plain_eos_text; i++)
        plain_eos_text = lens[i] == 16 && memcmp(pieces[i], "<|tool_response>", 16) == 0;

    /* types first: they decide how a piece is copied */
    for (int i = 0; i < n; i++) {
        int bv = parse_byte_piece(pieces[i], lens[i]);
        int ty = types ? (int)types[i] : 0;
        if (ty == 0) {
            if (i == unk)
                ty = TOK_TYPE_UNKNOWN;
            else if (i == bos || i == eos)
                ty = TOK_TYPE_CONTROL;
            else if (bv >= 0)
                ty = TOK_TYPE_BYTE;
            else
                ty = TOK_TYPE_NORMAL;
        }
        /* llama.cpp types the end-of-generation pieces CONTROL whatever the
         * file says, so they are never produced from plain text */
        if (plain_eos_text && lens[i] == 4 && memcmp(pieces[i], "</s>", 4) == 0)
            ty = TOK_TYPE_NORMAL;
        else if (c->gguf_eog && ty != TOK_TYPE_CONTROL &&
                 text_in(pieces[i], lens[i], eog_texts, sizeof eog_texts / sizeof eog_texts[0]))
            ty = TOK_TYPE_CONTROL;
        t->type[i] = (uint8_t)ty;
    }

    /* copy the pieces: SPM "▁" (E2 96 81) -> ' '; BPE pieces from the
     * byte-level alphabet to raw bytes, or (utf8_bpe) "▁" -> ' '; BPE special
     * and byte pieces as written */
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *p = pieces[i];
        size_t pl = lens[i], o = at;
        long raw = -1;
        if (c->kind == TOK_KIND_BPE && !tok__is_special_type(t->type[i]) && t->type[i] != TOK_TYPE_BYTE)
            raw = t->utf8_bpe ? (long)tok__unescape_u2581(p, pl, t->arena + at)
                              : bl_decode(rev, p, pl, t->arena + at);
        if (raw >= 0) {
            at += (size_t)raw;
            t->blevel[i] = 1;
        } else if (c->conv_u2581) {
            at += tok__unescape_u2581(p, pl, t->arena + at);
        } else {
            memcpy(t->arena + at, p, pl);
            at += pl;
        }
        t->arena[at++] = '\0';
        t->off[i] = o;
        t->len[i] = at - o - 1;
        t->score[i] = scores ? scores[i] : 0.0f;
    }

    /* byte pieces */
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = -1;
        t->byte_str[2 * b] = (unsigned char)b;
        t->byte_str[2 * b + 1] = 0;
    }
    for (int i = 0; i < n; i++) {
        int bv = parse_byte_piece(t->arena + t->off[i], t->len[i]);
        int ty = t->type[i];
        t->byte_val[i] = (int16_t)(ty == TOK_TYPE_BYTE ? bv : -1);
        if (ty == TOK_TYPE_BYTE && bv >= 0 && t->byte_id[bv] < 0) t->byte_id[bv] = i;
    }

    /* end of generation: eos, eot, eom; for GGUF vocabularies llama.cpp's
     * text rules (the first EOT-looking piece is eot when no key said) */
    for (int i = 0; c->gguf_eog && i < n; i++) {
        const char *p = t->arena + t->off[i];
        size_t pl = t->len[i];
        if (t->eot < 0 && text_in(p, pl, eog_texts, N_EOT_TEXTS)) t->eot = i;
        if (t->eom < 0 && pl == 10 && memcmp(p, "<|eom_id|>", 10) == 0) t->eom = i;
        if (text_in(p, pl, eog_texts, sizeof eog_texts / sizeof eog_texts[0])) t->eog[i] = 1;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    for (int i = 0; plain_eos_text && i < n; i++)
        if (t->len[i] == 4 && memcmp(t->arena + t->off[i], "</s>", 4) == 0) t->eog[i] = 0;

    /* special tokens: their distinct lengths and leading byte pairs */
    int n_sp = 0;
    t->max_piece = 1;
    for (int i = 0; i < n; i++) {
        /* utf8_bpe: the text's "▁" is a space too, so a piece stands for up
         * to its length as written, 3 bytes a space */
        size_t cover = t->utf8_bpe ? lens[i] : t->len[i];
        if (tok__is_mergeable(t, i) && cover > (size_t)t->max_piece)
            t->max_piece = cover > INT_MAX ? INT_MAX : (int)cover;
        if (tok__is_special_type(t->type[i]) && t->len[i] > 0) {
            n_sp++;
            t->n_user += t->type[i] == TOK_TYPE_USER;
        }
    }
    if (n_sp > 0) {
        size_t cap = 16;
        while (cap < 2 * (size_t)n_sp) cap *= 2;
        t->sp_slots = malloc(cap * sizeof *t->sp_slots);
        t->sp_mask = cap - 1;
        t->sp_pair = calloc(65536 / 8, 1);
        t->sp_lens = malloc((size_t)n_sp * sizeof *t->sp_lens);
        if (!t->sp_slots || !t->sp_pair || !t->sp_lens) goto fail;
        for (int i = 0; i < n; i++) {
            if (!tok__is_special_type(t->type[i]) || t->len[i] == 0) continue;
            const unsigned char *p = (const unsigned char *)t->arena + t->off[i];
            size_t pl = t->len[i];
            /* a special string stands for its own length of text */
            if (pl > (size_t)t->max_piece) t->max_piece = pl > INT_MAX ? INT_MAX : (int)pl;
            if (pl == 1) {
                for (unsigned b = 0; b < 256; b++) {
                    unsigned k = (unsigned)p[0] << 8 | b;
                    t->sp_pair[k >> 3] |= (uint8_t)(1u << (k & 7));
                }
            } else {
                unsigned k = (unsigned)p[0] << 8 | p[1];
                t->sp_pair[k >> 3] |= (uint8_t)(1u << (k & 7));
            }
            int l = pl > INT_MAX ? INT_MAX : (int)pl, j = 0;
            while (j < t->n_sp_lens && t->sp_lens[j] > l) j++;
            if (j < t->n_sp_lens && t->sp_lens[j] == l) continue;
            memmove(t->sp_lens + j + 1, t->sp_lens + j, (size_t)(t->n_sp_lens - j) * sizeof *t->sp_lens);
            t->sp_lens[j] = l;
            t->n_sp_lens++;
        }
    }

    if (c->kind == TOK_KIND_BPE && c->n_merges > 0) {
        if ((rc = load_merges(t, c, rev, err, errlen))) {
            tok_free(t);
            free(rev);
            return rc;
        }
        rc = CK_ENOMEM;
    }

    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->slots) goto fail;
    t->mask = cap - 1;
    int tries = 0;
    while (!tok__build_index(t)) {
        /* a probe run over TOK_PROBE_MAX: about impossible at load <= 1/2
         * with a random seed; try a few other seeds before giving up */
        if (++tries == 4) {
            tok_free(t);
            free(rev);
            return tok__set_err(err, errlen, CK_EFORMAT, "%s: cannot index %d pieces within %d probes", fn, n,
                                TOK_PROBE_MAX);
        }
    }
    free(rev);
    *out = t;
    return 0;

fail:
    tok_free(t);
    free(rev);
    return tok__set_err(err, errlen, rc, "%s: out of memory", fn);
}

tcfg tok__spm_cfg(int bos, int eos, int unk) {
    tcfg c = {0};
    c.kind = TOK_KIND_SPM;
    c.conv_u2581 = 1;
    c.bos = bos;
    c.eos = eos;
    c.unk = unk;
    c.eot = c.eom = c.pad = -1;
    c.add_bos = 1;
    c.add_space_prefix = 1;
    return c;
}

int tok_from_arrays(int n, const char *const *pieces, const size_t *lens, const float *scores,
                    const int32_t *types, int bos, int eos, int unk, tokenizer **out, char *err,
                    size_t errlen) {
    if (!out) return tok__set_err(err, errlen, CK_EINVAL, "%s: out is NULL", __func__);
    *out = NULL;
    if (!pieces || n <= 0 || n > TOK_MAX_VOCAB)
        return tok__set_err(err, errlen, CK_EINVAL, "%s: no pieces or bad count %d", __func__, n);
    const size_t *use = lens;
    size_t *tmp = NULL;
    if (!lens) {
        tmp = malloc((size_t)n * sizeof *tmp);
        if (!tmp) return tok__set_err(err, errlen, CK_ENOMEM, "%s: out of memory", __func__);
        for (int i = 0; i < n; i++) tmp[i] = pieces[i] ? strlen(pieces[i]) : 0;
        use = tmp;
    }
    tcfg c = tok__spm_cfg(bos, eos, unk);
    int rc = tok__build(n, pieces, use, scores, types, &c, out, err, errlen);
    free(tmp);
    return rc;
}

int tok_piece_gguf(const tokenizer *t, int id, char *buf, size_t cap, size_t *len) {
    if (!t || id < 0 || id >= t->n || !len || (!buf && cap > 0)) return CK_EINVAL;
    const char *p = t->arena + t->off[id];
    size_t pl = t->len[id];
    if (t->from_llama2c && (id == t->bos || id == t->eos || id == t->unk)) {
        p = id == t->bos ? "<s>" : id == t->eos ? "</s>" : "<unk>";
        pl = strlen(p);
    }
    /* one written character per stored byte: up to 3 bytes ("▁") or, in the
     * byte-level alphabet, 1 or 2 */
    int bl = t->kind == TOK_KIND_BPE && t->blevel[id] && !t->utf8_bpe;
    int esc = t->kind == TOK_KIND_SPM || (t->utf8_bpe && t->blevel[id]); /* ' ' as "▁" */
    size_t need = 0;
    for (size_t k = 0; k < pl; k++) {
        unsigned b = (unsigned char)p[k];
        if (bl)
            need += bl_cp_of(b) < 0x80 ? 1 : 2;
        else
            need += esc && b == ' ' ? 3 : 1;
    }
    *len = need;
    if (cap < need + 1) return CK_ETOOLONG;
    size_t o = 0;
    for (size_t k = 0; k < pl; k++) {
        unsigned b = (unsigned char)p[k];
        if (bl) {
            unsigned cp = bl_cp_of(b);
            if (cp < 0x80) {
                buf[o++] = (char)cp;
            } else {
                buf[o++] = (char)(0xC0 | cp >> 6);
                buf[o++] = (char)(0x80 | (cp & 0x3F));
            }
        } else if (esc && b == ' ') {
            buf[o++] = (char)0xE2;
            buf[o++] = (char)0x96;
            buf[o++] = (char)0x81;
        } else {
            buf[o++] = p[k];
        }
    }
    buf[o] = '\0';
    return 0;
}

/* A buffer for any piece of t in its GGUF form (3 bytes a stored byte at most). */
static char *gguf_piece_buf(const tokenizer *t, size_t *cap) {
    size_t most = 0;
    for (int i = 0; i < t->n; i++)
        if (t->len[i] > most) most = t->len[i];
    *cap = 3 * most + 8; /* + "<unk>" for a llama2.c file's control pieces */
    return malloc(*cap);
}

int tok_vocab_diff(const tokenizer *a, const tokenizer *b) {
    if (!a || !b) return CK_EINVAL;
    if (a->n != b->n || a->bos != b->bos || a->eos != b->eos) return 0;
    size_t ca, cb, la, lb;
    char *pa = gguf_piece_buf(a, &ca), *pb = gguf_piece_buf(b, &cb);
    int rc = pa && pb ? -1 : CK_ENOMEM;
    for (int id = 0; rc == -1 && id < a->n; id++)
        if (tok_piece_gguf(a, id, pa, ca, &la) || tok_piece_gguf(b, id, pb, cb, &lb) || la != lb ||
            memcmp(pa, pb, la))
            rc = id;
    free(pa);
    free(pb);
    return rc;
}

int tok_vocab_hash(const tokenizer *t, char out[17]) {
    if (!t) return CK_EINVAL;
    size_t cap, len;
    char *p = gguf_piece_buf(t, &cap);
    if (!p) return CK_ENOMEM;
    uint64_t h = 1469598103934665603ull;
    const int32_t head[3] = {t->n, t->bos, t->eos};
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)head[i] >> (8 * k)) & 0xff)) * 1099511628211ull;
    for (int id = 0; id < t->n; id++) {
        if (tok_piece_gguf(t, id, p, cap, &len)) len = 0;
        for (int k = 0; k < 4; k++) h = (h ^ (((uint32_t)len >> (8 * k)) & 0xff)) * 1099511628211ull;
        for (size_t k = 0; k < len; k++) h = (h ^ (uint8_t)p[k]) * 1099511628211ull;
    }
    free(p);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    return 0;
}
