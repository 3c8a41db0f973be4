/* tokenizer.c - SentencePiece BPE and byte-level BPE tokenizers (see tokenizer.h). */
#include "tokenizer.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
/* inlined: the hash runs once per lookup, on a few bytes, where a call
 * into the shared library costs as much as the hashing */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "ck_err.h"
#include "gguf.h"
#include "tok_pre.h"

/* ----------------------------------------------------------------------------
 * the vocabulary */

struct tokenizer {
    int n;                /* vocabulary size */
    int kind;             /* TOK_KIND_SPM / TOK_KIND_BPE */
    int pre;              /* TOK_PRE_* (BPE) */
    int bos, eos, unk;    /* ids, -1 when absent */
    int eot, eom, pad;    /* ids, -1 when absent */
    int add_bos, add_eos; /* what TOK_ENC_ADD_SPECIAL adds (0/1) */
    int add_space_prefix; /* SPM: " " before each run of text */
    int ignore_merges;    /* BPE: a word that is a piece is taken whole */
    int from_llama2c;     /* control pieces are "\n<s>\n" and the like */
    char *arena;          /* every piece, NUL-terminated, back to back */
    size_t *off;          /* (n) offset of piece i in arena */
    size_t *len;          /* (n) byte length of piece i */
    float *score;         /* (n) merge priority: higher merges first */
    uint8_t *type;        /* (n) TOK_TYPE_* */
    uint8_t *eog;         /* (n) 1: generating it ends the generation */
    uint8_t *blevel;      /* (n) BPE: 1 if the piece was decoded from the
                             byte-to-unicode alphabet (tok_piece_gguf re-encodes) */
    int16_t *byte_val;    /* (n) the byte a BYTE piece stands for, -1 otherwise */
    int32_t *slots;       /* (mask + 1) open-addressing hash of the mergeable
                             pieces: ids, -1 empty */
    size_t mask;
    uint64_t seed;        /* of the hashes: random per tokenizer (see build_index) */
    int max_piece;        /* tok_max_piece_len, >= 1 */
    /* special tokens the text is cut at (CONTROL, USER, UNKNOWN) */
    int32_t *sp_slots;    /* (sp_mask + 1) hash of them by text: ids, -1 empty */
    size_t sp_mask;
    int *sp_lens;         /* (n_sp_lens) their distinct lengths, longest first */
    int n_sp_lens;
    int n_user;           /* USER pieces among them (cut out even without
                             TOK_ENC_PARSE_SPECIAL) */
    uint8_t *sp_pair;     /* (65536 bits) byte pairs a special string starts
                             with (a one-byte special: both its bytes x any) */
    /* merges (BPE): rank r is "left right" with left = m_arena[m_off[r],
     * + m_left[r]) and right right after it, both as raw bytes */
    int n_merges;
    char *m_arena;
    size_t *m_off;
    uint32_t *m_left, *m_len;
    int32_t *m_slots;     /* (m_mask + 1) hash by (bytes, left length): ranks */
    size_t m_mask;
    int32_t byte_id[256];            /* id of piece "<0xXX>" per byte, -1 if none */
    int32_t one_id[256];             /* id of the mergeable 1-byte piece per byte, -1 if
                                        none: most lookups are of one byte, a table
                                        beats any hash there */
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

/* The pieces come from the model file, so the hash is seeded per tokenizer
 * with a random seed: a file cannot choose pieces that collide (with the
 * old fixed FNV-1a, 50,000 crafted pieces took 5 s to load and made every
 * encode 80x slower). And no piece sits more than TOK_PROBE_MAX slots from
 * its home slot (build_index rebuilds with another seed otherwise), so a
 * lookup is bounded whatever happens. The merges and special tokens are
 * indexed the same way, under the same seed. */
#define TOK_PROBE_MAX 128 /* max run seen: 47 for 2^24 random pieces at load 1/2 */

static uint64_t hash_bytes(const tokenizer *t, const char *s, size_t n) {
    return XXH3_64bits_withSeed(s, n, t->seed);
}

/* a merge is keyed by its bytes and where they split */
static uint64_t hash_merge(const tokenizer *t, const char *s, size_t n, size_t left) {
    return XXH3_64bits_withSeed(s, n, t->seed ^ ((uint64_t)left * 0x9E3779B97F4A7C15ull));
}

/* A seed nobody outside this process can predict: getrandom, or, if the
 * kernel refuses, the clock and an address (still unknown to the file). */
static uint64_t fresh_seed(const void *salt) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) == (ssize_t)sizeof s) return s;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t mix[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)(uintptr_t)salt};
    return XXH3_64bits(mix, sizeof mix) ^ s;
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

