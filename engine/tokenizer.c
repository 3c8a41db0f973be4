/* tokenizer.c - SentencePiece-style BPE with byte fallback (see tokenizer.h). */
#include "tokenizer.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

/* ----------------------------------------------------------------------------
 * the vocabulary */

struct tokenizer {
    int n;                /* vocabulary size */
    int bos, eos, unk;    /* ids, -1 when absent */
    int from_llama2c;     /* control pieces are "\n<s>\n" and the like */
    char *arena;          /* every piece, NUL-terminated, back to back */
    size_t *off;          /* (n) offset of piece i in arena */
    size_t *len;          /* (n) byte length of piece i */
    float *score;         /* (n) merge priority: higher merges first */
    uint8_t *type;        /* (n) TOK_TYPE_* */
    int16_t *byte_val;    /* (n) the byte a BYTE piece stands for, -1 otherwise */
    int32_t *slots;       /* (mask + 1) open-addressing hash of the mergeable
                             pieces (NORMAL/USER, not bos/eos/unk): ids, -1 empty */
    size_t mask;
    int32_t byte_id[256];            /* id of piece "<0xXX>" per byte, -1 if none */
    unsigned char byte_str[256 * 2]; /* byte b as a 1-char C string at 2*b */
};

static int set_err(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

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

/* Id of the mergeable piece with these bytes, or -1. */
static int lookup(const tokenizer *t, const char *s, size_t n) {
    size_t i = (size_t)hash_bytes(s, n) & t->mask;
    for (;;) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->mask;
    }
}

static int is_mergeable(const tokenizer *t, int id) {
    if (id == t->bos || id == t->eos || id == t->unk) return 0;
    if (t->len[id] == 0) return 0;
    return t->type[id] == TOK_TYPE_NORMAL || t->type[id] == TOK_TYPE_USER;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->byte_val);
    free(t->slots);
    free(t);
}

/* The one constructor behind both loaders. pieces/lens/scores as
 * tok_from_arrays (lens non-NULL); types NULL or 0 entries: inferred.
 * conv_u2581: turn "▁" into ' ' while copying. */
static int build(int n, const char *const *pieces, const size_t *lens, const float *scores,
                 const int32_t *types, int bos, int eos, int unk, int conv_u2581,
                 int from_llama2c, tokenizer **out, char *err, size_t errlen) {
    static const char fn[] = "tok_build";
    int rc = CK_ENOMEM;
    tokenizer *t = NULL;
    *out = NULL;
    if (n <= 0 || n > TOK_MAX_VOCAB)
        return set_err(err, errlen, CK_EINVAL, "%s: vocabulary size %d not in [1, %d]", fn, n,
                       TOK_MAX_VOCAB);
    if (bos < -1 || bos >= n || eos < -1 || eos >= n || unk < -1 || unk >= n)
        return set_err(err, errlen, CK_EINVAL, "%s: bos/eos/unk ids %d/%d/%d outside [-1, %d)",
                       fn, bos, eos, unk, n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!pieces[i] && lens[i] > 0)
            return set_err(err, errlen, CK_EINVAL, "%s: piece %d is NULL", fn, i);
        if (lens[i] > SIZE_MAX / 2 - total - 1)
            return set_err(err, errlen, CK_EFORMAT, "%s: pieces too long", fn);
        total += lens[i] + 1;
        if (scores && isnan(scores[i]))
            return set_err(err, errlen, CK_EFORMAT, "%s: piece %d has a NaN score", fn, i);
        if (types && (types[i] < 0 || types[i] > TOK_TYPE_BYTE))
            return set_err(err, errlen, CK_EFORMAT, "%s: piece %d has token type %d", fn, i,
                           (int)types[i]);
    }

    t = calloc(1, sizeof *t);
    if (!t) goto fail;
    t->n = n;
    t->bos = bos;
    t->eos = eos;
    t->unk = unk;
    t->from_llama2c = from_llama2c;
    t->arena = malloc(total);
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->type = malloc((size_t)n);
    t->byte_val = malloc((size_t)n * sizeof *t->byte_val);
    if (!t->arena || !t->off || !t->len || !t->score || !t->type || !t->byte_val) goto fail;

    /* copy the pieces, "▁" (E2 96 81) -> ' ' */
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *p = pieces[i];
        size_t pl = lens[i], o = at;
        for (size_t k = 0; k < pl; k++) {
            if (conv_u2581 && k + 2 < pl && (unsigned char)p[k] == 0xE2 &&
                (unsigned char)p[k + 1] == 0x96 && (unsigned char)p[k + 2] == 0x81) {
                t->arena[at++] = ' ';
                k += 2;
            } else {
                t->arena[at++] = p[k];
            }
        }
        t->arena[at++] = '\0';
        t->off[i] = o;
        t->len[i] = at - o - 1;
        t->score[i] = scores ? scores[i] : 0.0f;
    }

    /* types, byte pieces */
    for (int b = 0; b < 256; b++) {
        t->byte_id[b] = -1;
        t->byte_str[2 * b] = (unsigned char)b;
        t->byte_str[2 * b + 1] = 0;
    }
    for (int i = 0; i < n; i++) {
        const char *p = t->arena + t->off[i];
        int bv = parse_byte_piece(p, t->len[i]);
        int ty = types ? (int)types[i] : 0;
        if (ty == 0) {
            if (i == unk) ty = TOK_TYPE_UNKNOWN;
            else if (i == bos || i == eos) ty = TOK_TYPE_CONTROL;
            else if (bv >= 0) ty = TOK_TYPE_BYTE;
            else ty = TOK_TYPE_NORMAL;
        }
        t->type[i] = (uint8_t)ty;
        t->byte_val[i] = (int16_t)(ty == TOK_TYPE_BYTE ? bv : -1);
        if (ty == TOK_TYPE_BYTE && bv >= 0 && t->byte_id[bv] < 0) t->byte_id[bv] = i;
    }

    /* hash of the mergeable pieces; on duplicates the lowest id wins */
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    t->slots = malloc(cap * sizeof *t->slots);
    if (!t->slots) goto fail;
    memset(t->slots, 0xff, cap * sizeof *t->slots);
    t->mask = cap - 1;
    for (int i = 0; i < n; i++) {
        if (!is_mergeable(t, i)) continue;
        const char *p = t->arena + t->off[i];
        size_t h = (size_t)hash_bytes(p, t->len[i]) & t->mask;
        int dup = 0;
        while (t->slots[h] >= 0) {
            int32_t j = t->slots[h];
            if (t->len[j] == t->len[i] && memcmp(t->arena + t->off[j], p, t->len[i]) == 0) {
                dup = 1;
                break;
            }
            h = (h + 1) & t->mask;
        }
        if (!dup) t->slots[h] = i;
    }
    *out = t;
    return 0;

