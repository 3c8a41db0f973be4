/* tok_encode.c - text to token ids, SentencePiece and byte-level BPE (see tok_int.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "tok_pre.h"
#include "tok_int.h"

/* ----------------------------------------------------------------------------
 * encoding: symbols in a linked list, candidate merges in a max-heap
 *
 * llama2.c rescans every adjacent pair after each merge and merges the best
 * (highest score, leftmost on ties). Here each adjacent mergeable pair is
 * pushed once, when it forms, keyed by (priority, position of its left
 * symbol); a popped pair is stale when either side has merged since. Symbols
 * keep their index when they absorb their right neighbour, so index order is
 * text order and "leftmost" is "smallest left index": the same merges, in
 * the same order, in O(n log n). The priority is the piece's score for
 * SentencePiece and minus the merge's rank for byte-level BPE. */

typedef struct {
    int32_t start, len; /* bytes [start, start + len) of the working text; len 0: merged away */
    int32_t prev, next; /* neighbours, -1 at the ends */
} tsym;

typedef struct {
    double prio;
    int32_t left, right, len;
} tpair;

static int pair_before(const tpair *a, const tpair *b) {
    if (a->prio != b->prio) return a->prio > b->prio;
    return a->left < b->left;
}

typedef struct {
    const tokenizer *t;
    const char *w; /* the working text */
    tsym *sym;
    tpair *heap;
    int n_heap;
    int32_t *out; /* ids: written while count < max */
    int max, count;
} tenc;

static void heap_push(tenc *e, tpair p) {
    int i = e->n_heap++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!pair_before(&p, &e->heap[up])) break;
        e->heap[i] = e->heap[up];
        i = up;
    }
    e->heap[i] = p;
}

static tpair heap_pop(tenc *e) {
    tpair top = e->heap[0], last = e->heap[--e->n_heap];
    int i = 0, n = e->n_heap;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!pair_before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n > 0) e->heap[i] = last;
    return top;
}

static void try_pair(tenc *e, int l, int r) {
    if (l < 0 || r < 0) return;
    const tsym *a = &e->sym[l], *b = &e->sym[r];
    int32_t n = a->len + b->len;
    tpair p = {0, l, r, n};
    if (e->t->kind == TOK_KIND_BPE) {
        int rank = tok__merge_rank(e->t, e->w + a->start, (size_t)n, (size_t)a->len);
        if (rank < 0) return;
        p.prio = -(double)rank;
    } else {
        int id = tok__lookup(e->t, e->w + a->start, (size_t)n);
        if (id < 0) return;
        p.prio = e->t->score[id];
    }
    heap_push(e, p);
}

static void emit(tenc *e, int32_t id) {
    if (e->count < e->max) e->out[e->count] = id;
    e->count++;
}

/* Byte c of a symbol no piece covers: its byte piece, else the one-byte
 * piece, else UNK. Returns 0 or CK_ENOTFOUND. */
static int emit_byte(tenc *e, unsigned char c) {
    int bid = e->t->byte_id[c];
    if (bid < 0) bid = e->t->one_id[c];
    if (bid < 0) bid = e->t->unk;
    if (bid < 0) return CK_ENOTFOUND;
    emit(e, bid);
    return 0;
}

/* Merge the symbols sym[0..ns) (already linked) and emit their ids: a
 * symbol that is a piece as that piece, else byte by byte (a byte piece, the
 * one-byte piece, UNK). Returns 0 or CK_ENOTFOUND. */
static int merge_and_emit(tenc *e, int ns) {
    tsym *sym = e->sym;
    e->n_heap = 0;
    for (int k = 0; k + 1 < ns; k++) try_pair(e, k, k + 1);
    while (e->n_heap > 0) {
        tpair p = heap_pop(e);
        tsym *a = &sym[p.left], *b = &sym[p.right];
        if (a->len == 0 || b->len == 0 || a->next != p.right || a->len + b->len != p.len)
            continue; /* stale: a side merged since this pair was pushed */
        a->len = p.len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) sym[b->next].prev = p.left;
        try_pair(e, a->prev, p.left);
        try_pair(e, p.left, a->next);
    }
    for (int k = 0; k >= 0 && ns > 0; k = sym[k].next) {
        int id = tok__lookup(e->t, e->w + sym[k].start, (size_t)sym[k].len);
        if (id >= 0) {
            emit(e, id);
            continue;
        }
        for (int32_t j = 0; j < sym[k].len; j++) {
            unsigned char c = (unsigned char)e->w[sym[k].start + j];
            int rc;
            if (c == ' ' && e->t->utf8_bpe) {
                /* llama.cpp merges text whose spaces are "▁": a space
                 * falls back to that character's three bytes */
                for (int b = 0; b < 3; b++)
                    if ((rc = emit_byte(e, (unsigned char)"\xe2\x96\x81"[b]))) return rc;
            } else if ((rc = emit_byte(e, c))) {
                return rc;
            }
        }
    }
    return 0;
}

