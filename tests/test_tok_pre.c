/* test_tok_pre.c - the pre-tokenizers' splits (tok_pre.h) on strings whose
 * words were worked out by hand from each regex, one string or more per
 * alternative of it: "lfm2" (Llama 3's regex; no llama.cpp vocab test covers
 * it), "qwen35" against "qwen2" where marks make them differ, Gemma 4's
 * newline split, and gpt-4o, tekken and glm4 where they differ from one
 * another (their whole-vocabulary checks need llama.cpp: tok_pre_*). The whole-vocabulary checks are tests/oracle/ (ctest -L
 * oracle). */
#include <stdio.h>
#include <string.h>

#include "ck_err.h"
#include "ck_test.h"
#include "tok_pre.h"

/* Split text with the pre-tokenizer named name; 1 when the words are exactly
 * want[0..n) (NULL-terminated list), else print both and return 0. */
static int split_is(const char *name, const char *text, const char *const *want) {
    int pre = tok_pre_lookup(name, strlen(name));
    size_t len = strlen(text), ends[64], n = 0;
    if (pre < 0 || len > 64 || tok_pre_split(pre, text, len, ends, &n) != 0) {
        fprintf(stderr, "  %s: cannot split '%s'\n", name, text);
        return 0;
    }
    size_t k = 0, start = 0;
    int ok = 1;
    for (; want[k]; k++) {
        size_t wl = strlen(want[k]);
        if (k >= n || ends[k] - start != wl || memcmp(text + start, want[k], wl) != 0) ok = 0;
        if (k < n) start = ends[k];
    }
    ok = ok && k == n;
    if (!ok) {
        fprintf(stderr, "  %s '%s': got", name, text);
        start = 0;
        for (size_t i = 0; i < n; i++) {
            fprintf(stderr, " [%.*s]", (int)(ends[i] - start), text + start);
            start = ends[i];
        }
        fprintf(stderr, "\n");
    }
    return ok;
}
#define SPLIT_IS(name, text, ...) split_is(name, text, (const char *const[]){__VA_ARGS__, NULL})

/* lfm2 = Llama 3:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static void test_lfm2(void) {
    CK_CHECK(tok_pre_lookup("lfm2", 4) == tok_pre_lookup("llama-bpe", 9));
    /* contractions, any case */
    CK_CHECK(SPLIT_IS("lfm2", "I'M here", "I", "'M", " here"));
    CK_CHECK(SPLIT_IS("lfm2", "We'Ve x's", "We", "'Ve", " x", "'s"));
    /* one non-letter before letters; digits three at a time; " ?" before
     * other characters */
    CK_CHECK(SPLIT_IS("lfm2", "(abc $12345 def", "(abc", " $", "123", "45", " def"));
    CK_CHECK(SPLIT_IS("lfm2", "\tz", "\tz"));
    /* other characters take the newlines after them */
    CK_CHECK(SPLIT_IS("lfm2", "hi !!\n\nyo", "hi", " !!\n\n", "yo"));
    /* spaces up to the last newline */
    CK_CHECK(SPLIT_IS("lfm2", "x  \n\n y", "x", "  \n\n", " y"));
    /* spaces before a word leave it their last one; at the end all stay */
    CK_CHECK(SPLIT_IS("lfm2", "a   b", "a", "  ", " b"));
    CK_CHECK(SPLIT_IS("lfm2", "end  ", "end", "  "));
}

/* qwen35: as qwen2, with marks (\p{M}) joining letters and leaving the
 * other characters: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ and
 *  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]* */
static void test_qwen35(void) {
    /* "cafe" + U+0301 COMBINING ACUTE ACCENT */
    CK_CHECK(SPLIT_IS("qwen35", "cafe\xcc\x81 ok", "cafe\xcc\x81", " ok"));
    CK_CHECK(SPLIT_IS("qwen2", "cafe\xcc\x81 ok", "cafe", "\xcc\x81", " ok"));
    /* a space then a mark: the mark starts a letter run there */
    CK_CHECK(SPLIT_IS("qwen35", "a \xcc\x81x", "a", " \xcc\x81x"));
    CK_CHECK(SPLIT_IS("qwen2", "a \xcc\x81x", "a", " \xcc\x81", "x"));
    /* two marks on one letter (U+0302, U+0301) */
    CK_CHECK(SPLIT_IS("qwen35", "Vie\xcc\x82\xcc\x81t", "Vie\xcc\x82\xcc\x81t"));
    CK_CHECK(SPLIT_IS("qwen2", "Vie\xcc\x82\xcc\x81t", "Vie", "\xcc\x82\xcc\x81", "t"));
    /* the rest as qwen2: one digit a word, contractions, newlines */
    CK_CHECK(SPLIT_IS("qwen35", "12ab", "1", "2", "ab"));
    CK_CHECK(SPLIT_IS("qwen35", "it'LL go!\n", "it", "'LL", " go", "!\n"));
}

/* gemma4: [^\n]+|[\n]+ */
static void test_gemma4(void) {
    CK_CHECK(SPLIT_IS("gemma4", "a b\n\nc\n", "a b", "\n\n", "c", "\n"));
    CK_CHECK(SPLIT_IS("gemma4", "\n x  y\n", "\n", " x  y", "\n"));
    CK_CHECK(SPLIT_IS("gemma4", "\t \r", "\t \r"));
}

/* gpt-4o as llama.cpp runs it: letters past ASCII count as both cases, so
 * a word breaks after such a letter in a capital run:
 *   [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])*((?=\p{L})[^A-Z])+('s|'t|...)?|
 *   [^\r\n\p{L}\p{N}]?((?=\p{L})[^a-z])+((?=\p{L})[^A-Z])*('s|'t|...)?|
 *   \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * tekken: the same without the contractions and one digit a word; glm4:
 * Llama 3's regex. */
static void test_gpt4o_tekken_glm4(void) {
    /* "PRÉSIDENT": the first alternative ends at the first letter that is
     * not A-Z (É), the second takes the capitals after it */
    CK_CHECK(SPLIT_IS("gpt-4o", "PR\xc3\x89SIDENT", "PR\xc3\x89", "SIDENT"));
    CK_CHECK(SPLIT_IS("gpt-4o", "helloWorld", "hello", "World"));
    CK_CHECK(SPLIT_IS("gpt-4o", " DON'T go", " DON'T", " go"));
    CK_CHECK(SPLIT_IS("gpt-4o", "12345", "123", "45"));
    CK_CHECK(SPLIT_IS("gpt-4o", "a/b//\nc", "a", "/b", "//\n", "c"));
    CK_CHECK(SPLIT_IS("tekken", " DON'T", " DON", "'T"));
    CK_CHECK(SPLIT_IS("tekken", "12345", "1", "2", "3", "4", "5"));
    CK_CHECK(SPLIT_IS("tekken", "helloWorld", "hello", "World"));
    CK_CHECK(SPLIT_IS("glm4", "12345", "123", "45"));
    CK_CHECK(SPLIT_IS("glm4", "I'M here", "I", "'M", " here"));
    CK_CHECK(SPLIT_IS("glm4", "helloWorld", "helloWorld"));
}

int main(void) {
    CK_RUN(test_lfm2);
    CK_RUN(test_qwen35);
    CK_RUN(test_gemma4);
    CK_RUN(test_gpt4o_tekken_glm4);
    return ck_test_summary();
}