fail:
    tok_free(t);
    return set_err(err, errlen, rc, "%s: out of memory", fn);
}

int tok_from_arrays(int n, const char *const *pieces, const size_t *lens, const float *scores,
                    const int32_t *types, int bos, int eos, int unk, tokenizer **out,
                    char *err, size_t errlen) {
    if (!out) return set_err(err, errlen, CK_EINVAL, "%s: out is NULL", __func__);
    *out = NULL;
    if (!pieces || n <= 0 || n > TOK_MAX_VOCAB)
        return set_err(err, errlen, CK_EINVAL, "%s: no pieces or bad count %d", __func__, n);
    const size_t *use = lens;
    size_t *tmp = NULL;
    if (!lens) {
        tmp = malloc((size_t)n * sizeof *tmp);
        if (!tmp) return set_err(err, errlen, CK_ENOMEM, "%s: out of memory", __func__);
        for (int i = 0; i < n; i++) tmp[i] = pieces[i] ? strlen(pieces[i]) : 0;
        use = tmp;
    }
    int rc = build(n, pieces, use, scores, types, bos, eos, unk, 1, 0, out, err, errlen);
    free(tmp);
    return rc;
}

static uint32_t rd_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t u = rd_u32(p);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int tok_load_llama2c(const char *path, int vocab_size, tokenizer **out, char *err,
                     size_t errlen) {
    static const char fn[] = "tok_load_llama2c";
    if (!out) return set_err(err, errlen, CK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!path) return set_err(err, errlen, CK_EINVAL, "%s: path is NULL", fn);
    if (vocab_size < 3 || vocab_size > TOK_MAX_VOCAB)
        return set_err(err, errlen, CK_EINVAL, "%s: vocab_size %d not in [3, %d]", fn,
                       vocab_size, TOK_MAX_VOCAB);

    int rc;
    unsigned char *buf = NULL;
    const char **pieces = NULL;
    size_t *lens = NULL;
    float *scores = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return set_err(err, errlen, CK_EIO, "%s: cannot open %s", fn, path);
    long fsz = -1;
    if (fseek(f, 0, SEEK_END) == 0) fsz = ftell(f);
    if (fsz < 0 || fseek(f, 0, SEEK_SET) != 0) {
        rc = set_err(err, errlen, CK_EIO, "%s: cannot size %s", fn, path);
        goto done;
    }
    size_t size = (size_t)fsz;
    /* the smallest file with vocab_size pieces: header + (score, len) each */
    if (size < 4 + 8 * (size_t)vocab_size) {
        rc = set_err(err, errlen, CK_EFORMAT,
                     "%s: %s has %zu bytes, too short for %d pieces", fn, path, size,
                     vocab_size);
        goto done;
    }
    buf = malloc(size);
    pieces = malloc((size_t)vocab_size * sizeof *pieces);
    lens = malloc((size_t)vocab_size * sizeof *lens);
    scores = malloc((size_t)vocab_size * sizeof *scores);
    if (!buf || !pieces || !lens || !scores) {
        rc = set_err(err, errlen, CK_ENOMEM, "%s: out of memory", fn);
        goto done;
    }
    if (fread(buf, 1, size, f) != size) {
        rc = set_err(err, errlen, CK_EIO, "%s: short read on %s", fn, path);
        goto done;
    }
    int32_t max_len = rd_i32(buf);
    if (max_len < 0) {
        rc = set_err(err, errlen, CK_EFORMAT, "%s: %s: negative max_token_length %d", fn, path,
                     (int)max_len);
        goto done;
    }
    size_t pos = 4;
    for (int i = 0; i < vocab_size; i++) {
        if (size - pos < 8) {
            rc = set_err(err, errlen, CK_EFORMAT, "%s: %s: truncated at piece %d of %d", fn,
                         path, i, vocab_size);
            goto done;
        }
        uint32_t sbits = rd_u32(buf + pos);
        memcpy(&scores[i], &sbits, sizeof scores[i]);
        int32_t l = rd_i32(buf + pos + 4);
        pos += 8;
        if (l < 0 || (size_t)l > size - pos) {
            rc = set_err(err, errlen, CK_EFORMAT,
                         "%s: %s: piece %d has length %d, %zu bytes left", fn, path, i, (int)l,
                         size - pos);
            goto done;
        }
        pieces[i] = (const char *)buf + pos;
        lens[i] = (size_t)l;
        pos += (size_t)l;
    }
    rc = build(vocab_size, pieces, lens, scores, NULL, 1, 2, 0, 0, 1, out, err, errlen);

done:
    fclose(f);
    free(buf);
    free(pieces);
    free(lens);
    free(scores);
    return rc;
}

