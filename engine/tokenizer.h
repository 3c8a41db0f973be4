/* tokenizer.h - SentencePiece-style BPE by piece scores, with byte fallback.
 *
 * The algorithm is llama2.c's (run.c, "the tokenizer"), which reproduces
 * SentencePiece's BPE for Llama vocabularies:
 *
 *   encode: optional BOS; when the text is non-empty a dummy prefix " " (its
 *   own piece); each UTF-8 codepoint of the text looked up as a piece, or, when
 *   it is not one, each of its bytes as a byte-fallback piece "<0xXX>"; then,
 *   repeatedly, the adjacent pair whose concatenation is a piece with the
 *   highest score is merged (ties: the leftmost pair), until no pair merges.
 *
 *   decode: right after BOS a piece's leading space is dropped; "<0xXX>"
 *   pieces print the raw byte.
 *
 * For the stories260K vocabulary (tok512.bin) the ids are exactly llama2.c's.
 * Differences, all on inputs llama2.c mishandles:
 *   - text is `len` bytes, not NUL-terminated: a NUL byte is encoded (as <0x00>);
 *   - a codepoint is a lead byte plus the continuation bytes its lead byte
 *     announces; any other byte (stray continuation, truncated sequence) is a
 *     codepoint of its own. For valid UTF-8 this is llama2.c's grouping;
 *   - byte-fallback pieces are found by their text "<0xXX>" (a 256-entry table
 *     built at load), not assumed at id 3 + byte;
 *   - control and unknown tokens (BOS/EOS/UNK) and byte pieces never take part
 *     in a lookup or a merge; only NORMAL and USER pieces do;
 *   - a byte with no byte piece encodes as UNK (CK_ENOTFOUND when there is none);
 *   - merges use a priority queue (O(n log n)) instead of llama2.c's O(n^2)
 *     rescans; the order of merges, and so the result, is the same.
 *
 * Lifetime: a tokenizer is immutable after load and may be shared between
 * threads; every pointer it returns stays valid until tok_free. */
#ifndef CK_TOKENIZER_H
#define CK_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer; /* opaque */

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6
};

/* Largest vocabulary accepted (also bounds the ids the engine ever sees). */
#define TOK_MAX_VOCAB (1 << 24)

/* Load a llama2.c tokenizer file: int32 max_token_length, then per piece a
 * float32 score, an int32 byte length and the bytes (little-endian). The
 * vocabulary size is not in the file: it comes from the model. Every length
 * is checked against the file size; a NaN score is refused. Ids 0/1/2 are
 * unk/bos/eos (typed UNKNOWN/CONTROL/CONTROL); "<0xXX>" pieces are typed BYTE;
 * the rest NORMAL. Trailing bytes after the last piece are ignored.
 * On success *out owns a tokenizer (free with tok_free) and 0 is returned; on
 * failure a negative CK_E* code, a sentence in err (if err and errlen > 0) and
 * *out = NULL. */
int tok_load_llama2c(const char *path, int vocab_size, tokenizer **out, char *err,
                     size_t errlen);

/* Build from arrays, as a GGUF reader hands them over (tokenizer.ggml.tokens,
 * .scores, .token_type, bos/eos/unknown_token_id). n pieces; piece i is
 * lens[i] bytes at pieces[i] (lens may be NULL: pieces are then
 * NUL-terminated). Pieces are copied; U+2581 "▁" is converted to ' '.
 * scores may be NULL (all 0); types may be NULL (inferred: "<0xXX>" -> BYTE,
 * bos/eos -> CONTROL, unk -> UNKNOWN, the rest NORMAL). bos, eos, unk are ids
 * in [0, n) or -1 when the vocabulary has none. Returns 0 / CK_E* with err as
 * tok_load_llama2c. */
int tok_from_arrays(int n, const char *const *pieces, const size_t *lens, const float *scores,
                    const int32_t *types, int bos, int eos, int unk, tokenizer **out,
                    char *err, size_t errlen);

/* Free a tokenizer; NULL is a no-op. */
void tok_free(tokenizer *t);

int tok_vocab_size(const tokenizer *t);
int tok_bos(const tokenizer *t); /* -1 when none */
int tok_eos(const tokenizer *t); /* -1 when none */
int tok_unk(const tokenizer *t); /* -1 when none */

/* Piece `id` as stored (space as ' ', NUL-terminated; *len, if not NULL, gets
 * its length). NULL (and *len = 0) for an id out of range. */
const char *tok_piece(const tokenizer *t, int id, size_t *len);
/* Score of piece `id` (0 for an id out of range). */
float tok_score(const tokenizer *t, int id);
/* TOK_TYPE_* of piece `id` (0 for an id out of range). */
int tok_type(const tokenizer *t, int id);

/* Write piece `id` the way GGUF "llama" vocabularies store it: ' ' as U+2581
 * "▁"; and, for a tokenizer loaded from a llama2.c file, whose control pieces
 * are "\n<s>\n" and the like, bos/eos/unk as "<s>", "</s>", "<unk>".
 * Writes the bytes and a NUL into buf (cap bytes) and sets *len (without the
 * NUL). Returns 0; CK_EINVAL for a bad id; CK_ETOOLONG when cap < *len + 1
 * (*len then holds the length needed, nothing is written: buf = NULL with
 * cap = 0 asks for the length). */
int tok_piece_gguf(const tokenizer *t, int id, char *buf, size_t cap, size_t *len);

/* Encode `len` bytes of text (any bytes; text may be NULL when len is 0).
 * add_bos: prepend BOS (ignored when the vocabulary has none). Writes at most
 * `max` ids into out and sets *n_out to their count. Returns 0;
 * CK_ETOOLONG when more than `max` ids would be needed (*n_out then holds the
 * number needed, out holds nothing useful); CK_EINVAL for bad arguments;
 * CK_ENOMEM; CK_ENOTFOUND if a byte has neither a byte piece nor UNK.
 * Allocates scratch proportional to len (encoding is not on the forward path). */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out,
               int max, int *n_out);

/* The bytes token `id` prints after token `prev` (llama2.c's rules: after BOS
 * a leading ' ' is dropped; a BYTE piece is its raw byte; CONTROL pieces print
 * nothing; UNK prints its piece text, "<unk>", as llama2.c does). Returns a pointer valid while t lives (for byte pieces into a
 * per-tokenizer 256x2 table) and sets *len; the bytes may contain NUL, so use
 * *len. An id out of range prints nothing ("" and *len = 0). prev may be any
 * value (-1: no previous token). */
const char *tok_decode(const tokenizer *t, int prev, int id, size_t *len);

#endif
