/* tpl.h - cache templates: a named prefix text (a system prompt, a
 * few-shot header) whose KV the prefix cache keeps pinned and the cold store
 * keeps for every instance (pfx.h).
 *
 * A template's record lives in the cold store under "tpl:<name>" (the
 * service's Redis adds its key prefix, and never expires these keys). It is
 * text, so redis-cli shows it plainly:
 *
 *   confkv-template 1\n
 *   name <name>\n
 *   created_ms <milliseconds since the epoch>\n
 *   bytes <length of the text>\n
 *   xxh64 <16 lowercase hex digits: XXH64, seed 0, of the text>\n
 *   \n
 *   <the text, exactly `bytes` bytes>
 *
 * tpl_decode distrusts every byte: the header lines in that order, numbers
 * in range, the name as given (when one is expected), the length exact, the
 * checksum right. A record that fails is treated as absent.
 *
 * Names: 1 to TPL_NAME_MAX bytes of [A-Za-z0-9._:-]. */
#ifndef CK_TMPL_H
#define CK_TMPL_H
#include <stddef.h>
#include <stdint.h>

#define TPL_NAME_MAX 128
#define TPL_TEXT_MAX (1u << 20)

typedef struct tpl_record {
    char name[TPL_NAME_MAX + 1];
    int64_t created_ms;
    const char *text; /* borrowed from the decoded bytes (not NUL-terminated) */
    size_t text_len;
} tpl_record;

/* 1 when name is a valid template name. */
int tpl_name_ok(const char *name);
/* Encode a record into a malloc'd buffer (*out, *len). Returns 0, CK_EINVAL
 * (bad name, text over TPL_TEXT_MAX), CK_ENOMEM. */
int tpl_encode(const char *name, int64_t created_ms, const char *text, size_t text_len, char **out,
               size_t *len);
/* Verify and split a record. want_name: NULL = any. Returns 0 or CK_EFORMAT. */
int tpl_decode(const void *data, size_t len, const char *want_name, tpl_record *r);

/* ---- the engine's copy of template texts, in front of the cold store.
 * An entry fetched from the store is trusted for fresh_ms, then asked for
 * again (so a template deleted or changed elsewhere is seen); one saved here
 * stays until replaced. One thread uses a cache. */
#include "cold.h"

typedef struct tpl_cache_stats {
    uint64_t fetches, fetch_hits, fetch_misses, integrity_failures, saves, save_failures;
} tpl_cache_stats;

typedef struct tpl_cache tpl_cache;

int tpl_cache_new(int max_entries, int fresh_ms, cold_store *cold, tpl_cache **out);
/* Waits (polling the store, at most about a second) for requests in flight. */
void tpl_cache_free(tpl_cache *c);
/* 1 and the text (valid until the next call on c) when known and fresh. */
int tpl_cache_find(tpl_cache *c, const char *name, int64_t now_ms, const char **text, size_t *len);
/* Keep name = text here and write its record to the cold store. */
int tpl_cache_save(tpl_cache *c, const char *name, const char *text, size_t len, int64_t now_ms,
                   int64_t wall_ms);
/* Ask the store; the answer, verified, lands here (as of now_ms). Returns
 * 0 started (*waiter incremented, decremented on the answer), CK_ENOTFOUND
 * without a store, or the store's refusal. */
int tpl_cache_fetch(tpl_cache *c, const char *name, int64_t now_ms, int *waiter);
void tpl_cache_forget_waiter(tpl_cache *c, const int *waiter);
int tpl_cache_in_flight(const tpl_cache *c);
const tpl_cache_stats *tpl_cache_get_stats(const tpl_cache *c);

#endif