/* Id of the mergeable piece with these bytes, or -1. Pieces longer than
 * any mergeable one are not looked up at all. */
static int lookup(const tokenizer *t, const char *s, size_t n) {
    if (n == 1) return t->one_id[(unsigned char)s[0]];
    if (n > (size_t)t->max_piece) return -1;
    size_t i = (size_t)hash_bytes(t, s, n) & t->mask;
    for (int k = 0; k < TOK_PROBE_MAX; k++) {
        int32_t id = t->slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->mask;
    }
    return -1; /* build_index put every piece within TOK_PROBE_MAX of home */
}

/* Id of the special token with exactly these bytes, or -1. */
static int lookup_special(const tokenizer *t, const char *s, size_t n) {
    if (!t->sp_slots) return -1;
    size_t i = (size_t)hash_bytes(t, s, n) & t->sp_mask;
    for (int k = 0; k < TOK_PROBE_MAX; k++) {
        int32_t id = t->sp_slots[i];
        if (id < 0) return -1;
        if (t->len[id] == n && memcmp(t->arena + t->off[id], s, n) == 0) return id;
        i = (i + 1) & t->sp_mask;
    }
    return -1;
}

/* Rank of the merge (s[0, left), s[left, n)), or -1. */
static int merge_rank(const tokenizer *t, const char *s, size_t n, size_t left) {
    size_t i = (size_t)hash_merge(t, s, n, left) & t->m_mask;
    for (int k = 0; k < TOK_PROBE_MAX; k++) {
        int32_t r = t->m_slots[i];
        if (r < 0) return -1;
        if (t->m_len[r] == n && t->m_left[r] == left &&
            memcmp(t->m_arena + t->m_off[r], s, n) == 0)
            return r;
        i = (i + 1) & t->m_mask;
    }
    return -1;
}

static int is_special_type(int ty) {
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER || ty == TOK_TYPE_UNKNOWN;
}

/* Pieces text can merge into: everything but control, unknown and byte
 * pieces (for SentencePiece also bos/eos/unk whatever their type, as
 * llama2.c), and for BPE only pieces in the byte-level alphabet or
 * user-defined ones. (A BPE vocabulary without a bos key gets llama.cpp's
 * default bos 11, often a plain piece such as ",": it must stay encodable.) */
static int is_mergeable(const tokenizer *t, int id) {
    if (t->kind == TOK_KIND_SPM && (id == t->bos || id == t->eos || id == t->unk)) return 0;
    if (t->len[id] == 0) return 0;
    int ty = t->type[id];
    if (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNKNOWN || ty == TOK_TYPE_BYTE) return 0;
    if (t->kind == TOK_KIND_BPE && ty != TOK_TYPE_USER && !t->blevel[id]) return 0;
    return 1;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->off);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t->eog);
    free(t->blevel);
    free(t->byte_val);
    free(t->slots);
    free(t->sp_slots);
    free(t->sp_lens);
    free(t->sp_pair);
    free(t->m_arena);
    free(t->m_off);
    free(t->m_left);
    free(t->m_len);
    free(t->m_slots);
    free(t);
}

/* Insert piece i into a piece hash unless a piece with the same bytes is
 * there (the lowest id wins: it was inserted first). Returns 1, or 0 if
 * the probe run would pass TOK_PROBE_MAX. */