/* Length of the UTF-8 codepoint starting at s[0] (s has n >= 1 bytes): the
 * lead byte's announced length when all its continuation bytes follow, else 1. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t l = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (l > n) return 1;
    for (size_t k = 1; k < l; k++)
        if ((s[k] & 0xC0) != 0x80) return 1;
    return l;
}

/* SentencePiece: one run of text, with the dummy prefix when asked. The
 * working buffer e->w (room for len + 1) receives " " + text. */
static int encode_spm(tenc *e, char *w, const char *text, size_t len, int prefix) {
    size_t wn = 0;
    if (prefix) w[wn++] = ' ';
    memcpy(w + wn, text, len);
    wn += len;
    e->w = w;
    int ns = 0;
    for (size_t i = 0; i < wn;) {
        /* the dummy prefix is a codepoint of its own, as in llama2.c */
        size_t cl = utf8_len((const unsigned char *)w + i, wn - i);
        e->sym[ns] = (tsym){(int32_t)i, (int32_t)cl, ns - 1, ns + 1};
        ns++;
        i += cl;
    }
    if (ns == 0) return 0;
    e->sym[ns - 1].next = -1;
    return merge_and_emit(e, ns);
}

/* BPE: one run of text, cut into words by the pre-tokenizer; ends has room
 * for len entries. Byte-level: every byte starts as a symbol. utf8_bpe
 * (Gemma 4): every codepoint does, over the text with each "▁" made a space
 * (llama.cpp turns spaces into "▁", so both are one character there) in w
 * (room for len); a run of newlines that is a piece is taken whole. */
static int encode_bpe(tenc *e, char *w, const char *text, size_t len, size_t *ends) {
    const tokenizer *t = e->t;
    if (t->utf8_bpe) {
        len = tok__unescape_u2581(text, len, w);
        text = w;
    }
    size_t nw;
    int rc = tok_pre_split(t->pre, text, len, ends, &nw);
    if (rc) return rc;
    e->w = text;
    size_t start = 0;
    for (size_t k = 0; k < nw; k++) {
        size_t end = ends[k], wl = end - start;
        int id = -1;
        if (t->ignore_merges || (t->utf8_bpe && text[start] == '\n')) id = tok__lookup(t, text + start, wl);
        if (id >= 0) {
            emit(e, id);
        } else {
            int ns = 0;
            for (size_t i = start; i < end; ns++) {
                size_t cl = t->utf8_bpe ? utf8_len((const unsigned char *)text + i, end - i) : 1;
                e->sym[ns] = (tsym){(int32_t)i, (int32_t)cl, ns - 1, ns + 1};
                i += cl;
            }
            e->sym[ns - 1].next = -1;
            if ((rc = merge_and_emit(e, ns))) return rc;
        }
        start = end;
    }
    return 0;
}

/* A piece of the text after the special-token cut: bytes [start, start +
 * len) of the text, or (id >= 0) one special token. */
typedef struct {
    size_t start, len;
    int32_t id;
} tfrag;

/* parse_special: every special piece; else user_ok: USER pieces. */
static int special_allowed(const tokenizer *t, int id, int parse_special, int user_ok) {
    return parse_special || (user_ok && t->type[id] == TOK_TYPE_USER);
}

/* Cut text at the special-token strings, longest strings first, as
 * llama.cpp's tokenizer_st_partition (for strings of one length: leftmost
 * first). a and b have room for 2 * len + 1 fragments; the result is in
 * *res (a or b) with *nf entries. */
static void cut_specials(const tokenizer *t, const char *text, size_t len, int parse_special, int user_ok,
                         tfrag *a, tfrag *b, tfrag **res, int *nf) {
    int n = 1;
    a[0] = (tfrag){0, len, -1};
    for (int li = 0; li < t->n_sp_lens; li++) {
        size_t L = (size_t)t->sp_lens[li];
        int m = 0;
        for (int k = 0; k < n; k++) {
            tfrag f = a[k];
            if (f.id >= 0 || f.len < L) {
                b[m++] = f;
                continue;
            }
            size_t cur = f.start, end = f.start + f.len;
            for (size_t p = f.start; p + L <= end;) {
                unsigned pair =
                    (unsigned)(unsigned char)text[p] << 8 | (L > 1 ? (unsigned char)text[p + 1] : 0);
                int id = -1;
                if (t->sp_pair[pair >> 3] & (1u << (pair & 7))) {
                    id = tok__lookup_special(t, text + p, L);
                    if (id >= 0 && !special_allowed(t, id, parse_special, user_ok)) id = -1;
                }
                if (id < 0) {
                    p++;
                    continue;
                }
                if (p > cur) b[m++] = (tfrag){cur, p - cur, -1};
                b[m++] = (tfrag){p, L, id};
                p += L;
                cur = p;
            }
            if (cur < end) b[m++] = (tfrag){cur, end - cur, -1};
        }
        tfrag *tmp = a;
        a = b;
        b = tmp;
        n = m;
    }
    *res = a;
    *nf = n;
}

