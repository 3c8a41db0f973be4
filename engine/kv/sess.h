/* sess.h - conversations that continue across requests: a session's
 * context (every token of its earlier prompts and completions) by session
 * id, in host memory and in the cold store.
 *
 * Only tokens live here: their KV lives in the prefix cache (pfx.h),
 * named by the same tokens, so the next turn finds it there (or in the cold
 * store) and recomputes only what is missing. sess_save writes through to
 * the cold store ("sess:<id>"), so any process on the same store resumes the
 * session; the host map keeps the newest max_sessions, least recently used
 * first out.
 *
 * A cold value is, little-endian:
 *   off size
 *     0   4  magic "CKSS"
 *     4   2  version 1
 *     6   2  reserved 0
 *     8  16  fingerprint of the model (its tokenizer made the ids)
 *    24   4  n_tokens, 1..max_tokens
 *    28   8  XXH64 (seed 0) of bytes 0..27 and the ids
 *    36      n_tokens int32 ids, each below the vocabulary
 * Anything else (short, long, wrong magic or model, bad id, checksum) is a
 * miss and an integrity failure.
 *
 * One thread (the engine's) uses a store. */
#ifndef CK_SESSION_H
#define CK_SESSION_H
#include <stddef.h>
#include <stdint.h>

#include "cold.h"

#define SESS_ID_MAX 256

typedef struct sess_config {
    int max_sessions;        /* host entries (1024) */
    int max_tokens;          /* longest context (the model's) */
    int vocab;               /* ids must be below it */
    const char *fingerprint; /* borrowed, 16 hex digits */
    cold_store *cold;        /* borrowed; NULL = host only */
} sess_config;

typedef struct sess_stats {
    uint64_t saves, host_hits, cold_hits, misses, integrity_failures, save_failures;
    int sessions;
} sess_stats;

typedef struct sess_store sess_store;

int sess_new(const sess_config *c, sess_store **out);
/* Waits (polling the store, at most about a second) for writes in flight. */
void sess_free(sess_store *s);
/* The host copy of session id's tokens: 1 found (*tok valid until the next
 * sess_save or sess_fetch answer), 0 not here. */
int sess_find(sess_store *s, const char *id, const int32_t **tok, int *n);
/* Keep `n` tokens as session id's context, here and in the cold store.
 * Returns 0, CK_EINVAL (bad id or n), CK_ENOMEM. */
int sess_save(sess_store *s, const char *id, const int32_t *tok, int n);
/* Ask the cold store for session id; a verified answer lands in the host map.
 * Returns 0 when started (*waiter incremented, decremented on the answer),
 * CK_ENOTFOUND without a cold store, or the store's refusal. */
int sess_fetch(sess_store *s, const char *id, int *waiter);
void sess_forget_waiter(sess_store *s, const int *waiter);
int sess_in_flight(const sess_store *s);
const sess_stats *sess_get_stats(const sess_store *s);

#endif