static int index_piece(const tokenizer *t, int32_t *slots, size_t mask, int i) {
    const char *p = t->arena + t->off[i];
    size_t h = (size_t)hash_bytes(t, p, t->len[i]) & mask;
    int k = 0;
    for (; k < TOK_PROBE_MAX && slots[h] >= 0; k++) {
        int32_t j = slots[h];
        if (t->len[j] == t->len[i] && memcmp(t->arena + t->off[j], p, t->len[i]) == 0) return 1;
        h = (h + 1) & mask;
    }
    if (k >= TOK_PROBE_MAX) return 0;
    slots[h] = i;
    return 1;
}

/* Fill the hashes (pieces, special tokens, merges) under a fresh seed. On
 * duplicate piece strings the lowest id wins, as it always has: real
 * vocabularies hold duplicates (after "\xe2\x96\x81" -> ' ', a piece
 * "\xe2\x96\x81x" equals a piece " x"), so they are kept, not refused; the
 * later ids stay valid for decoding but are never produced by encoding.
 * A repeated merge keeps its lowest rank (llama.cpp's emplace does too).
 * Returns 0 if some entry would sit more than TOK_PROBE_MAX slots from home
 * (the caller retries with another seed), else 1. */
static int build_index(tokenizer *t) {
    t->seed = fresh_seed(t);
    memset(t->slots, 0xff, (t->mask + 1) * sizeof *t->slots);
    for (int b = 0; b < 256; b++) t->one_id[b] = -1;
    for (int i = 0; i < t->n; i++) {
        if (!is_mergeable(t, i)) continue;
        const char *p = t->arena + t->off[i];
        if (t->len[i] == 1) {
            if (t->one_id[(unsigned char)p[0]] < 0) t->one_id[(unsigned char)p[0]] = i;
            continue;
        }
        if (!index_piece(t, t->slots, t->mask, i)) return 0;
    }
    if (t->sp_slots) {
        memset(t->sp_slots, 0xff, (t->sp_mask + 1) * sizeof *t->sp_slots);
        for (int i = 0; i < t->n; i++)
            if (is_special_type(t->type[i]) && t->len[i] > 0 &&
                !index_piece(t, t->sp_slots, t->sp_mask, i))
                return 0;
    }
    if (t->m_slots) {
        memset(t->m_slots, 0xff, (t->m_mask + 1) * sizeof *t->m_slots);
        for (int r = 0; r < t->n_merges; r++) {
            if (t->m_len[r] == 0) continue; /* skipped: outside the alphabet */
            const char *p = t->m_arena + t->m_off[r];
            size_t h = (size_t)hash_merge(t, p, t->m_len[r], t->m_left[r]) & t->m_mask;
            int k = 0, dup = 0;
            for (; k < TOK_PROBE_MAX && t->m_slots[h] >= 0; k++) {
                int32_t q = t->m_slots[h];
                if (t->m_len[q] == t->m_len[r] && t->m_left[q] == t->m_left[r] &&
                    memcmp(t->m_arena + t->m_off[q], p, t->m_len[r]) == 0) {
                    dup = 1;
                    break;
                }
                h = (h + 1) & t->m_mask;
            }
            if (dup) continue;
            if (k >= TOK_PROBE_MAX) return 0;
            t->m_slots[h] = r;
        }
    }
    return 1;
}

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

/* ----------------------------------------------------------------------------
 * construction */

/* What a loader hands build() besides the pieces. */
typedef struct {
    int kind;             /* TOK_KIND_* */
    int pre;              /* TOK_PRE_* */
    int conv_u2581;       /* SPM: turn "▁" into ' ' while copying */
    int from_llama2c;
    int gguf_eog;         /* apply llama.cpp's EOG/EOT text rules */
    int bos, eos, unk, eot, eom, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    /* merges (BPE): n_merges strings, merge[i] with merge_len[i] bytes */
    uint64_t n_merges;
    const gguf_file *mf;  /* merges read from this file's tokenizer.ggml.merges */
} tcfg;

