/* tokenizer.c - SentencePiece BPE and byte-level BPE tokenizers (see tokenizer.h):
 * the vocabulary's index and lookups, the accessors and decoding. Building a
 * vocabulary is tok_build.c, loading one tok_gguf.c and tok_llama2c.c, encoding
 * tok_encode.c; tok_int.h holds what they share. */
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
#include "tok_int.h"

/* ----------------------------------------------------------------------------
 * the vocabulary */

int tok__set_err(char *err, size_t errlen, int code, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

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

/* Id of the mergeable piece with these bytes, or -1. Pieces longer than
 * any mergeable one are not looked up at all. */
int tok__lookup(const tokenizer *t, const char *s, size_t n) {
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
int tok__lookup_special(const tokenizer *t, const char *s, size_t n) {
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
int tok__merge_rank(const tokenizer *t, const char *s, size_t n, size_t left) {
    size_t i = (size_t)hash_merge(t, s, n, left) & t->m_mask;
    for (int k = 0; k < TOK_PROBE_MAX; k++) {
        int32_t r = t->m_slots[i];
        if (r < 0) return -1;
        if (t->m_len[r] == n && t->m_left[r] == left && memcmp(t->m_arena + t->m_off[r], s, n) == 0) return r;
        i = (i + 1) & t->m_mask;
    }
    return -1;
}

int tok__is_special_type(int ty) {
    return ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_USER || ty == TOK_TYPE_UNKNOWN;
}

/* Pieces text can merge into: everything but control, unknown and byte
 * pieces (for SentencePiece also bos/eos/unk whatever their type, as
 * llama2.c), and for BPE only pieces in the byte-level alphabet or
 * user-defined ones. (A BPE vocabulary without a bos key gets llama.cpp's
 * default bos 11, often a plain piece such as ",": it must stay encodable.) */
int tok__is_mergeable(const tokenizer *t, int id) {
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
int tok__build_index(tokenizer *t) {
    t->seed = fresh_seed(t);
    memset(t->slots, 0xff, (t->mask + 1) * sizeof *t->slots);
    for (int b = 0; b < 256; b++) t->one_id[b] = -1;
    for (int i = 0; i < t->n; i++) {
        if (!tok__is_mergeable(t, i)) continue;
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
            if (tok__is_special_type(t->type[i]) && t->len[i] > 0 &&
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

int tok_is_eog(const tokenizer *t, int id) { return t && id >= 0 && id < t->n && t->eog[id]; }

const char *tok_piece(const tokenizer *t, int id, size_t *len) {
    if (!t || id < 0 || id >= t->n) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return t->arena + t->off[id];
}

float tok_score(const tokenizer *t, int id) { return (t && id >= 0 && id < t->n) ? t->score[id] : 0.0f; }

int tok_type(const tokenizer *t, int id) { return (t && id >= 0 && id < t->n) ? t->type[id] : 0; }

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