int tok_vocab_size(const tokenizer *t) { return t ? t->n : 0; }
int tok_bos(const tokenizer *t) { return t ? t->bos : -1; }
int tok_eos(const tokenizer *t) { return t ? t->eos : -1; }
int tok_unk(const tokenizer *t) { return t ? t->unk : -1; }

const char *tok_piece(const tokenizer *t, int id, size_t *len) {
    if (!t || id < 0 || id >= t->n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return t->arena + t->off[id];
}

float tok_score(const tokenizer *t, int id) {
    return (t && id >= 0 && id < t->n) ? t->score[id] : 0.0f;
}

int tok_type(const tokenizer *t, int id) { return (t && id >= 0 && id < t->n) ? t->type[id] : 0; }

int tok_piece_gguf(const tokenizer *t, int id, char *buf, size_t cap, size_t *len) {
    if (!t || id < 0 || id >= t->n || !len || (!buf && cap > 0)) return CK_EINVAL;
    const char *p = t->arena + t->off[id];
    size_t pl = t->len[id];
    if (t->from_llama2c && (id == t->bos || id == t->eos || id == t->unk)) {
        p = id == t->bos ? "<s>" : id == t->eos ? "</s>" : "<unk>";
        pl = strlen(p);
    }
    size_t need = 0;
    for (size_t k = 0; k < pl; k++) need += p[k] == ' ' ? 3 : 1;
    *len = need;
    if (cap < need + 1) return CK_ETOOLONG;
    size_t o = 0;
    for (size_t k = 0; k < pl; k++) {
        if (p[k] == ' ') {
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

/* ----------------------------------------------------------------------------
 * encoding: symbols in a linked list, candidate merges in a max-heap
 *
 * llama2.c rescans every adjacent pair after each merge and merges the best
 * (highest score, leftmost on ties). Here each adjacent mergeable pair is
 * pushed once, when it forms, keyed by (score, position of its left symbol);
 * a popped pair is stale when either side has merged since. Symbols keep
 * their index when they absorb their right neighbour, so index order is text
 * order and "leftmost" is "smallest left index": the same merges, in the same
 * order, in O(n log n). */

typedef struct {
    int32_t start, len;  /* bytes [start, start + len) of the working text; len 0: merged away */
    int32_t id;          /* piece id */
    int32_t prev, next;  /* neighbours, -1 at the ends */
    int32_t mergeable;   /* 0 for byte-fallback and UNK symbols */
} tsym;

typedef struct {
    float score;
    int32_t left, right, id, len;
} tpair;

static int pair_before(const tpair *a, const tpair *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->left < b->left;
}

typedef struct {
    const tokenizer *t;
    const char *w;
    tsym *sym;
    tpair *heap;
    int n_heap;
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
    if (!a->mergeable || !b->mergeable) return;
    int32_t n = a->len + b->len;
    int id = lookup(e->t, e->w + a->start, (size_t)n);
    if (id < 0) return;
    tpair p = {e->t->score[id], l, r, id, n};
    heap_push(e, p);
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

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
               int max, int *n_out) {
    if (!t || !n_out || (!text && len > 0) || max < 0 || (!out && max > 0)) return CK_EINVAL;
    *n_out = 0;
    /* symbols are indexed by int32: keep the working text well inside it */
    if (len > (size_t)(INT32_MAX / 4)) return CK_ETOOLONG;

    int count = 0;
    if (add_bos && t->bos >= 0) {
        if (count < max) out[count] = t->bos;
        count++;
    }
    if (len == 0) {
        *n_out = count;
        return count > max ? CK_ETOOLONG : 0;
    }

    /* working text: the dummy prefix " ", then the text */
    size_t wn = len + 1;
    char *w = malloc(wn);
    tsym *sym = malloc(wn * sizeof *sym);
    tpair *heap = malloc(3 * wn * sizeof *heap);
    int rc = CK_ENOMEM;
    if (!w || !sym || !heap) goto done;
    w[0] = ' ';
    memcpy(w + 1, text, len);

    tenc e = {t, w, sym, heap, 0};
    int ns = 0;
    size_t i = 0;
    while (i < wn) {
        /* the dummy prefix is a codepoint of its own, as in llama2.c */
        size_t cl = i == 0 ? 1 : utf8_len((const unsigned char *)w + i, wn - i);
        int id = lookup(t, w + i, cl);
        if (id >= 0) {
            sym[ns] = (tsym){(int32_t)i, (int32_t)cl, id, ns - 1, ns + 1, 1};
            ns++;
        } else {
            for (size_t k = 0; k < cl; k++) {
                int bid = t->byte_id[(unsigned char)w[i + k]];
                if (bid < 0) bid = t->unk;
                if (bid < 0) {
                    rc = CK_ENOTFOUND;
                    goto done;
                }
                sym[ns] = (tsym){(int32_t)(i + k), 1, bid, ns - 1, ns + 1, 0};
                ns++;
            }
        }
        i += cl;
    }
    sym[ns - 1].next = -1;

    for (int k = 0; k + 1 < ns; k++) try_pair(&e, k, k + 1);
    while (e.n_heap > 0) {
        tpair p = heap_pop(&e);
        tsym *a = &sym[p.left], *b = &sym[p.right];
        if (a->len == 0 || b->len == 0 || a->next != p.right || a->len + b->len != p.len)
            continue; /* stale: a side merged since this pair was pushed */
        a->len = p.len;
        a->id = p.id;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) sym[b->next].prev = p.left;
        try_pair(&e, a->prev, p.left);
        try_pair(&e, p.left, a->next);
    }

    for (int k = 0; k >= 0; k = sym[k].next) {
        if (count < max) out[count] = sym[k].id;
        count++;
    }
    *n_out = count;
    rc = count > max ? CK_ETOOLONG : 0;

done:
    free(w);
    free(sym);
    free(heap);
    return rc;
}

/* ----------------------------------------------------------------------------
 * decoding */

const char *tok_decode(const tokenizer *t, int prev, int id, size_t *len) {
    size_t dummy;
    if (!len) len = &dummy;
    *len = 0;
    if (!t || id < 0 || id >= t->n || t->type[id] == TOK_TYPE_CONTROL) return "";
    if (t->byte_val[id] >= 0) {
        *len = 1;
        return (const char *)t->byte_str + 2 * t->byte_val[id];
    }
    const char *p = t->arena + t->off[id];
    size_t n = t->len[id];
    /* after BOS, SentencePiece's decoder drops the dummy prefix's space */
    if (t->bos >= 0 && prev == t->bos && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *len = n;
    return p;
}
