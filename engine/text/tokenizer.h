/* tokenizer.h - the tokenizers of Llama-family vocabularies: SentencePiece
 * BPE by piece scores ("llama"), byte-level BPE by merge ranks ("gpt2"), and
 * Gemma 4's BPE by merge ranks over UTF-8 pieces ("gemma4").
 *
 * SentencePiece ("llama", TOK_KIND_SPM). The algorithm is llama2.c's (run.c,
 * "the tokenizer") and llama.cpp's llm_tokenizer_spm:
 *
 *   encode: optional BOS; before each run of text (the whole text, or the
 *   text after a special token, see below) a dummy prefix " " when
 *   add_space_prefix (the default); each UTF-8 codepoint of the text is a
 *   symbol; then, repeatedly, the adjacent pair whose concatenation is a piece
 *   with the highest score is merged (ties: the leftmost pair), until no pair
 *   merges. A symbol that is no piece (a codepoint outside the vocabulary)
 *   becomes its bytes' byte-fallback pieces "<0xXX>"; optional EOS.
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
 *   - control and unknown tokens and byte pieces never take part in a lookup
 *     or a merge; NORMAL, USER and UNUSED pieces do;
 *   - a byte with no byte piece encodes as UNK (CK_ENOTFOUND when there is none);
 *   - merges use a priority queue (O(n log n)) instead of llama2.c's O(n^2)
 *     rescans; the order of merges, and so the result, is the same.
 *
 * Byte-level BPE ("gpt2", TOK_KIND_BPE; GPT-2, Llama 3, Qwen2, SmolLM...):
 *   encode: the pre-tokenizer named by tokenizer.ggml.pre (tok_pre.h) cuts the
 *   text into words; inside a word every byte is a symbol and, repeatedly, the
 *   adjacent pair with the lowest merge rank (its index in
 *   tokenizer.ggml.merges) is merged, ties leftmost; each final symbol is its
 *   piece (or, in a vocabulary that lacks it, its bytes' one-byte pieces).
 *   With ignore_merges (Llama 3) a word that is a piece is taken whole.
 *   The vocabulary stores pieces in GPT-2's byte-to-unicode alphabet ("Ġ" for
 *   a space); they are decoded to raw bytes at load, and merges with them, so
 *   merging runs on the text's bytes and decoding is a copy.
 *
 * Gemma 4 ("gemma4", TOK_KIND_BPE; llama.cpp's BPE without byte encoding):
 *   pieces and merges are UTF-8 with "▁" (U+2581) for a space, stored with
 *   ' ' as SentencePiece's are (special and byte pieces as written). encode:
 *   each "▁" of the text is a space too (llama.cpp writes spaces as "▁", so
 *   both are one character there); the text is cut only into runs of
 *   newlines and runs of anything else (tok_pre.h), so one word spans
 *   spaces; a newline run that is a piece is that piece; in any other word
 *   every codepoint is a symbol and pairs merge by rank as above; a final
 *   symbol that is no piece becomes its bytes' "<0xXX>" pieces, a space as
 *   the three bytes of "▁". BOS is always added with TOK_ENC_ADD_SPECIAL.
 *
 * Special tokens (both kinds, as llama.cpp's tokenizer_st_partition): before
 * anything else the text is cut at the occurrences of special token strings,
 * longest strings first; each occurrence becomes that token's id. USER
 * (user-defined) tokens are always cut out; CONTROL and UNKNOWN tokens
 * (<|im_start|>, <|begin_of_text|>, <s>) only with TOK_ENC_PARSE_SPECIAL, so
 * text a user sends, encoded without it, cannot forge a turn marker: it is
 * tokenized as the plain characters it is.
 *
 * Lifetime: a tokenizer is immutable after load and may be shared between
 * threads; every pointer it returns stays valid until tok_free. */
#ifndef CK_TOKENIZER_H
#define CK_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

typedef struct tokenizer tokenizer; /* opaque */
typedef struct gguf_file gguf_file;

