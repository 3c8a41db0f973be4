/* svc_stream.c - a streamed job's deltas (svc_stream.h). */
#include "svc_stream.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "svc_job.h" /* svc_utf8_char: the result's own scan */

svc_stream *svc_stream_new(int interval_ms) {
    svc_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->interval_ms = interval_ms > 0 ? interval_ms : 0;
    s->last_ms = -1;
    return s;
}

void svc_stream_free(svc_stream *s) {
    if (!s) return;
    free(s->buf);
    free(s);
}

static int grow(svc_stream *s, size_t need) {
    if (need <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) return CK_ENOMEM;
        cap *= 2;
    }
    char *b = realloc(s->buf, cap);
    if (!b) return CK_ENOMEM;
    s->buf = b;
    s->cap = cap;
    return 0;
}

int svc_stream_feed(svc_stream *s, const char *piece, size_t n) {
    if (s->nomem) return CK_ENOMEM;
    size_t i = 0;
    if (s->len < s->sent) { /* a restarted run replays what was sent: compare, do not append */
        size_t k = s->sent - s->len < n ? s->sent - s->len : n;
        if (k && memcmp(s->buf + s->len, piece, k)) s->diverged = 1;
        s->len += k;
        i = k;
    }
    if (i == n) return 0;
    if (n - i > SIZE_MAX - s->len || grow(s, s->len + (n - i))) {
        s->nomem = 1;
        return CK_ENOMEM;
    }
    memcpy(s->buf + s->len, piece + i, n - i);
    s->len += n - i;
    return 0;
}

void svc_stream_token(svc_stream *s, int hold) {
    if (hold < 0) hold = 0;
    if (hold > SVC_STREAM_RING - 1) hold = SVC_STREAM_RING - 1;
    s->ring[s->n_tok % SVC_STREAM_RING] = s->len;
    s->n_tok++;
    size_t safe = hold == 0 ? s->len : s->n_tok > hold ? s->ring[(s->n_tok - 1 - hold) % SVC_STREAM_RING] : 0;
    if (safe > s->safe) s->safe = safe;
}

size_t svc_stream_utf8_cut(const char *p, size_t n) {
    const unsigned char *q = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        size_t k = svc_utf8_char(q + i, n - i);
        if (k) {
            i += k;
            continue;
        }
        /* Not a character here. Cut short by n, with only continuation
         * bytes after its lead, the next bytes may still make it one: stop.
         * Otherwise it is one bad byte whatever follows. */
        unsigned c = q[i];
        size_t want = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (want && n - i < want) {
            int cont = 1;
            for (size_t j = i + 1; j < n; j++) cont &= (q[j] & 0xc0) == 0x80;
            if (cont) return i;
        }
        i++;
    }
    return n;
}

/* Where the next delta would end: the safe text, cut at a character. */
static size_t cut_end(const svc_stream *s) {
    if (s->diverged || s->nomem || s->safe <= s->sent || s->len < s->sent) return s->sent;
    return s->sent + svc_stream_utf8_cut(s->buf + s->sent, s->safe - s->sent);
}

int svc_stream_due(const svc_stream *s, int64_t now_ms) {
    if (cut_end(s) <= s->sent) return 0;
    return s->last_ms < 0 || s->interval_ms == 0 || now_ms - s->last_ms >= s->interval_ms;
}

size_t svc_stream_take(svc_stream *s, int64_t now_ms, const char **delta) {
    size_t end = cut_end(s);
    *delta = s->buf ? s->buf + s->sent : "";
    if (end <= s->sent) return 0;
    size_t n = end - s->sent;
    s->sent = end;
    s->last_ms = now_ms;
    s->deltas++;
    return n;
}

void svc_stream_restart(svc_stream *s) {
    s->len = 0;
    s->safe = 0;
    s->n_tok = 0;
}

int svc_stream_rest(const svc_stream *s, const char *text, size_t len, size_t *off) {
    *off = 0;
    if (!s || s->sent == 0) return 0;
    if (s->diverged || len < s->sent || !text || memcmp(text, s->buf, s->sent)) return CK_ESTATE;
    *off = s->sent;
    return 0;
}
