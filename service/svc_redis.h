/* svc_redis.h - the cold tier (cold.h) on Redis: hiredis's asynchronous API
 * driven by the service's libuv loop through hiredis's own libuv adapter.
 *
 *   engine thread                               loop thread
 *   put/get/del --[in queue, mutex]--uv_async_send--> SET k v EX ttl / GET k / DEL k
 *                                                     (pipelined on one connection)
 *   poll(): callbacks <--[done queue, mutex]--------- reply checked (type, size), copied
 *
 * Contract (cold.h): put/get/del never block and never touch the network;
 * they return 0 (accepted: exactly one callback, inside a later poll on the
 * engine thread) or a negative code (refused: no callback):
 *   CK_EBUSY   bytes in flight would pass max_inflight_bytes (a put's value,
 *              a GET's reply, keys) - the tier drops the block and counts it;
 *   CK_ENOMEM, CK_EINVAL (key too long), CK_ESTATE (the store is closing).
 * While Redis is down (not connected, handshake not done, or between
 * reconnections) every request is accepted and fails fast with CK_EIO at the
 * next poll; a request sent on a connection that drops, or whose reply takes
 * longer than timeout_ms while no other reply arrives either (the connection
 * is then dropped), fails with CK_EIO.
 * GET: status 0 with the value (borrowed for the callback), CK_ENOTFOUND for
 * a nil reply, CK_EIO for anything else (an error reply, a reply of the
 * wrong type or larger than max_value_bytes). Callers verify values
 * themselves (coldfmt.h): Redis is not trusted to return what was written.
 *
 * Connection: `redis://[[user]:password@]host[:port][/db]` (IPv6 hosts in
 * brackets; user and password may be %-encoded) or `unix:///path[?db=N]`.
 * After connecting it sends AUTH (with the user for an ACL user), SELECT db
 * and PING; it is up once PING answers. A lost connection, a failed connect
 * or handshake, or a reply timeout starts a reconnection after a backoff
 * that doubles from backoff_min_ms to backoff_max_ms (reset once up). Keys
 * are the prefix followed by the caller's key (coldkey.h names them); SET
 * carries EX ttl_s, except for puts with COLD_PUT_PERSIST (template records,
 * tpl.h), which never expire.
 *
 * Threads: put/get/del/poll from one thread (the engine's); svc_redis_new,
 * svc_redis_close from the loop thread; svc_redis_get_stats from any. */
#ifndef CK_SVC_REDIS_H
#define CK_SVC_REDIS_H
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "cold.h"
#include "svc_metrics.h"

typedef struct svc_redis_config {
    const char *url;                    /* see above; borrowed during svc_redis_new */
    const char *prefix;                 /* key prefix ("confkv:"), copied */
    int ttl_s;                          /* expiry of every SET (86400); 0 = none */
    size_t max_inflight_bytes;          /* 64 MiB */
    size_t max_value_bytes;             /* largest GET reply accepted (16 MiB) */
    int timeout_ms;                     /* connect + handshake, and each reply (2000) */
    int backoff_min_ms, backoff_max_ms; /* 100, 5000 */
} svc_redis_config;

void svc_redis_config_default(svc_redis_config *c);

/* A parsed URL (svc_redis_parse_url). */
typedef struct svc_redis_url {
    int is_unix;
    char host[256];                /* TCP: host name or address (no brackets) */
    int port;                      /* TCP: 6379 when not given */
    char path[108];                /* unix socket path */
    char user[128], password[256]; /* empty = none */
    int db;                        /* 0 when not given */
} svc_redis_url;

/* Parse and check a URL. Returns 0 or CK_EINVAL with err filled (the
 * message never contains the password). */
int svc_redis_parse_url(const char *url, svc_redis_url *u, char *err, size_t errlen);

typedef struct svc_redis_stats {
    int up;                             /* connected and handshake done */
    uint64_t requests[3];               /* accepted, by op: put, get, del */
    uint64_t failures;                  /* accepted requests that completed with CK_EIO */
    uint64_t busy;                      /* refused with CK_EBUSY (bytes in flight at the bound) */
    uint64_t bad_replies;               /* error replies, or replies of the wrong type or size */
    uint64_t hits, misses;              /* GET: a value, nil */
    uint64_t bytes_written, bytes_read; /* values sent with SET, received from GET */
    uint64_t connects;                  /* connections established (handshake done) */
    uint64_t reconnects;                /* ... after the first */
    uint64_t disconnects;               /* connections lost or dropped (timeouts included) */
    uint64_t timeouts;                  /* replies later than timeout_ms */
    size_t inflight_bytes;
    svc_hist rtt_s; /* request to reply, seconds */
} svc_redis_stats;

typedef struct svc_redis svc_redis;

/* Make the store and start connecting (never waits for Redis: the store
 * starts down). Returns 0; CK_EINVAL with err filled for a bad URL or
 * config; CK_ENOMEM. */
int svc_redis_new(uv_loop_t *loop, const svc_redis_config *c, svc_redis **out, char *err, size_t errlen);
/* The cold_store to hand to the engine (eng_config.cold); valid until close. */
cold_store *svc_redis_store(svc_redis *r);
void svc_redis_get_stats(svc_redis *r, svc_redis_stats *s);
/* Loop thread, once nothing calls put/get/del/poll any more (the engine
 * thread has stopped): drops the connection, discards completions never
 * delivered (their callbacks do not fire), closes the handles; the memory is
 * freed by the close callbacks, so run the loop afterwards. Safe on NULL.
 * cold_free() on the store does the same (so also on the loop thread only). */
void svc_redis_close(svc_redis *r);

/* Loop thread: one command of the service's own (template usage counts),
 * on the same connection. The caller prefixes its keys (svc_redis_prefix).
 * cb fires exactly once, on the loop: with the reply (borrowed for the call;
 * the caller checks its type), or NULL when the command failed or the
 * connection went away. Returns 0, or CK_ESTATE while Redis is down (then cb
 * never fires), CK_ENOMEM. */
struct redisReply;
typedef void (*svc_redis_reply_cb)(void *ud, const struct redisReply *reply);
int svc_redis_command(svc_redis *r, svc_redis_reply_cb cb, void *ud, int argc, const char **argv,
                      const size_t *lens);
const char *svc_redis_prefix(const svc_redis *r);

#endif