int tok_encode_opts(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out, int max,
                    int *n_out) {
    if (!t || !n_out || (!text && len > 0) || max < 0 || (!out && max > 0)) return CK_EINVAL;
    *n_out = 0;
    /* symbols are indexed by int32: keep the working text well inside it */
    if (len > (size_t)(INT32_MAX / 4)) return CK_ETOOLONG;
    int parse_special = (flags & TOK_ENC_PARSE_SPECIAL) != 0;
    int add_bos = (flags & TOK_ENC_ADD_SPECIAL) && t->add_bos;
    int add_eos = (flags & TOK_ENC_ADD_SPECIAL) && t->add_eos;
    int user_ok = !(flags & TOK_ENC_NO_USER);
    int may_cut = t->n_sp_lens > 0 && ((t->n_user > 0 && user_ok) || parse_special);

    /* Work bound: each id other than BOS/EOS stands for at most max_piece
     * bytes of the text and its dummy prefixes, so text needing more than
     * (max - BOS - EOS) * max_piece bytes cannot fit. Refuse it before
     * encoding, with a lower bound of the count needed (> max), unless it is
     * short enough that the exact count is cheap (see tokenizer.h). The
     * prefix counts only when it is sure: no special token may be cut out
     * of the text (which could leave no run of text to prefix). */
    if (len > TOK_EXACT_COUNT_BYTES) {
        uint64_t fixed = (uint64_t)add_bos + (uint64_t)add_eos;
        uint64_t room = (uint64_t)max > fixed ? (uint64_t)max - fixed : 0;
        uint64_t p = t->add_space_prefix && !may_cut ? 1 : 0;
        uint64_t need = ((uint64_t)len + p + (uint64_t)t->max_piece - 1) / (uint64_t)t->max_piece;
        if (need > room) {
            uint64_t total = need + fixed;
            *n_out = total > INT_MAX ? INT_MAX : (int)total;
            return CK_ETOOLONG;
        }
    }

    tenc e = {t, NULL, NULL, NULL, 0, out, max, 0};
    int rc = CK_ENOMEM;
    char *w = NULL;
    size_t *ends = NULL;
    tfrag *fa = NULL, *fb = NULL;
    if (add_bos) emit(&e, t->bos);
    if (len > 0) {
        size_t wn = len + 1;
        w = malloc(wn);
        e.sym = malloc(wn * sizeof *e.sym);
        e.heap = malloc(3 * wn * sizeof *e.heap);
        if (t->kind == TOK_KIND_BPE) ends = malloc(len * sizeof *ends);
        fa = malloc((may_cut ? 2 * len + 1 : 1) * sizeof *fa);
        fb = may_cut ? malloc((2 * len + 1) * sizeof *fb) : NULL;
        if (!w || !e.sym || !e.heap || !fa || (may_cut && !fb) || (t->kind == TOK_KIND_BPE && !ends))
            goto done;
        tfrag *frag = fa;
        int nf = 1;
        fa[0] = (tfrag){0, len, -1};
        if (may_cut) cut_specials(t, text, len, parse_special, user_ok, fa, fb, &frag, &nf);
        int prev_special = 1; /* SentencePiece prefixes the first run too */
        for (int k = 0; k < nf; k++) {
            if (frag[k].id >= 0) {
                emit(&e, frag[k].id);
                prev_special = 1;
                continue;
            }
            if (t->kind == TOK_KIND_BPE) {
                rc = encode_bpe(&e, w, text + frag[k].start, frag[k].len, ends);
            } else {
                rc =
                    encode_spm(&e, w, text + frag[k].start, frag[k].len, t->add_space_prefix && prev_special);
            }
            if (rc) goto done;
            prev_special = 0;
        }
    }
    if (add_eos) emit(&e, t->eos);
    *n_out = e.count;
    rc = e.count > max ? CK_ETOOLONG : 0;

done:
    free(w);
    free(e.sym);
    free(e.heap);
    free(ends);
    free(fa);
    free(fb);
    return rc;
}

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, int max,
               int *n_out) {
    return tok_encode_opts(t, text, len, add_bos ? TOK_ENC_ADD_SPECIAL : 0, out, max, n_out);
}
