/* tok_pre.c - pre-tokenizer regex splits, matched by hand (see tok_pre.h). */
#include "tok_pre.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "tok_unicode.h"

/* per-character flags */
enum { F_L = 1, F_N = 2, F_P = 4, F_WS = 8, F_M = 16 };

typedef struct {
    const uint32_t *cp; /* (n) codepoints; an invalid byte is 0x110000 + byte */
    const uint8_t *fl;  /* (n) F_* */
} ptext;

/* The 25 codepoints of Unicode's White_Space property (PropList.txt). */
static int is_space(uint32_t c) {
    if ((c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680) return 1;
    if (c >= 0x2000 && c <= 0x200A) return 1;
    return c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int uc_class(uint32_t c) {
    if (c > 0x10FFFF) return TOK_UC_OTHER;
    unsigned lo = 0, hi = tok_unicode_n_ranges; /* last entry with start <= c */
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if ((tok_unicode_ranges[mid] >> 8) <= c)
            lo = mid;
        else
            hi = mid;
    }
    return (int)(tok_unicode_ranges[lo] & 0xFF);
}

static uint8_t flags_of(uint32_t c) {
    int k = uc_class(c);
    uint8_t f = k == TOK_UC_LETTER   ? F_L
                : k == TOK_UC_NUMBER ? F_N
                : k == TOK_UC_PUNCT  ? F_P
                : k == TOK_UC_MARK   ? F_M
                                     : 0;
    if (is_space(c)) f |= F_WS;
    return f;
}

/* One codepoint at s (n >= 1 bytes left): its value and byte length. Only
 * well-formed UTF-8 (no overlong forms, surrogates or values past
 * U+10FFFF) decodes; any other lead byte is one character 0x110000 + byte. */
static uint32_t utf8_next(const unsigned char *s, size_t n, size_t *len) {
    unsigned c = s[0];
    *len = 1;
    if (c < 0x80) return c;
    size_t l = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (l == 0 || l > n) return 0x110000 + c;
    uint32_t v = c & (0x7F >> l);
    for (size_t k = 1; k < l; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0x110000 + c;
        v = v << 6 | (s[k] & 0x3F);
    }
    static const uint32_t min_of[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min_of[l] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0x110000 + c;
    *len = l;
    return v;
}

/* ---------------------------------------------------------------------------
 * the matchers: the length (in characters) of the regex's match at pos in
 * the piece [.., end), 0 when it does not match there */

typedef size_t (*pmatch_fn)(const ptext *x, size_t pos, size_t end);

#define IS(x, i, f) (((x)->fl[i] & (f)) != 0)
/* [^\s\p{L}\p{N}] */
#define IS_OTHER(x, i) (((x)->fl[i] & (F_WS | F_L | F_N)) == 0)
/* [^\s<letter>\p{N}], where letter is \p{L} or [\p{L}\p{M}] (flags lf) */
#define IS_OTHER_THAN(x, i, lf) (((x)->fl[i] & (F_WS | F_N | (lf))) == 0)

static size_t run_of(const ptext *x, size_t i, size_t end, uint8_t f) {
    size_t k = i;
    while (k < end && IS(x, k, f)) k++;
    return k - i;
}

static size_t run_other(const ptext *x, size_t i, size_t end, uint8_t lf) {
    size_t k = i;
    while (k < end && IS_OTHER_THAN(x, k, lf)) k++;
    return k - i;
}

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d, case-insensitive (ASCII only: llama.cpp's adapted
 * regexes spell the cases out as [sS] and so on) or not */
static size_t m_contraction(const ptext *x, size_t pos, size_t end, int fold) {
    if (pos + 1 >= end || x->cp[pos] != '\'') return 0; /* pos may be end: a word at the text's end */
    uint32_t a = fold ? ascii_lower(x->cp[pos + 1]) : x->cp[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= end) return 0;
    uint32_t b = fold ? ascii_lower(x->cp[pos + 2]) : x->cp[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ : the whole run at the end of the piece; before a non-space,
 * the run less its last space (which then leads the next word), or the one
 * space when the run is one long. with_fallback 0 drops the "|\s+" part. */
static size_t m_spaces(const ptext *x, size_t pos, size_t end, int with_fallback) {
    size_t w = run_of(x, pos, end, F_WS);
    if (w == 0) return 0;
    if (pos + w == end) return w;
    if (w > 1) return w - 1;
    return with_fallback ? 1 : 0;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)[|\s+] */
static size_t gpt2_at(const ptext *x, size_t pos, size_t end, int with_fallback) {
    size_t m = m_contraction(x, pos, end, 0);
    if (m) return m;
    size_t k = x->cp[pos] == ' ' && pos + 1 < end ? pos + 1 : pos; /* the " ?" */
    if (IS(x, k, F_L)) return k - pos + run_of(x, k, end, F_L);
    if (IS(x, k, F_N)) return k - pos + run_of(x, k, end, F_N);
    if (IS_OTHER(x, k)) return k - pos + run_other(x, k, end, F_L);
    return m_spaces(x, pos, end, with_fallback);
}

static size_t m_gpt2(const ptext *x, size_t pos, size_t end) { return gpt2_at(x, pos, end, 1); }
static size_t m_gpt2_nofb(const ptext *x, size_t pos, size_t end) { return gpt2_at(x, pos, end, 0); }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?L+|\p{N}{1,maxd}|
 *  ?[^\sL\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * where L, a letter, is \p{L} (lf F_L) or [\p{L}\p{M}] (lf F_L | F_M) */
static size_t llama3_at(const ptext *x, size_t pos, size_t end, size_t maxd, uint8_t lf) {
    size_t m = m_contraction(x, pos, end, 1);
    if (m) return m;
    uint32_t c = x->cp[pos];
    if (c != '\r' && c != '\n' && !IS(x, pos, F_N)) {
        if (IS(x, pos, lf)) return run_of(x, pos, end, lf);
        if (pos + 1 < end && IS(x, pos + 1, lf)) return 1 + run_of(x, pos + 1, end, lf);
    }
    if (IS(x, pos, F_N)) {
        size_t r = run_of(x, pos, end, F_N);
        return r < maxd ? r : maxd;
    }
    size_t k = c == ' ' && pos + 1 < end ? pos + 1 : pos;
    if (IS_OTHER_THAN(x, k, lf)) {
        size_t e = k + run_other(x, k, end, lf);
        while (e < end && (x->cp[e] == '\r' || x->cp[e] == '\n')) e++;
        return e - pos;
    }
    /* \s*[\r\n]+ : the space run up to and with its last CR or LF */
    size_t w = run_of(x, pos, end, F_WS), last = 0;
    for (size_t i = 0; i < w; i++)
        if (x->cp[pos + i] == '\r' || x->cp[pos + i] == '\n') last = i + 1;
    if (last) return last;
    return m_spaces(x, pos, end, 1);
}

static size_t m_llama3(const ptext *x, size_t pos, size_t end) { return llama3_at(x, pos, end, 3, F_L); }
static size_t m_qwen2(const ptext *x, size_t pos, size_t end) { return llama3_at(x, pos, end, 1, F_L); }
static size_t m_qwen35(const ptext *x, size_t pos, size_t end) {
    return llama3_at(x, pos, end, 1, F_L | F_M);
}

/* llama.cpp runs the gpt-4o and tekken regexes through std::regex over a
 * "collapsed" text: every codepoint past ASCII becomes one byte for its class
 * (letter, number, white space, other), and \p{L} becomes [<letter>A-Za-z].
 * So a letter past ASCII is both upper and lower case to them, and the
 * tokenizer.json classes [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and
 * [\p{Ll}\p{Lm}\p{Lo}\p{M}] become llama.cpp's lookahead forms
 * ((?=[\p{L}])([^a-z])) and ((?=[\p{L}])([^A-Z])): "U", a letter other than
 * a-z, and "W", a letter other than A-Z; a combining mark is neither. */
static int is_az(uint32_t c) { return c >= 'a' && c <= 'z'; }
static int is_AZ(uint32_t c) { return c >= 'A' && c <= 'Z'; }

static size_t run_not(const ptext *x, size_t i, size_t end, int (*excl)(uint32_t)) {
    size_t k = i;
    while (k < end && IS(x, k, F_L) && !excl(x->cp[k])) k++;
    return k - i;
}

/* [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,maxd}|
 *  ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with C the contractions (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
 * when contr, else nothing. The alternatives are tried in order, the first
 * that matches wins (ECMAScript), quantifiers greedy with backtracking. */
static size_t gpt4o_at(const ptext *x, size_t pos, size_t end, size_t maxd, int contr) {
    uint32_t c = x->cp[pos];
    /* the optional leading character: taken first whenever it can be */
    size_t k = c != '\r' && c != '\n' && !IS(x, pos, F_L | F_N) ? pos + 1 : pos;
    if (k < end && IS(x, k, F_L)) {
        size_t u = run_not(x, k, end, is_az), e = k + u;
        if (e >= end || !is_az(x->cp[e])) {
            /* U* backs off to the last letter past ASCII in its run (in W
             * too); with none, U*W+ fails and U+W* takes the whole run */
            size_t j = u;
            while (j > 0 && x->cp[k + j - 1] < 0x80) j--;
            if (j > 0) e = k + j - 1;
        }
        e += run_not(x, e, end, is_AZ);
        if (contr) e += m_contraction(x, e, end, 1);
        return e - pos;
    }
    if (IS(x, pos, F_N)) {
        size_t r = run_of(x, pos, end, F_N);
        return r < maxd ? r : maxd;
    }
    k = c == ' ' && pos + 1 < end ? pos + 1 : pos;
    if (IS_OTHER(x, k)) {
        size_t e = k + run_other(x, k, end, F_L);
        while (e < end && (x->cp[e] == '\r' || x->cp[e] == '\n' || x->cp[e] == '/')) e++;
        return e - pos;
    }
    /* \s*[\r\n]+ : the space run up to and with its last CR or LF */
    size_t w = run_of(x, pos, end, F_WS), last = 0;
    for (size_t i = 0; i < w; i++)
        if (x->cp[pos + i] == '\r' || x->cp[pos + i] == '\n') last = i + 1;
    if (last) return last;
    return m_spaces(x, pos, end, 1);
}

static size_t m_gpt4o(const ptext *x, size_t pos, size_t end) { return gpt4o_at(x, pos, end, 3, 1); }
static size_t m_tekken(const ptext *x, size_t pos, size_t end) { return gpt4o_at(x, pos, end, 1, 0); }

/* [^\n]+|[\n]+ : the run of newlines, or of anything else, at pos */
static size_t m_newlines(const ptext *x, size_t pos, size_t end) {
    int nl = x->cp[pos] == '\n';
    size_t k = pos + 1;
    while (k < end && (x->cp[k] == '\n') == nl) k++;
    return k - pos;
}

/* \p{N} */
static size_t m_digit1(const ptext *x, size_t pos, size_t end) {
    (void)end;
    return IS(x, pos, F_N) ? 1 : 0;
}

/* \p{N}+ */
static size_t m_digits(const ptext *x, size_t pos, size_t end) { return run_of(x, pos, end, F_N); }

/* [0-9][0-9][0-9] */
static size_t m_digit3(const ptext *x, size_t pos, size_t end) {
    if (end - pos < 3) return 0;
    for (size_t i = 0; i < 3; i++)
        if (x->cp[pos + i] < '0' || x->cp[pos + i] > '9') return 0;
    return 3;
}

/* [\p{P}\$\+<=>\^~\|]+ */
static size_t m_punct(const ptext *x, size_t pos, size_t end) {
    size_t k = pos;
    while (k < end &&
           (IS(x, k, F_P) || (x->cp[k] < 0x80 && strchr("$+<=>^~|", (int)x->cp[k]) && x->cp[k] != 0)))
        k++;
    return k - pos;
}

/* ---------------------------------------------------------------------------
 * stages */

#define TOK_PRE_MAX_STAGES 4

static int stages_of(int pre, pmatch_fn *st) {
    switch (pre) {
    case TOK_PRE_GPT2: st[0] = m_gpt2; return 1;
    case TOK_PRE_LLAMA3:
    case TOK_PRE_GLM4: st[0] = m_llama3; return 1;
    case TOK_PRE_GPT4O: st[0] = m_gpt4o; return 1;
    case TOK_PRE_TEKKEN: st[0] = m_tekken; return 1;
    case TOK_PRE_QWEN2: st[0] = m_qwen2; return 1;
    case TOK_PRE_QWEN35: st[0] = m_qwen35; return 1;
    case TOK_PRE_GEMMA4: st[0] = m_newlines; return 1;
    case TOK_PRE_SMOLLM:
        st[0] = m_digit1;
        st[1] = m_gpt2;
        return 2;
    case TOK_PRE_DEFAULT:
        st[0] = m_punct;
        st[1] = m_gpt2_nofb;
        st[2] = m_digits;
        st[3] = m_digit3;
        return 4;
    default: return 0;
    }
}

int tok_pre_lookup(const char *name, size_t n) {
    static const struct {
        const char *s;
        int pre;
    } names[] = {
        {"gpt-2", TOK_PRE_GPT2},      {"phi-2", TOK_PRE_GPT2},       {"llama-bpe", TOK_PRE_LLAMA3},
        {"llama3", TOK_PRE_LLAMA3},   {"llama-v3", TOK_PRE_LLAMA3},  {"qwen2", TOK_PRE_QWEN2},
        {"smollm", TOK_PRE_SMOLLM},   {"starcoder", TOK_PRE_SMOLLM}, {"refact", TOK_PRE_SMOLLM},
        {"default", TOK_PRE_DEFAULT}, {"lfm2", TOK_PRE_LLAMA3},      {"qwen35", TOK_PRE_QWEN35},
        {"gemma4", TOK_PRE_GEMMA4},   {"gpt-4o", TOK_PRE_GPT4O},     {"llama4", TOK_PRE_GPT4O},
        {"kanana2", TOK_PRE_GPT4O},   {"talkie", TOK_PRE_GPT4O},     {"tekken", TOK_PRE_TEKKEN},
        {"glm4", TOK_PRE_GLM4},       {"chatglm-bpe", TOK_PRE_GLM4},
    };
    if (!name) return -1;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i].s) == n && memcmp(names[i].s, name, n) == 0) return names[i].pre;
    return -1;
}

/* Cut each piece of `in` (n_in piece ends, in characters) into matches and
 * the gaps between them, into `out`; returns the count. */
static size_t run_stage(const ptext *x, pmatch_fn fn, const size_t *in, size_t n_in, size_t *out) {
    size_t n = 0, start = 0;
    for (size_t p = 0; p < n_in; p++) {
        size_t end = in[p], pos = start, gap = start;
        while (pos < end) {
            size_t m = fn(x, pos, end);
            if (m == 0) {
                pos++;
                continue;
            }
            if (gap < pos) out[n++] = pos;
            pos += m;
            out[n++] = pos;
            gap = pos;
        }
        if (gap < end) out[n++] = end;
        start = end;
    }
    return n;
}

int tok_pre_split(int pre, const char *text, size_t len, size_t *ends, size_t *n_words) {
    pmatch_fn st[TOK_PRE_MAX_STAGES];
    int n_st = stages_of(pre, st);
    if (!n_words || (!text && len) || (!ends && len) || n_st == 0) return CK_EINVAL;
    *n_words = 0;
    if (len == 0) return 0;
    uint32_t *cp = malloc(len * sizeof *cp);
    uint8_t *fl = malloc(len);
    size_t *boff = malloc((len + 1) * sizeof *boff); /* byte offset of character i */
    size_t *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b);
    int rc = CK_ENOMEM;
    if (!cp || !fl || !boff || !a || !b) goto done;
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        size_t l;
        cp[n] = utf8_next((const unsigned char *)text + i, len - i, &l);
        fl[n] = flags_of(cp[n]);
        boff[n++] = i;
        i += l;
    }
    boff[n] = len;
    ptext x = {cp, fl};
    a[0] = n;
    size_t cnt = 1;
    for (int s = 0; s < n_st; s++) {
        cnt = run_stage(&x, st[s], a, cnt, b);
        size_t *t = a;
        a = b;
        b = t;
    }
    for (size_t i = 0; i < cnt; i++) ends[i] = boff[a[i]];
    *n_words = cnt;
    rc = 0;
done:
    free(cp);
    free(fl);
    free(boff);
    free(a);
    free(b);
    return rc;
}
