/* svc_stream.h - a streamed job's text, cut into deltas.
 *
 * A job with `"stream": true` gets ordered partial records on the stream
 * topic, {"id", "seq", "delta", "done"} (docs/SERVICE.md, Streaming;
 * schemas/stream.schema.json). This module is their bookkeeping, without
 * Kafka and without threads of its own: the engine thread feeds it the
 * text the engine releases with each token (eng_event.piece: the pieces of
 * a request add up to its result text, stop strings held back) and, after
 * each step, takes a delta when one is due; the loop, once the job is
 * back, takes the rest from the result's text (svc_stream_rest).
 *
 * Cuts. A delta never ends inside a UTF-8 character: the text is cut only
 * where the result's own cleaning (svc_utf8_clean: one character or one bad
 * byte at a time) is at a boundary that no later byte can move, so the
 * deltas, each cleaned, add up to exactly the result's cleaned text.
 *
 * The cascade (svc_route.h). On the small model the text of the last
 * `hold` tokens (the rule's rewind) may still be dropped when the job moves
 * to the large model; it is held back. What was sent is then within the
 * accepted tokens' text, which the large model's text begins with: after
 * svc_stream_restart the new run's first bytes are checked against what
 * was sent instead of being sent again.
 *
 * Coalescing. A delta is due when interval_ms have passed since the last
 * one (0: whenever there is new text); the first is due at once.
 *
 * Threads: one at a time. The engine thread while the job is in the engine,
 * the loop otherwise (the work item's hand-over orders them, svc_et.h).
 * Ownership: svc_stream_new / svc_stream_free; delta pointers are borrowed
 * until the next call. */
#ifndef CK_SVC_STREAM_H
#define CK_SVC_STREAM_H
#include <stddef.h>
#include <stdint.h>

#include "svc_route.h"

#define SVC_STREAM_INTERVAL_MS 50 /* stream_interval_ms's default */
#define SVC_STREAM_RING (SVC_ROUTE_MAX_WINDOW + 1)

typedef struct svc_stream {
    char *buf;                    /* (cap) the text released so far in this run; [0, sent) was sent */
    size_t len, cap;              /* bytes of the run's text fed; allocated */
    size_t sent;                  /* bytes given out as deltas: a character boundary */
    size_t safe;                  /* bytes no later move can drop (the cascade); <= len */
    int interval_ms;              /* coalescing period (0: every step) */
    int64_t last_ms;              /* when the last delta was taken; -1: none yet */
    int n_tok;                    /* tokens fed in this run */
    int diverged;                 /* a restarted run's text did not begin with what was sent */
    int nomem;                    /* the buffer could not grow: no more deltas before the end */
    uint64_t deltas;              /* deltas taken */
    size_t ring[SVC_STREAM_RING]; /* ring[i % SVC_STREAM_RING]: len after token i + 1 */
} svc_stream;

/* A new stream (NULL when out of memory); interval_ms < 0 is taken as 0. */
svc_stream *svc_stream_new(int interval_ms);
void svc_stream_free(svc_stream *s);

/* Append n bytes the engine released. After a restart, bytes below `sent`
 * are compared with what was sent, not appended twice. 0, or CK_ENOMEM (the
 * stream then takes no more deltas; its end still comes from the result). */
int svc_stream_feed(svc_stream *s, const char *piece, size_t n);
/* A token ended (after its piece was fed); the text of the last `hold`
 * tokens may still be dropped (0: none may). */
void svc_stream_token(svc_stream *s, int hold);
/* 1 when a delta is due at now_ms: new text up to a safe character boundary,
 * and the interval passed. */
int svc_stream_due(const svc_stream *s, int64_t now_ms);
/* Take the due delta: its bytes (raw: clean them with svc_utf8_clean) in
 * *delta, their count returned (0: nothing to take). */
size_t svc_stream_take(svc_stream *s, int64_t now_ms, const char **delta);
/* The job moved to another model, whose text begins anew (with the
 * accepted tokens' text): what was sent stays sent. */
void svc_stream_restart(svc_stream *s);
/* The end: the result's text (len bytes) must begin with what was sent;
 * *off is where the last delta begins. 0, or CK_ESTATE when it does not
 * (then nothing more can be sent that adds up). s NULL: *off = 0. */
int svc_stream_rest(const svc_stream *s, const char *text, size_t len, size_t *off);

/* The longest prefix of p (n bytes) that ends where svc_utf8_clean's scan
 * of p followed by any bytes would be at a boundary: a character cut short
 * by n (a lead byte and only continuation bytes after it) is left out. */
size_t svc_stream_utf8_cut(const char *p, size_t n);

#endif