/* Kinds of tokenizer (tokenizer.ggml.model "llama" / "gpt2" and "gemma4"). */
enum { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

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
/* Largest tokenizer.ggml.merges accepted. */
#define TOK_MAX_MERGES (1 << 24)

/* Build from a GGUF file's tokenizer.ggml.* keys; the file may hold no
 * tensors (llama.cpp's vocab-only ggml-vocab-*.gguf). Keys read:
 *   model         "llama" (SentencePiece), "gpt2" (byte-level BPE) or
 *                 "gemma4" (Gemma 4's BPE); any other is refused by name
 *                 (CK_EUNSUPPORTED)
 *   tokens        string array, required, 1..TOK_MAX_VOCAB pieces
 *   scores        float32 (or int32) array, at least one per token, optional
 *   token_type    int32 (or uint32) array, at least one per token, optional
 *                 (inferred as tok_from_arrays does)
 *   merges        string array "left right", required for gpt2 and gemma4; a line with
 *                 no space after its first byte, or an empty side, is
 *                 refused (CK_EFORMAT); at most TOK_MAX_MERGES; a repeated
 *                 pair keeps its first (lowest) rank; a pair outside the
 *                 byte-level alphabet can never apply and is skipped
 *   bos_token_id, eos_token_id, eot_token_id, eom_token_id,
 *   unknown_token_id, padding_token_id
 *                 integers; defaults as llama.cpp's: llama bos 1, eos 2,
 *                 unk 0; gpt2 bos = eos = 11 (dropped when outside the
 *                 vocabulary), no unk; gemma4 none. An id outside the vocabulary keeps
 *                 the default, as in llama.cpp (files in the wild have them).
 *                 With no eot/eom key, the piece "<|eot_id|>", "<|im_end|>",
 *                 ... (llama.cpp's list) is taken as eot, "<|eom_id|>" as eom.
 *   add_bos_token, add_eos_token, add_space_prefix
 *                 bools; defaults: llama true/false/true; gpt2 false/false
 *                 (true/false for the llama-bpe pre), no space prefix;
 *                 gemma4 (or the gemma4 pre) adds BOS whatever the file says
 *   pre           gpt2 only: the pre-tokenizer (tok_pre.h); an unknown name
 *                 is refused by name (CK_EUNSUPPORTED); absent = "default";
 *                 "gemma4" makes the vocabulary Gemma 4's. gemma4 does not
 *                 read it (llama.cpp's rule)
 * The end-of-generation set is eos, eot, eom and every piece whose text is in
 * llama.cpp's EOG list ("<|eot_id|>", "<|im_end|>", "<|endoftext|>",
 * "<end_of_turn>", "<|end|>", "</s>", ...); those pieces are typed CONTROL
 * when the file did not say so (as llama.cpp does). In a vocabulary with
 * "<|tool_response>" (Gemma 4's) "</s>" is a NORMAL piece and no EOG, as
 * llama.cpp has it.
 * Returns 0 / CK_E* as tok_load_llama2c; nothing borrowed from f. */
int tok_from_gguf(const gguf_file *f, tokenizer **out, char *err, size_t errlen);

/* Load a llama2.c tokenizer file: int32 max_token_length, then per piece a
 * float32 score, an int32 byte length and the bytes (little-endian). The
 * vocabulary size is not in the file: it comes from the model. Every length
 * is checked against the file size; a NaN score is refused. Ids 0/1/2 are
 * unk/bos/eos (typed UNKNOWN/CONTROL/CONTROL); "<0xXX>" pieces are typed BYTE;
 * the rest NORMAL. Trailing bytes after the last piece are ignored.
 * On success *out owns a tokenizer (free with tok_free) and 0 is returned; on
 * failure a negative CK_E* code, a sentence in err (if err and errlen > 0) and
 * *out = NULL. */
int tok_load_llama2c(const char *path, int vocab_size, tokenizer **out, char *err, size_t errlen);

/* Build from arrays, as a GGUF reader hands them over (tokenizer.ggml.tokens,
 * .scores, .token_type, bos/eos/unknown_token_id). n pieces; piece i is
 * lens[i] bytes at pieces[i] (lens may be NULL: pieces are then
 * NUL-terminated). Pieces are copied; U+2581 "▁" is converted to ' '.
 * scores may be NULL (all 0); types may be NULL (inferred: "<0xXX>" -> BYTE,
 * bos/eos -> CONTROL, unk -> UNKNOWN, the rest NORMAL). bos, eos, unk are ids
 * in [0, n) or -1 when the vocabulary has none. Returns 0 / CK_E* with err as
 * tok_load_llama2c.
 * Duplicate piece strings (as stored, after the "▁" conversion) are accepted,
 * since real vocabularies have them: encoding produces the lowest id, the
 * others still decode. Pieces are indexed under a random per-tokenizer hash
 * seed, so no choice of pieces makes loading or lookups slow. */
int tok_from_arrays(int n, const char *const *pieces, const size_t *lens, const float *scores,
                    const int32_t *types, int bos, int eos, int unk, tokenizer **out, char *err,
                    size_t errlen);

/* Free a tokenizer; NULL is a no-op. */
void tok_free(tokenizer *t);

int tok_vocab_size(const tokenizer *t);
int tok_bos(const tokenizer *t);  /* -1 when none */
int tok_eos(const tokenizer *t);  /* -1 when none */
int tok_unk(const tokenizer *t);  /* -1 when none */
int tok_eot(const tokenizer *t);  /* end of turn, -1 when none */
int tok_eom(const tokenizer *t);  /* end of message, -1 when none */
int tok_kind(const tokenizer *t); /* TOK_KIND_*, 0 for NULL */
/* What TOK_ENC_ADD_SPECIAL adds: BOS before, EOS after (0/1 each; 0 when the
 * vocabulary has no such token). llama2.c files and tok_from_arrays: 1 / 0. */
int tok_adds_bos(const tokenizer *t);
int tok_adds_eos(const tokenizer *t);
/* 1 if generating token `id` ends the generation: eos, eot, eom or a piece
 * of the EOG list (tok_from_gguf); for llama2.c files and tok_from_arrays
 * only eos. 0 for ids out of range. */
int tok_is_eog(const tokenizer *t, int id);

/* Piece `id` as stored (SentencePiece: space as ' '; byte-level BPE: the raw
 * bytes a NORMAL piece stands for, special pieces as written; NUL-terminated; *len, if not NULL, gets
 * its length). NULL (and *len = 0) for an id out of range. */
const char *tok_piece(const tokenizer *t, int id, size_t *len);
/* Score of piece `id` (0 for an id out of range). */
float tok_score(const tokenizer *t, int id);
/* TOK_TYPE_* of piece `id` (0 for an id out of range). */
int tok_type(const tokenizer *t, int id);

/* Write piece `id` the way GGUF vocabularies store it: for "llama", and a
 * "gemma4" piece that is neither special nor a byte, ' ' as U+2581 "▁"; for
 * "gpt2" a NORMAL piece's bytes in the byte-to-unicode alphabet ("Ġ" for a
 * space); and, for a tokenizer loaded from a llama2.c file, whose control pieces
 * are "\n<s>\n" and the like, bos/eos/unk as "<s>", "</s>", "<unk>".
 * Writes the bytes and a NUL into buf (cap bytes) and sets *len (without the
 * NUL). Returns 0; CK_EINVAL for a bad id; CK_ETOOLONG when cap < *len + 1
 * (*len then holds the length needed, nothing is written: buf = NULL with
 * cap = 0 asks for the length). */
int tok_piece_gguf(const tokenizer *t, int id, char *buf, size_t cap, size_t *len);

/* One vocabulary or two: the same size, BOS and EOS, and every piece the
 * same in its GGUF form (tok_piece_gguf: so a llama2.c file and its GGUF
 * conversion are one vocabulary). Returns -1 when a and b are one, else the
 * first id whose piece differs (0 for a size, BOS or EOS difference), or
 * CK_ENOMEM. For a model cascade, which hands token ids from one model to
 * the other. */
int tok_vocab_diff(const tokenizer *a, const tokenizer *b);
/* The same identity as 16 hex digits and a NUL (FNV-1a 64 over the size,
 * BOS, EOS and each GGUF-form piece with its length): equal vocabularies
 * hash equal. 0, or CK_ENOMEM / CK_EINVAL. */
int tok_vocab_hash(const tokenizer *t, char out[17]);

/* Text up to this many bytes is always encoded in full, so a CK_ETOOLONG
 * from tok_encode gives the exact count needed (cheap: about 0.5 ms for
 * 4 KiB of English with tok512). */
#define TOK_EXACT_COUNT_BYTES 4096

/* tok_encode_opts flags */
#define TOK_ENC_ADD_SPECIAL 1u /* BOS / EOS as the vocabulary asks (tok_adds_bos/eos) */
#define TOK_ENC_PARSE_SPECIAL \
    2u /* CONTROL/UNKNOWN token strings in the text are
                                    those tokens (only for trusted text) */
/* USER (user-defined) token strings stay plain text too, where they are
 * otherwise always cut out: for text that is data, such as a chat's
 * messages (chat.h's anti-forgery rule). Ignored with TOK_ENC_PARSE_SPECIAL. */
#define TOK_ENC_NO_USER 4u

/* Encode `len` bytes of text (any bytes; text may be NULL when len is 0).
 * tok_encode(add_bos) is tok_encode_opts with flags TOK_ENC_ADD_SPECIAL when
 * add_bos, else 0: special tokens are never parsed from the text there.
 * With TOK_ENC_ADD_SPECIAL, BOS (EOS) is added when the vocabulary asks for
 * it and has one. Writes at most
 * `max` ids into out and sets *n_out to their count. Returns 0;
 * CK_ETOOLONG when more than `max` ids would be needed (out then holds
 * nothing useful, and *n_out the number needed: exact when the text was
 * encoded, a lower bound above max when it was refused unencoded, see
 * below); CK_EINVAL for bad arguments; CK_ENOMEM; CK_ENOTFOUND if a byte has
 * neither a byte piece nor UNK.
 * Work bound: text of more than TOK_EXACT_COUNT_BYTES bytes that cannot fit,
 * i.e. len + p > (max - [BOS] - [EOS]) * tok_max_piece_len(t), is refused at
 * once without being looked at, *n_out = [BOS] + [EOS] + ceil((len + p) /
 * tok_max_piece_len), where p is 1 when the text surely gets a dummy prefix
 * (SentencePiece with add_space_prefix and no special token that could be
 * cut out of the text: tok512) and 0 otherwise. The bound is exact in the
 * safe direction: every other id stands for at most tok_max_piece_len bytes
 * of the text and its prefixes, so text that fits in max ids is never
 * refused. Encoding itself is O(len log len) (the merges use a heap), plus
 * the special-token cut: O(len * D) lookups for D distinct special-token
 * lengths (a few dozen in real vocabularies), done only where the text holds
 * a byte pair a special token starts with.
 * Allocates scratch proportional to len (encoding is not on the forward path). */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int32_t *out, int max,
               int *n_out);