/* llama.cpp's texts of end-of-generation pieces (llama-vocab.cpp, the
 * special_eog_ids rule); the first eleven are also its end-of-turn texts. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<|return|>", "<|call|>", "<|eom_id|>", "[EOS]", "</s>", "<eos>", "<turn|>",
    "<|tool_response>", "<|flush|>", "<|calls|>",
};
#define N_EOT_TEXTS 11

static int text_in(const char *p, size_t n, const char *const *list, size_t k) {
    for (size_t i = 0; i < k; i++)
        if (strlen(list[i]) == n && memcmp(list[i], p, n) == 0) return 1;
    return 0;
}

/* Read and decode the merges into t (BPE). */
static int load_merges(tokenizer *t, const tcfg *c, const int16_t *rev, char *err,
                       size_t errlen) {
    static const char fn[] = "tok_from_gguf";
    const char *key = "tokenizer.ggml.merges";
    int n = (int)c->n_merges;
    size_t total = 0;
    for (int r = 0; r < n; r++) {
        const char *s;
        size_t l;
        if (gguf_get_arr_str(c->mf, key, (uint64_t)r, &s, &l))
            return set_err(err, errlen, CK_EFORMAT, "%s: merge %d unreadable", fn, r);
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
        return set_err(err, errlen, CK_ENOMEM, "%s: out of memory", fn);
    size_t at = 0;
    for (int r = 0; r < n; r++) {
        const char *s;
        size_t l;
        gguf_get_arr_str(c->mf, key, (uint64_t)r, &s, &l);
        /* as llama.cpp: the sides split at the first space after byte 0 */
        const char *sp = l > 1 ? memchr(s + 1, ' ', l - 1) : NULL;
        if (!sp || sp + 1 == s + l)
            return set_err(err, errlen, CK_EFORMAT,
                           "%s: merge %d (\"%.*s\") is not \"left right\"", fn, r,
                           (int)(l < 40 ? l : 40), s);
        size_t ll = (size_t)(sp - s), rl = l - ll - 1;
        long a = bl_decode(rev, s, ll, t->m_arena + at);
        long b = a < 0 ? -1 : bl_decode(rev, sp + 1, rl, t->m_arena + at + a);
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
static int build(int n, const char *const *pieces, const size_t *lens, const float *scores,
                 const int32_t *types, const tcfg *c, tokenizer **out, char *err,
                 size_t errlen) {
    static const char fn[] = "tok_build";
    int rc = CK_ENOMEM;
    tokenizer *t = NULL;
    int16_t *rev = NULL;
    *out = NULL;
    int bos = c->bos, eos = c->eos, unk = c->unk;
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
    t->from_llama2c = c->from_llama2c;
    t->arena = malloc(total);
    t->off = malloc((size_t)n * sizeof *t->off);
    t->len = malloc((size_t)n * sizeof *t->len);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->type = malloc((size_t)n);
    t->eog = calloc((size_t)n, 1);
    t->blevel = calloc((size_t)n, 1);
    t->byte_val = malloc((size_t)n * sizeof *t->byte_val);
    if (!t->arena || !t->off || !t->len || !t->score || !t->type || !t->eog || !t->blevel ||
        !t->byte_val)
        goto fail;
    if (c->kind == TOK_KIND_BPE) {
        if (!(rev = malloc(0x800 * sizeof *rev))) goto fail;
        bl_reverse_table(rev);
    }

    /* types first: they decide how a piece is copied */
    for (int i = 0; i < n; i++) {
        int bv = parse_byte_piece(pieces[i], lens[i]);
        int ty = types ? (int)types[i] : 0;
        if (ty == 0) {
            if (i == unk) ty = TOK_TYPE_UNKNOWN;
            else if (i == bos || i == eos) ty = TOK_TYPE_CONTROL;
            else if (bv >= 0) ty = TOK_TYPE_BYTE;
            else ty = TOK_TYPE_NORMAL;
        }
        /* llama.cpp types the end-of-generation pieces CONTROL whatever the
         * file says, so they are never produced from plain text */
        if (c->gguf_eog && ty != TOK_TYPE_CONTROL &&
            text_in(pieces[i], lens[i], eog_texts, sizeof eog_texts / sizeof eog_texts[0]))
            ty = TOK_TYPE_CONTROL;
        t->type[i] = (uint8_t)ty;
    }

    /* copy the pieces: SPM "▁" (E2 96 81) -> ' '; BPE pieces from the
     * byte-level alphabet to raw bytes (special pieces as written) */
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const char *p = pieces[i];
        size_t pl = lens[i], o = at;
        long raw = -1;
        if (c->kind == TOK_KIND_BPE && !is_special_type(t->type[i]) &&
            t->type[i] != TOK_TYPE_BYTE)
            raw = bl_decode(rev, p, pl, t->arena + at);
        if (raw >= 0) {
            at += (size_t)raw;
            t->blevel[i] = 1;
        } else {
            for (size_t k = 0; k < pl; k++) {
                if (c->conv_u2581 && k + 2 < pl && (unsigned char)p[k] == 0xE2 &&
                    (unsigned char)p[k + 1] == 0x96 && (unsigned char)p[k + 2] == 0x81) {
                    t->arena[at++] = ' ';
                    k += 2;
                } else {
                    t->arena[at++] = p[k];
                }
            }
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

    /* special tokens: their distinct lengths and leading byte pairs */
    int n_sp = 0;
    t->max_piece = 1;
    for (int i = 0; i < n; i++) {
        if (is_mergeable(t, i) && t->len[i] > (size_t)t->max_piece)
            t->max_piece = t->len[i] > INT_MAX ? INT_MAX : (int)t->len[i];
        if (is_special_type(t->type[i]) && t->len[i] > 0) {
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
            if (!is_special_type(t->type[i]) || t->len[i] == 0) continue;
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
            memmove(t->sp_lens + j + 1, t->sp_lens + j,
                    (size_t)(t->n_sp_lens - j) * sizeof *t->sp_lens);
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
    while (!build_index(t)) {
        /* a probe run over TOK_PROBE_MAX: about impossible at load <= 1/2
         * with a random seed; try a few other seeds before giving up */
        if (++tries == 4) {
            tok_free(t);
            free(rev);
            return set_err(err, errlen, CK_EFORMAT,
                           "%s: cannot index %d pieces within %d probes", fn, n,
                           TOK_PROBE_MAX);
        }
    }
    free(rev);
    *out = t;
    return 0;

fail:
    tok_free(t);
    free(rev);
    return set_err(err, errlen, rc, "%s: out of memory", fn);
}

static tcfg spm_cfg(int bos, int eos, int unk) {
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
    tcfg c = spm_cfg(bos, eos, unk);
    int rc = build(n, pieces, use, scores, types, &c, out, err, errlen);
    free(tmp);
    return rc;
}


/* ----------------------------------------------------------------------------
 * GGUF vocabularies */

/* Special-token id key: the file's value when it is inside the vocabulary,
 * else the default (llama.cpp's rule: files in the wild carry ids past the
 * end, e.g. a padding id equal to the vocabulary size). A value that is
 * there but not an integer is malformed. */
static int id_key(const gguf_file *f, const char *key, int n, int dflt, int *out, char *err,
                  size_t errlen) {
    int64_t v;
    int rc = gguf_get_int(f, key, &v);
    *out = dflt >= 0 && dflt < n ? dflt : -1;
    if (rc == CK_ENOTFOUND) return 0;
    if (rc && rc != CK_ERANGE)
        return set_err(err, errlen, CK_EFORMAT, "tok_from_gguf: %s is not an integer", key);
    if (!rc && v >= 0 && v < n) *out = (int)v;
    return 0;
}

static int bool_key(const gguf_file *f, const char *key, int dflt, int *out, char *err,
                    size_t errlen) {
    int b;
    int rc = gguf_get_bool(f, key, &b);
    if (rc == CK_ENOTFOUND) {
        *out = dflt;
        return 0;
    }
    if (rc) return set_err(err, errlen, CK_EFORMAT, "tok_from_gguf: %s is not a bool", key);
    *out = b;
    return 0;
}

static int str_is(const char *s, size_t n, const char *want) {
    return strlen(want) == n && memcmp(s, want, n) == 0;
}

int tok_from_gguf(const gguf_file *f, tokenizer **out, char *err, size_t errlen) {
    static const char fn[] = "tok_from_gguf";
    if (!out) return set_err(err, errlen, CK_EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (!f) return set_err(err, errlen, CK_EINVAL, "%s: no file", fn);
    const char *s;
    size_t sl;
    if (gguf_get_str(f, "tokenizer.ggml.model", &s, &sl))
        return set_err(err, errlen, CK_EFORMAT, "%s: tokenizer.ggml.model missing or not a string",
                       fn);
    tcfg c = {0};
    if (str_is(s, sl, "llama")) {
        c = spm_cfg(1, 2, 0);
    } else if (str_is(s, sl, "gpt2")) {
        c.kind = TOK_KIND_BPE;
    } else {
        return set_err(err, errlen, CK_EUNSUPPORTED,
                       "%s: tokenizer.ggml.model \"%.*s\" is not supported (only \"llama\" and "
                       "\"gpt2\")", fn, (int)(sl < 64 ? sl : 64), s);
    }
    c.gguf_eog = 1;

    int et;
    uint64_t nt;
    const void *data;
    if (gguf_get_arr(f, "tokenizer.ggml.tokens", &et, &nt, &data) || et != GGUF_TYPE_STRING)
        return set_err(err, errlen, CK_EFORMAT, "%s: tokenizer.ggml.tokens missing or not a string "
                       "array", fn);
    if (nt == 0 || nt > TOK_MAX_VOCAB)
        return set_err(err, errlen, CK_EFORMAT, "%s: %llu tokens, not in [1, %d]", fn,
                       (unsigned long long)nt, TOK_MAX_VOCAB);
    int n = (int)nt;

    if (c.kind == TOK_KIND_BPE) {
        c.bos = c.eos = 11; /* llama.cpp's gpt2 defaults (dropped if outside) */
        c.unk = -1;
        c.eot = c.eom = c.pad = -1;
        c.pre = TOK_PRE_DEFAULT;
        if (!gguf_get_str(f, "tokenizer.ggml.pre", &s, &sl)) {
            c.pre = tok_pre_lookup(s, sl);
            if (c.pre < 0)
                return set_err(err, errlen, CK_EUNSUPPORTED,
                               "%s: pre-tokenizer \"%.*s\" (tokenizer.ggml.pre) is not supported "
                               "(gpt-2, llama-bpe, qwen2, smollm, starcoder, refact, default)",
                               fn, (int)(sl < 64 ? sl : 64), s);
        }
        if (c.pre == TOK_PRE_LLAMA3) {
            c.ignore_merges = 1;
            c.add_bos = 1;
        }
        if (gguf_get_arr(f, "tokenizer.ggml.merges", &et, &c.n_merges, NULL) ||
            et != GGUF_TYPE_STRING)
            return set_err(err, errlen, CK_EFORMAT,
                           "%s: tokenizer.ggml.merges missing or not a string array", fn);
        if (c.n_merges > TOK_MAX_MERGES)
            return set_err(err, errlen, CK_EFORMAT, "%s: %llu merges, more than %d", fn,
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
        (rc = bool_key(f, "tokenizer.ggml.add_space_prefix", c.add_space_prefix,
                       &c.add_space_prefix, err, errlen)))
        return rc;
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
            rc = set_err(err, errlen, CK_EFORMAT, "%s: token %d unreadable", fn, i);
            goto out;
        }
    }
    if (!gguf_get_arr(f, "tokenizer.ggml.scores", &et, &nt, &data)) {
        if ((et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32) || nt < (uint64_t)n) {
            rc = set_err(err, errlen, CK_EFORMAT,
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
            rc = set_err(err, errlen, CK_EFORMAT,
                         "%s: tokenizer.ggml.token_type must be %d int32", fn, n);
            goto out;
        }
        if (!(types = malloc((size_t)n * sizeof *types))) goto out;
        memcpy(types, data, (size_t)n * sizeof *types);
    }
    rc = build(n, pieces, lens, scores, types, &c, out, err, errlen);
out:
    if (rc == CK_ENOMEM && err && errlen && !*out) set_err(err, errlen, rc, "%s: out of memory", fn);
    free(pieces);
    free(lens);
    free(scores);
    free(types);
    return rc;
}

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
    tcfg c = spm_cfg(1, 2, 0);
    c.conv_u2581 = 0;
    c.from_llama2c = 1;
    rc = build(vocab_size, pieces, lens, scores, NULL, &c, out, err, errlen);

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
int tok_eot(const tokenizer *t) { return t ? t->eot : -1; }
int tok_eom(const tokenizer *t) { return t ? t->eom : -1; }
int tok_kind(const tokenizer *t) { return t ? t->kind : 0; }
int tok_adds_bos(const tokenizer *t) { return t ? t->add_bos : 0; }
int tok_adds_eos(const tokenizer *t) { return t ? t->add_eos : 0; }
int tok_max_piece_len(const tokenizer *t) { return t ? t->max_piece : 0; }

int tok_is_eog(const tokenizer *t, int id) {
    return t && id >= 0 && id < t->n && t->eog[id];
}

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
    /* one written character per stored byte: up to 3 bytes ("▁") or, in the
     * byte-level alphabet, 1 or 2 */
    int bl = t->kind == TOK_KIND_BPE && t->blevel[id];
    size_t need = 0;
    for (size_t k = 0; k < pl; k++) {
        unsigned b = (unsigned char)p[k];
        if (bl) need += bl_cp_of(b) < 0x80 ? 1 : 2;
        else need += t->kind == TOK_KIND_SPM && b == ' ' ? 3 : 1;
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
        } else if (t->kind == TOK_KIND_SPM && b == ' ') {
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
 * pushed once, when it forms, keyed by (priority, position of its left
 * symbol); a popped pair is stale when either side has merged since. Symbols
 * keep their index when they absorb their right neighbour, so index order is
 * text order and "leftmost" is "smallest left index": the same merges, in
 * the same order, in O(n log n). The priority is the piece's score for
 * SentencePiece and minus the merge's rank for byte-level BPE. */

typedef struct {
    int32_t start, len;  /* bytes [start, start + len) of the working text; len 0: merged away */
    int32_t prev, next;  /* neighbours, -1 at the ends */
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
    const char *w;   /* the working text */
    tsym *sym;
    tpair *heap;
    int n_heap;
    int32_t *out;    /* ids: written while count < max */
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
        int rank = merge_rank(e->t, e->w + a->start, (size_t)n, (size_t)a->len);
        if (rank < 0) return;
        p.prio = -(double)rank;
    } else {
        int id = lookup(e->t, e->w + a->start, (size_t)n);
        if (id < 0) return;
        p.prio = e->t->score[id];
    }
    heap_push(e, p);
}

static void emit(tenc *e, int32_t id) {
    if (e->count < e->max) e->out[e->count] = id;
    e->count++;
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
        int id = lookup(e->t, e->w + sym[k].start, (size_t)sym[k].len);
        if (id >= 0) {
            emit(e, id);
            continue;
        }
        for (int32_t j = 0; j < sym[k].len; j++) {
            unsigned char c = (unsigned char)e->w[sym[k].start + j];
            int bid = e->t->byte_id[c];
            if (bid < 0) bid = e->t->one_id[c];
            if (bid < 0) bid = e->t->unk;
            if (bid < 0) return CK_ENOTFOUND;
            emit(e, bid);
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

/* Byte-level BPE: one run of text, cut into words by the pre-tokenizer;
 * ends has room for len entries. */
static int encode_bpe(tenc *e, const char *text, size_t len, size_t *ends) {
    size_t nw;
    int rc = tok_pre_split(e->t->pre, text, len, ends, &nw);
    if (rc) return rc;
    e->w = text;
    size_t start = 0;
    for (size_t k = 0; k < nw; k++) {
        size_t end = ends[k], wl = end - start;
        int id = e->t->ignore_merges ? lookup(e->t, text + start, wl) : -1;
        if (id >= 0) {
            emit(e, id);
        } else {
            int ns = 0;
            for (size_t i = start; i < end; i++, ns++)
                e->sym[ns] = (tsym){(int32_t)i, 1, ns - 1, ns + 1};
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

static int special_allowed(const tokenizer *t, int id, int parse_special) {
    return t->type[id] == TOK_TYPE_USER || parse_special;
}

/* Cut text at the special-token strings, longest strings first, as
 * llama.cpp's tokenizer_st_partition (for strings of one length: leftmost
 * first). a and b have room for 2 * len + 1 fragments; the result is in
 * *res (a or b) with *nf entries. */
static void cut_specials(const tokenizer *t, const char *text, size_t len, int parse_special,
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
                unsigned pair = (unsigned)(unsigned char)text[p] << 8 |
                                (L > 1 ? (unsigned char)text[p + 1] : 0);
                int id = -1;
                if (t->sp_pair[pair >> 3] & (1u << (pair & 7))) {
                    id = lookup_special(t, text + p, L);
                    if (id >= 0 && !special_allowed(t, id, parse_special)) id = -1;
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

int tok_encode_opts(const tokenizer *t, const char *text, size_t len, unsigned flags,
                    int32_t *out, int max, int *n_out) {
    if (!t || !n_out || (!text && len > 0) || max < 0 || (!out && max > 0)) return CK_EINVAL;
    *n_out = 0;
    /* symbols are indexed by int32: keep the working text well inside it */
    if (len > (size_t)(INT32_MAX / 4)) return CK_ETOOLONG;
    int parse_special = (flags & TOK_ENC_PARSE_SPECIAL) != 0;
    int add_bos = (flags & TOK_ENC_ADD_SPECIAL) && t->add_bos;
    int add_eos = (flags & TOK_ENC_ADD_SPECIAL) && t->add_eos;
    int may_cut = t->n_sp_lens > 0 && (t->n_user > 0 || parse_special);

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
        if (!w || !e.sym || !e.heap || !fa || (may_cut && !fb) ||
            (t->kind == TOK_KIND_BPE && !ends))
            goto done;
        tfrag *frag = fa;
        int nf = 1;
        fa[0] = (tfrag){0, len, -1};
        if (may_cut) cut_specials(t, text, len, parse_special, fa, fb, &frag, &nf);
        int prev_special = 1; /* SentencePiece prefixes the first run too */
        for (int k = 0; k < nf; k++) {
            if (frag[k].id >= 0) {
                emit(&e, frag[k].id);
                prev_special = 1;
                continue;
            }
            if (t->kind == TOK_KIND_BPE) {
                rc = encode_bpe(&e, text + frag[k].start, frag[k].len, ends);
            } else {
                rc = encode_spm(&e, w, text + frag[k].start, frag[k].len,
                                t->add_space_prefix && prev_special);
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

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
               int max, int *n_out) {
    return tok_encode_opts(t, text, len, add_bos ? TOK_ENC_ADD_SPECIAL : 0, out, max, n_out);
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
    if (t->kind == TOK_KIND_SPM && t->bos >= 0 && prev == t->bos && n > 0 && p[0] == ' ') {
        p++;
        n--;
    }
    *len = n;
    return p;
}
