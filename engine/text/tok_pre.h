/* tok_pre.h - the pre-tokenizers of BPE vocabularies: the regex
 * splits that cut text into words before BPE merges run inside each word.
 *
 * Each pre-tokenizer is a list of stages; a stage cuts every piece the
 * previous stage left into its regex's matches and the text between them
 * (llama.cpp's unicode_regex_split; the regexes below are those of its
 * llama-vocab.cpp for each `tokenizer.ggml.pre`). The matching is written by
 * hand for these few regexes (no regex engine: each stage is one left-to-right
 * pass, O(n) per stage), over the Unicode classes of tok_unicode.h.
 *
 *   TOK_PRE_GPT2    "gpt-2" (and phi-2, ...):
 *                   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   TOK_PRE_LLAMA3  "llama-bpe", "llama3", "llama-v3" (Llama 3), "lfm2" (LFM2):
 *                   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *                    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   TOK_PRE_QWEN2   "qwen2": as LLAMA3 with \p{N} (one digit a word)
 *   TOK_PRE_QWEN35  "qwen35" (Qwen 3.5): as QWEN2 with marks joining letters:
 *                   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|
 *                   \p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   TOK_PRE_SMOLLM  "smollm", "starcoder", "refact": \p{N}, then GPT2
 *   TOK_PRE_DEFAULT "default" (or no `pre` key): [\p{P}\$\+<=>\^~\|]+, then
 *                   GPT2 without its last \s+, then \p{N}+, then [0-9][0-9][0-9]
 *   TOK_PRE_GEMMA4  "gemma4" (Gemma 4, tokenizer.ggml.model "gemma4"):
 *                   [^\n]+|[\n]+ : runs of newlines apart from the rest, which
 *                   BPE merges whole (spaces included, see tokenizer.h)
 *   TOK_PRE_GPT4O   "gpt-4o" (gpt-oss; also "llama4", "kanana2", "talkie"): llama.cpp's
 *                   rewrite of o200k's regex, letters split by case:
 *                   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+C?|
 *                   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*C?|
 *                   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *                   with C = (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]).
 *                   llama.cpp matches it with std::regex over text whose
 *                   codepoints past ASCII are reduced to their class, so any
 *                   letter past ASCII counts as both cases (tok_pre.c)
 *   TOK_PRE_TEKKEN  "tekken" (Mistral's Tekken: Mistral Small 3.2, Devstral,
 *                   Ministral 3): as GPT4O without C and with \p{N} (one digit
 *                   a word)
 *   TOK_PRE_GLM4    "glm4", "chatglm-bpe" (GLM-4): LLAMA3's regex; what differs
 *                   is the vocabulary's defaults (tok_gguf.c)
 *
 * Text is any bytes: a byte that does not start a valid UTF-8 sequence (or a
 * truncated, overlong or surrogate one) is a character of its own, of class
 * "other" (llama.cpp drops such bytes; here they survive into the words). */
#ifndef CK_TOK_PRE_H
#define CK_TOK_PRE_H
#include <stddef.h>

enum {
    TOK_PRE_NONE = 0, /* SentencePiece: no split */
    TOK_PRE_GPT2,
    TOK_PRE_LLAMA3,
    TOK_PRE_QWEN2,
    TOK_PRE_SMOLLM,
    TOK_PRE_DEFAULT,
    TOK_PRE_QWEN35,
    TOK_PRE_GEMMA4,
    TOK_PRE_GPT4O,
    TOK_PRE_TEKKEN,
    TOK_PRE_GLM4
};

/* TOK_PRE_* for a `tokenizer.ggml.pre` value of n bytes; -1 if not one
 * implemented here. */
int tok_pre_lookup(const char *name, size_t n);

/* Cut text (len bytes) into words: writes the end offset (in bytes, from
 * text) of each word, in order, into ends (room for len entries) and their
 * count into *n_words (0 when len is 0). The words cover the text exactly.
 * Returns 0, CK_EINVAL, CK_ENOMEM (scratch is proportional to len). */
int tok_pre_split(int pre, const char *text, size_t len, size_t *ends, size_t *n_words);

#endif