int tok_encode_opts(const tokenizer *t, const char *text, size_t len, unsigned flags, int32_t *out, int max,
                    int *n_out);

/* The most bytes of text one token of tok_encode can stand for: the length of
 * the longest mergeable piece or special-token string, at least 1 (a
 * byte-fallback or UNK token stands for one byte). So text of len bytes needs
 * at least ceil((len + p) / tok_max_piece_len) ids besides BOS/EOS (p as in
 * tok_encode's work bound): a caller can refuse text longer than that bound
 * allows without encoding it. 0 for t NULL. */
int tok_max_piece_len(const tokenizer *t);

/* The bytes token `id` prints after token `prev` (llama2.c's rules: for
 * SentencePiece, after BOS a leading ' ' is dropped; a BYTE piece is its raw
 * byte; CONTROL pieces print nothing, as llama.cpp's token_to_piece without
 * `special`; UNK prints its piece text, "<unk>", as llama2.c does; USER
 * pieces print as written; byte-level BPE pieces print their raw bytes,
 * Gemma 4's their text with a space for each "▁").
 * Returns a pointer valid while t lives (for byte pieces into a
 * per-tokenizer 256x2 table) and sets *len; the bytes may contain NUL, so use
 * *len. An id out of range prints nothing ("" and *len = 0). prev may be any
 * value (-1: no previous token). */
const char *tok_decode(const tokenizer *t, int prev, int id, size_t *len);

#endif
