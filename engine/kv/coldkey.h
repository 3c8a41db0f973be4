/* coldkey.h - the name of everything kept in the cold store, in one place.
 *
 * Key kinds (the part after the store's key prefix, see below):
 *
 *   pfx:<fingerprint>:<hash>   a prefix-cache KV block (pfx.h). fingerprint:
 *                              the model's 16 hex digits; hash: the block's
 *                              chain hash, 16 lowercase hex digits. Expires.
 *   sess:<id>                  a session's token ids (sess.h). Expires.
 *   tpl:<name>                 a cache template's record (tpl.h). Written
 *                              with COLD_PUT_PERSIST: never expires.
 *   tpl-uses                   the sorted set of template use counts (member
 *                              = name); only the service and `confkv
 *                              templates` touch it, directly on Redis.
 *   kv:<nonce>:<instance>:<record>:<gen>
 *                              a warm-tier block spilled to the store
 *                              (tier.h). nonce, instance: 16 lowercase hex
 *                              digits; record, gen: decimal. Expires; deleted
 *                              once fetched or when its sequence ends.
 *
 * "tpl:" and "tpl-uses" differ in the fourth byte, so a SCAN for "tpl:*"
 * never meets the use counts. The strings are a wire format: other
 * instances and older builds read them, so they never change.
 *
 * Key prefix (ns). Engine code hands keys to a cold_store without a prefix
 * (ns = NULL): the Redis store (svc_redis.h) puts its configured prefix
 * ("confkv:" by default) in front of every key itself. Code that talks to
 * Redis directly (the service's template use counts, `confkv templates`)
 * passes that same prefix as ns, so both name the same Redis key. ns is
 * copied as given, at most COLDKEY_NS_MAX bytes.
 *
 * Builders write a NUL-terminated key into buf (cap bytes) and return its
 * length (> 0), or CK_EINVAL (a NULL or malformed part: an empty name, a
 * fingerprint that is not 16 hex digits, a negative record), CK_ETOOLONG (ns
 * over COLDKEY_NS_MAX, a name over COLDKEY_NAME_MAX, or the key does not fit
 * in cap). On an error buf holds "" when cap > 0.
 *
 * Parsers take a key of len bytes (not necessarily NUL-terminated) that
 * starts with ns, and return 0 with its parts, or CK_EFORMAT when it is not
 * a key of that kind. Names come back borrowed from the key, unchecked
 * beyond being non-empty (a key read from Redis may hold any byte): callers
 * check them as they would any name from outside (tpl_name_ok). */
#ifndef CK_COLDKEY_H
#define CK_COLDKEY_H
#include <stddef.h>
#include <stdint.h>

#define COLDKEY_NAME_MAX 256 /* a session id or template name (SESS_ID_MAX, TPL_NAME_MAX fit) */
#define COLDKEY_NS_MAX 256   /* a key prefix */
/* A buffer for any key without a prefix ("sess:" + the longest name + NUL
 * is the longest), and for any key with one. */
#define COLDKEY_MAX (8 + COLDKEY_NAME_MAX)
#define COLDKEY_NS_KEY_MAX (COLDKEY_NS_MAX + COLDKEY_MAX)

int coldkey_pfx(char *buf, size_t cap, const char *ns, const char *fingerprint, uint64_t hash);
int coldkey_sess(char *buf, size_t cap, const char *ns, const char *id);
int coldkey_tpl(char *buf, size_t cap, const char *ns, const char *name);
int coldkey_tpl_uses(char *buf, size_t cap, const char *ns);
int coldkey_kv(char *buf, size_t cap, const char *ns, uint64_t nonce, uint64_t instance, int record,
               uint32_t gen);

/* A Redis SCAN MATCH glob that matches every tpl: key under ns (ns's own
 * glob characters *?[]\ escaped). Returns its length, CK_ETOOLONG. */
int coldkey_tpl_glob(char *buf, size_t cap, const char *ns);

/* fingerprint: 17 bytes (16 hex digits + NUL). */
int coldkey_pfx_parse(const char *key, size_t len, const char *ns, char fingerprint[17], uint64_t *hash);
int coldkey_sess_parse(const char *key, size_t len, const char *ns, const char **id, size_t *id_len);
int coldkey_tpl_parse(const char *key, size_t len, const char *ns, const char **name, size_t *name_len);
int coldkey_kv_parse(const char *key, size_t len, const char *ns, uint64_t *nonce, uint64_t *instance,
                     int *record, uint32_t *gen);

#endif
