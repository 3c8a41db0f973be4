/* tb.c - growing text and stop strings (tb.h). */
#include "tb.h"

#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

int tb_append(char **text, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap || !*text) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *t = realloc(*text, c);
        if (!t) return CK_ENOMEM;
        *text = t;
        *cap = c;
    }
    if (n) memcpy(*text + *len, s, n);
    *len += n;
    (*text)[*len] = 0;
    return CK_OK;
}

int tb_cut_stop(char *text, size_t *len, const char *const *stops, int n_stops, size_t before) {
    for (int i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        if (!sl || sl > *len) continue;
        size_t from = before >= sl - 1 ? before - (sl - 1) : 0;
        for (size_t k = from; k + sl <= *len; k++) {
            if (!memcmp(text + k, stops[i], sl)) {
                *len = k;
                text[k] = 0;
                return 1;
            }
        }
    }
    return 0;
}

size_t tb_stop_holdback(const char *text, size_t len, const char *const *stops, int n_stops) {
    size_t best = 0;
    for (int i = 0; i < n_stops; i++) {
        size_t sl = strlen(stops[i]);
        /* Tails of length k < sl, longest first; one that matches ends the search. */
        for (size_t k = sl ? sl - 1 : 0; k > best; k--) {
            if (k > len) continue;
            if (!memcmp(text + len - k, stops[i], k)) {
                best = k;
                break;
            }
        }
    }
    return best;
}
