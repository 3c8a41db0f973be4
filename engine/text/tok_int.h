/* tok_int.h - what the tokenizer's files share (private to engine/text/tokenizer.c
 * and engine/tok_*.c that include it; the API is tokenizer.h).
 *
 * tokenizer.c    the vocabulary: its index (seeded hashes of the pieces, the
 *                special tokens and the merges), lookups, accessors, decoding
 * tok_build.c    the one constructor behind every loader (tok__build), GPT-2's
 *                byte-level alphabet, the merges, tok_from_arrays
 * tok_gguf.c     tok_from_gguf: a GGUF file's tokenizer.ggml.* keys
 * tok_llama2c.c  tok_load_llama2c: a llama2.c tokenizer file
 * tok_encode.c   tok_encode_opts: special-token cuts, SentencePiece and BPE merges
 *
 * A function more than one file uses is declared here, prefixed tok__ (two
 * underscores: internal); whatever one file alone uses stays static there. */
#ifndef CK_TOK_INT_H
#define CK_TOK_INT_H
#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "tokenizer.h"

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
    int utf8_bpe;         /* BPE over UTF-8 pieces with U+2581 for a space
                             (Gemma 4), not over GPT-2's byte-level alphabet:
                             stored with ' ' as SentencePiece's are */
    int from_llama2c;     /* control pieces are "\n<s>\n" and the like */
    char *arena;          /* every piece, NUL-terminated, back to back */
    size_t *off;          /* (n) offset of piece i in arena */
    size_t *len;          /* (n) byte length of piece i */
    float *score;         /* (n) merge priority: higher merges first */
    uint8_t *type;        /* (n) TOK_TYPE_* */
    uint8_t *eog;         /* (n) 1: generating it ends the generation */
    uint8_t *blevel;      /* (n) BPE: 1 if the piece was decoded at load, from
                             the byte-to-unicode alphabet or (utf8_bpe) "▁" to
                             ' ' (tok_piece_gguf re-encodes); 0 for special and
                             byte pieces, kept as written */
    int16_t *byte_val;    /* (n) the byte a BYTE piece stands for, -1 otherwise */
    int32_t *slots;       /* (mask + 1) open-addressing hash of the mergeable
                             pieces: ids, -1 empty */
    size_t mask;
    uint64_t seed; /* of the hashes: random per tokenizer (see build_index) */
    int max_piece; /* tok_max_piece_len, >= 1 */
    /* special tokens the text is cut at (CONTROL, USER, UNKNOWN) */
    int32_t *sp_slots; /* (sp_mask + 1) hash of them by text: ids, -1 empty */
    size_t sp_mask;
    int *sp_lens; /* (n_sp_lens) their distinct lengths, longest first */
    int n_sp_lens;
    int n_user;       /* USER pieces among them (cut out even without
                             TOK_ENC_PARSE_SPECIAL) */
    uint8_t *sp_pair; /* (65536 bits) byte pairs a special string starts
                             with (a one-byte special: both its bytes x any) */
    /* merges (BPE): rank r is "left right" with left = m_arena[m_off[r],
     * + m_left[r]) and right right after it, both as raw bytes */
    int n_merges;
    char *m_arena;
    size_t *m_off;
    uint32_t *m_left, *m_len;
    int32_t *m_slots; /* (m_mask + 1) hash by (bytes, left length): ranks */
    size_t m_mask;
    int32_t byte_id[256];            /* id of piece "<0xXX>" per byte, -1 if none */
    int32_t one_id[256];             /* id of the mergeable 1-byte piece per byte, -1 if
                                        none: most lookups are of one byte, a table
                                        beats any hash there */
    unsigned char byte_str[256 * 2]; /* byte b as a 1-char C string at 2*b */
};

/* The pieces come from the model file, so the hash is seeded per tokenizer
 * with a random seed: a file cannot choose pieces that collide (under a
 * fixed FNV-1a, 50,000 crafted pieces take 5 s to load and make every
 * encode 80x slower). And no piece sits more than TOK_PROBE_MAX slots from
 * its home slot (build_index rebuilds with another seed otherwise), so a
 * lookup is bounded whatever happens. The merges and special tokens are
 * indexed the same way, under the same seed. */
#define TOK_PROBE_MAX 128 /* max run seen: 47 for 2^24 random pieces at load 1/2 */

/* ----------------------------------------------------------------------------
 * construction */

/* What a loader hands build() besides the pieces. */
typedef struct {
    int kind;       /* TOK_KIND_* */
    int pre;        /* TOK_PRE_* */
    int conv_u2581; /* SPM: turn "▁" into ' ' while copying */
    int utf8_bpe;   /* BPE: pieces and merges are UTF-8 with "▁", not byte-level */
    int from_llama2c;
    int gguf_eog; /* apply llama.cpp's EOG/EOT text rules */
    int bos, eos, unk, eot, eom, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    /* merges (BPE): n_merges strings, merge[i] with merge_len[i] bytes */
    uint64_t n_merges;
    const gguf_file *mf; /* merges read from this file's tokenizer.ggml.merges */
} tcfg;

/* ---- tokenizer.c: errors, the index and its lookups */

int tok__set_err(char *err, size_t errlen, int code, const char *fmt, ...);
int tok__lookup(const tokenizer *t, const char *s, size_t n);
int tok__lookup_special(const tokenizer *t, const char *s, size_t n);
int tok__merge_rank(const tokenizer *t, const char *s, size_t n, size_t left);
int tok__is_special_type(int ty);
int tok__is_mergeable(const tokenizer *t, int id);
int tok__build_index(tokenizer *t);

/* ---- tok_build.c: the one constructor */

int tok__build(int n, const char *const *pieces, const size_t *lens, const float *scores,
               const int32_t *types, const tcfg *c, tokenizer **out, char *err, size_t errlen);
tcfg tok__spm_cfg(int bos, int eos, int unk);
/* Copy n bytes from s to out with each "▁" (U+2581) turned into ' '; returns
 * the length written (at most n; out may be s). */
size_t tok__unescape_u2581(const char *s, size_t n, char *out);

#endif
