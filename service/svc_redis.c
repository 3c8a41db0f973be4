/* svc_redis.c - the cold tier on Redis: hiredis async + its libuv adapter (svc_redis.h). */
#include "svc_redis.h"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ck_err.h"
#include "svc_log.h"

enum { OP_PUT = 0, OP_GET = 1, OP_DEL = 2 };
enum { ST_DOWN = 0, ST_CONNECTING, ST_UP }; /* loop thread's view of the connection */
#define MAX_KEY 512
#define TICK_MS 100

/* One request, from put/get/del to its callback in poll. The key (and a
 * put's value until it is sent) live in the same allocation. */
typedef struct rreq {
    struct rreq *next, *prev; /* in queue / done queue (next), sent list (both) */
    int op, status;
    cold_cb cb;
    void *ud;
    size_t bytes; /* counted in inflight_bytes until delivered */
    char *key;
    size_t key_len;
    char *val; /* put: the value (inline); get: the reply copy (malloc) */
    size_t len;
    unsigned flags; /* put: COLD_PUT_* */
    int val_owned;  /* val is a malloc'd reply copy */
    double t_sent;
} rreq;

struct svc_redis {
    cold_store base; /* first: the engine's cold_store */
    svc_redis_config c;
    svc_redis_url url;
    char *prefix;
    size_t prefix_len;
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t tick, retry;
    int n_closed; /* handles closed (3 = all) */
    /* loop thread only */
    redisAsyncContext *ac; /* NULL while down */
    int state;             /* ST_* */
    double t_state;        /* when state last changed */
    int attempt;           /* failed connects in a row (backoff) */
    int ever_up, down_logged;
    rreq *sent_head, *sent_tail; /* sent, reply not yet in (oldest first) */
    double t_progress;           /* last reply (or when the connection came up) */
    char ttl[16];
    /* guarded by mu */
    pthread_mutex_t mu;
    rreq *in_head, *in_tail, *done_head, *done_tail;
    int up, closing;
    svc_redis_stats st;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* hiredis <-> libuv
 *
 * hiredis's own adapter (hiredis/adapters/libuv.h) as Debian ships it
 * (0.14.1) drops every poll callback with a non-zero status. libuv reports
 * POLLERR - what a connection reset by a killed server raises - exactly so
 * (UV_EBADF, with the handle already stopped), so with that adapter a dead
 * connection goes unnoticed until a reply times out, and an idle one
 * forever. This is the same adapter with the fix hiredis 1.0 made: on an
 * error, let hiredis read and write, which finds the error and disconnects. */

typedef struct uvev {
    redisAsyncContext *ac; /* NULL once hiredis let go (cleanup) */
    uv_poll_t handle;
    int events;
} uvev;

static void uvev_poll_cb(uv_poll_t *h, int status, int events) {
    uvev *p = h->data;
    int ev = status ? p->events : events;
    if (p->ac && (ev & UV_READABLE)) redisAsyncHandleRead(p->ac);
    if (p->ac && (ev & UV_WRITABLE)) redisAsyncHandleWrite(p->ac);
}

static void uvev_update(uvev *p, int add, int ev) {
    if (add)
        p->events |= ev;
    else
        p->events &= ~ev;
    if (p->events)
        uv_poll_start(&p->handle, p->events, uvev_poll_cb);
    else
        uv_poll_stop(&p->handle);
}
static void uvev_add_read(void *d) { uvev_update(d, 1, UV_READABLE); }
static void uvev_del_read(void *d) { uvev_update(d, 0, UV_READABLE); }
static void uvev_add_write(void *d) { uvev_update(d, 1, UV_WRITABLE); }
static void uvev_del_write(void *d) { uvev_update(d, 0, UV_WRITABLE); }
static void uvev_closed(uv_handle_t *h) { free(h->data); }
static void uvev_cleanup(void *d) {
    uvev *p = d;
    p->ac = NULL;
    uv_close((uv_handle_t *)&p->handle, uvev_closed);
}

static int uvev_attach(redisAsyncContext *ac, uv_loop_t *loop) {
    if (ac->ev.data) return REDIS_ERR;
    uvev *p = calloc(1, sizeof *p);
    if (!p) return REDIS_ERR;
    if (uv_poll_init(loop, &p->handle, ac->c.fd)) {
        free(p);
        return REDIS_ERR;
    }
    p->ac = ac;
    p->handle.data = p;
    ac->ev.addRead = uvev_add_read;
    ac->ev.delRead = uvev_del_read;
    ac->ev.addWrite = uvev_add_write;
    ac->ev.delWrite = uvev_del_write;
    ac->ev.cleanup = uvev_cleanup;
    ac->ev.data = p;
    return REDIS_OK;
}

/* ------------------------------------------------------------------------ */
/* configuration */

void svc_redis_config_default(svc_redis_config *c) {
    memset(c, 0, sizeof *c);
    c->prefix = "confkv:";
    c->ttl_s = 86400;
    c->max_inflight_bytes = (size_t)64 << 20;
    c->max_value_bytes = (size_t)16 << 20;
    c->timeout_ms = 2000;
    c->backoff_min_ms = 100;
    c->backoff_max_ms = 5000;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Copy s[0..n) into out (cap bytes) decoding %XX; 0 or -1 (bad escape, too
 * long, or a NUL). */
static int pct_decode(const char *s, size_t n, char *out, size_t cap) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (unsigned char)s[i];
        if (ch == '%') {
            if (i + 2 >= n) return -1; /* needs two hex digits */
            int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
            if (a < 0 || b < 0) return -1;
            ch = a * 16 + b;
            i += 2;
        }
        if (ch == 0 || o + 1 >= cap) return -1;
        out[o++] = (char)ch;
    }
    out[o] = 0;
    return 0;
}

static int parse_int(const char *s, size_t n, long lo, long hi, int *out) {
    if (n == 0 || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int svc_redis_parse_url(const char *url, svc_redis_url *u, char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    u->port = 6379;
    if (!url || !*url) {
        snprintf(err, errlen, "redis: empty URL");
        return CK_EINVAL;
    }
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f) {
            snprintf(err, errlen, "redis: the URL has a space or control character");
            return CK_EINVAL;
        }
    if (!strncmp(url, "unix://", 7)) {
        const char *p = url + 7, *q = strchr(p, '?');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        u->is_unix = 1;
        if (n == 0 || p[0] != '/' || n >= sizeof u->path) {
            snprintf(err, errlen, "redis: unix:// needs an absolute socket path (at most %zu bytes)",
                     sizeof u->path - 1);
            return CK_EINVAL;
        }
        memcpy(u->path, p, n);
        if (q) {
            if (strncmp(q, "?db=", 4) || parse_int(q + 4, strlen(q + 4), 0, 1 << 20, &u->db)) {
                snprintf(err, errlen, "redis: unix:// URLs take only ?db=N");
                return CK_EINVAL;
            }
        }
        return 0;
    }
    if (strncmp(url, "redis://", 8)) {
        snprintf(err, errlen, "redis: the URL must start with redis:// or unix://");
        return CK_EINVAL;
    }
    const char *p = url + 8, *end = p + strlen(p);
    const char *slash = strchr(p, '/');
    const char *auth_end = NULL;
    /* userinfo: up to the last '@' before the path */
    for (const char *s = p; s < (slash ? slash : end); s++)
        if (*s == '@') auth_end = s;
    if (auth_end) {
        const char *colon = memchr(p, ':', (size_t)(auth_end - p));
        if (!colon) {
            snprintf(err, errlen, "redis: userinfo must be user:password or :password");
            return CK_EINVAL;
        }
        if (pct_decode(p, (size_t)(colon - p), u->user, sizeof u->user) ||
            pct_decode(colon + 1, (size_t)(auth_end - colon - 1), u->password, sizeof u->password)) {
            snprintf(err, errlen, "redis: bad or too long user or password in the URL");
            return CK_EINVAL;
        }
        if (!u->password[0]) {
            snprintf(err, errlen, "redis: empty password in the URL");
            return CK_EINVAL;
        }
        p = auth_end + 1;
    }
    const char *hend = slash ? slash : end, *port = NULL;
    if (*p == '[') { /* [v6]:port */
        const char *rb = memchr(p, ']', (size_t)(hend - p));
        if (!rb || rb == p + 1 || (size_t)(rb - p - 1) >= sizeof u->host) {
            snprintf(err, errlen, "redis: bad [IPv6] host");
            return CK_EINVAL;
        }
        memcpy(u->host, p + 1, (size_t)(rb - p - 1));
        if (rb + 1 < hend) {
            if (rb[1] != ':') {
                snprintf(err, errlen, "redis: bad [IPv6] host");
                return CK_EINVAL;
            }
            port = rb + 2;
        }
    } else {
        const char *colon = memchr(p, ':', (size_t)(hend - p));
        const char *he = colon ? colon : hend;
        if (he == p || (size_t)(he - p) >= sizeof u->host) {
            snprintf(err, errlen, "redis: the URL needs a host");
            return CK_EINVAL;
        }
        memcpy(u->host, p, (size_t)(he - p));
        if (colon) port = colon + 1;
    }
    if (port && parse_int(port, (size_t)(hend - port), 1, 65535, &u->port)) {
        snprintf(err, errlen, "redis: bad port in the URL");
        return CK_EINVAL;
    }
    if (slash && slash[1] && parse_int(slash + 1, strlen(slash + 1), 0, 1 << 20, &u->db)) {
        snprintf(err, errlen, "redis: the URL's path must be a database number");
        return CK_EINVAL;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* queues (any thread, under mu) */

static void push(rreq **head, rreq **tail, rreq *q) {
    q->next = NULL;
    if (*tail)
        (*tail)->next = q;
    else
        *head = q;
    *tail = q;
}

static void req_free(rreq *q) {
    if (q->val_owned) free(q->val);
    free(q);
}

/* Loop thread: a request's outcome, for the engine thread's next poll. */
static void complete(svc_redis *r, rreq *q, int status) {
    q->status = status;
    pthread_mutex_lock(&r->mu);
    if (status == CK_EIO) r->st.failures++;
    push(&r->done_head, &r->done_tail, q);
    pthread_mutex_unlock(&r->mu);
}

static void set_up(svc_redis *r, int up) {
    pthread_mutex_lock(&r->mu);
    r->up = up;
    r->st.up = up;
    if (up) {
        r->st.connects++;
        if (r->ever_up) r->st.reconnects++;
    }
    pthread_mutex_unlock(&r->mu);
    if (up) r->ever_up = 1;
}

/* ------------------------------------------------------------------------ */
/* engine thread: cold_ops */

static int submit(svc_redis *r, int op, const char *key, const void *data, size_t len, unsigned flags,
                  cold_cb cb, void *ud) {
    size_t kl = strlen(key);
    if (kl == 0 || r->prefix_len + kl > MAX_KEY) return CK_EINVAL;
    size_t vl = op == OP_PUT ? len : 0;
    rreq *q = malloc(sizeof *q + r->prefix_len + kl + 1 + vl);
    if (!q) return CK_ENOMEM;
    memset(q, 0, sizeof *q);
    q->op = op;
    q->flags = flags;
    q->cb = cb;
    q->ud = ud;
    q->key = (char *)(q + 1);
    memcpy(q->key, r->prefix, r->prefix_len);
    memcpy(q->key + r->prefix_len, key, kl + 1);
    q->key_len = r->prefix_len + kl;
    if (vl) {
        q->val = q->key + q->key_len + 1;
        memcpy(q->val, data, vl);
        q->len = vl;
    }
    q->bytes = sizeof *q + q->key_len + vl;
    pthread_mutex_lock(&r->mu);
    if (r->closing) {
        pthread_mutex_unlock(&r->mu);
        free(q);
        return CK_ESTATE;
    }
    if (!r->up) { /* fail fast: no network while down */
        r->st.requests[op]++;
        if (op == OP_DEL) {
            pthread_mutex_unlock(&r->mu);
            free(q); /* no callback to deliver; the key expires by its TTL */
            return CK_OK;
        }
        r->st.failures++;
        q->status = CK_EIO;
        q->bytes = 0;
        push(&r->done_head, &r->done_tail, q);
        pthread_mutex_unlock(&r->mu);
        return CK_OK;
    }
    if (r->st.inflight_bytes + q->bytes > r->c.max_inflight_bytes) {
        r->st.busy++;
        pthread_mutex_unlock(&r->mu);
        free(q);
        return CK_EBUSY;
    }
    r->st.inflight_bytes += q->bytes;
    r->st.requests[op]++;
    push(&r->in_head, &r->in_tail, q);
    pthread_mutex_unlock(&r->mu);
    uv_async_send(&r->async);
    return CK_OK;
}

static int r_put(cold_store *s, const char *key, const void *data, size_t len, unsigned flags, cold_cb cb,
                 void *ud) {
    return submit((svc_redis *)s, OP_PUT, key, data, len, flags, cb, ud);
}
static int r_get(cold_store *s, const char *key, cold_cb cb, void *ud) {
    return submit((svc_redis *)s, OP_GET, key, NULL, 0, 0, cb, ud);
}
static int r_del(cold_store *s, const char *key) {
    return submit((svc_redis *)s, OP_DEL, key, NULL, 0, 0, NULL, NULL);
}

static void r_poll(cold_store *s) {
    svc_redis *r = (svc_redis *)s;
    pthread_mutex_lock(&r->mu);
    rreq *q = r->done_head;
    r->done_head = r->done_tail = NULL;
    pthread_mutex_unlock(&r->mu);
    size_t freed = 0;
    while (q) {
        rreq *next = q->next;
        if (q->cb) q->cb(q->ud, q->status, q->status ? NULL : q->val, q->status ? 0 : q->len);
        freed += q->bytes;
        req_free(q);
        q = next;
    }
    if (freed) {
        pthread_mutex_lock(&r->mu);
        r->st.inflight_bytes -= freed;
        pthread_mutex_unlock(&r->mu);
    }
}

static void r_destroy(cold_store *s) { svc_redis_close((svc_redis *)s); }

static const cold_ops redis_ops = {r_put, r_get, r_del, r_poll, r_destroy};

/* ------------------------------------------------------------------------ */
/* loop thread: the connection */

static void conn_start(svc_redis *r);
static void retry_cb(uv_timer_t *t) { conn_start(t->data); }

static void schedule_retry(svc_redis *r) {
    if (r->closing) return;
    int ms = r->c.backoff_min_ms;
    for (int i = 0; i < r->attempt && ms < r->c.backoff_max_ms; i++) ms *= 2;
    if (ms > r->c.backoff_max_ms) ms = r->c.backoff_max_ms;
    r->attempt++;
    uv_timer_start(&r->retry, retry_cb, (uint64_t)ms, 0);
}

static void went_down(svc_redis *r, const char *why, const char *detail) {
    int was_up = r->state == ST_UP;
    r->state = ST_DOWN;
    r->t_state = now_s();
    set_up(r, 0);
    if (was_up || !r->down_logged) {
        char q[300];
        svc_log(was_up ? SVC_LOG_ERROR : SVC_LOG_WARN, "redis_down", "reason=%s detail=%s retry_ms>=%d", why,
                svc_log_str(q, sizeof q, detail ? detail : "", detail ? strlen(detail) : 0),
                r->c.backoff_min_ms);
        r->down_logged = 1;
    }
    if (was_up) {
        pthread_mutex_lock(&r->mu);
        r->st.disconnects++;
        pthread_mutex_unlock(&r->mu);
    }
}

/* Drop the connection now (timeout, bad handshake, closing): every request
 * on it completes with CK_EIO (hiredis calls their callbacks with NULL). */
static void conn_drop(svc_redis *r, const char *why, const char *detail) {
    redisAsyncContext *ac = r->ac;
    r->ac = NULL; /* its callbacks below see a stranger and only fail requests */
    went_down(r, why, detail);
    if (ac) redisAsyncFree(ac);
    schedule_retry(r);
}

static void connect_cb(const redisAsyncContext *ac, int status) {
    svc_redis *r = ac->data;
    if (status == REDIS_OK || ac != r->ac) return;
    /* hiredis frees ac after this returns */
    r->ac = NULL;
    went_down(r, "connect_failed", ac->errstr);
    schedule_retry(r);
}

static void disconnect_cb(const redisAsyncContext *ac, int status) {
    svc_redis *r = ac->data;
    if (ac != r->ac) return; /* dropped by us: handled there */
    r->ac = NULL;
    went_down(r, "connection_lost", ac->err ? ac->errstr : "closed");
    schedule_retry(r);
}

/* Handshake replies: AUTH and SELECT must say OK, PING PONG. */
static const char HS_AUTH = 'a', HS_SELECT = 's', HS_PING = 'p';

static void handshake_cb(redisAsyncContext *ac, void *reply_, void *privdata) {
    svc_redis *r = ac->data;
    const redisReply *reply = reply_;
    const char *what = privdata;
    if (!reply || ac != r->ac || r->state != ST_CONNECTING) return; /* going away: handled elsewhere */
    int ok;
    if (what == &HS_PING)
        ok = reply->type == REDIS_REPLY_STATUS && reply->len == 4 && !memcmp(reply->str, "PONG", 4);
    else
        ok = reply->type == REDIS_REPLY_STATUS && reply->len == 2 && !memcmp(reply->str, "OK", 2);
    if (!ok) {
        char detail[200];
        snprintf(detail, sizeof detail, "%s: %.*s",
                 what == &HS_AUTH     ? "AUTH"
                 : what == &HS_SELECT ? "SELECT"
                                      : "PING",
                 reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS
                     ? (int)(reply->len < 150 ? reply->len : 150)
                     : 0,
                 reply->str ? reply->str : "");
        conn_drop(r, "handshake_failed", detail);
        return;
    }
    if (what != &HS_PING) return;
    r->state = ST_UP;
    r->t_state = r->t_progress = now_s();
    r->attempt = 0;
    r->down_logged = 0;
    set_up(r, 1);
    if (r->url.is_unix)
        svc_log(SVC_LOG_INFO, "redis_up", "socket=%s db=%d", r->url.path, r->url.db);
    else
        svc_log(SVC_LOG_INFO, "redis_up", "host=%s port=%d db=%d", r->url.host, r->url.port, r->url.db);
}

static void conn_start(svc_redis *r) {
    if (r->closing || r->ac) return;
    redisAsyncContext *ac =
        r->url.is_unix ? redisAsyncConnectUnix(r->url.path) : redisAsyncConnect(r->url.host, r->url.port);
    if (!ac || ac->err) {
        char detail[160];
        snprintf(detail, sizeof detail, "%s", ac ? ac->errstr : "out of memory");
        if (ac) redisAsyncFree(ac);
        went_down(r, "connect_failed", detail);
        schedule_retry(r);
        return;
    }
    ac->data = r;
    if (uvev_attach(ac, r->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        went_down(r, "connect_failed", "cannot attach to the loop");
        schedule_retry(r);
        return;
    }
    /* After the attach: setting the connect callback arms the write event. */
    redisAsyncSetConnectCallback(ac, connect_cb);
    redisAsyncSetDisconnectCallback(ac, disconnect_cb);
    r->ac = ac;
    r->state = ST_CONNECTING;
    r->t_state = now_s();
    /* Queued now, sent once connected, answered in order. */
    int rc = REDIS_OK;
    if (r->url.password[0]) { /* AUTH [user] password: the user form for ACL users */
        const char *argv[3] = {"AUTH", r->url.user, r->url.password};
        size_t lens[3] = {4, strlen(r->url.user), strlen(r->url.password)};
        if (!r->url.user[0]) {
            argv[1] = argv[2];
            lens[1] = lens[2];
        }
        rc = redisAsyncCommandArgv(ac, handshake_cb, (void *)&HS_AUTH, r->url.user[0] ? 3 : 2, argv, lens);
    }
    if (rc == REDIS_OK && r->url.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->url.db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        rc = redisAsyncCommandArgv(ac, handshake_cb, (void *)&HS_SELECT, 2, argv, lens);
    }
    if (rc == REDIS_OK) rc = redisAsyncCommand(ac, handshake_cb, (void *)&HS_PING, "PING");
    if (rc != REDIS_OK) conn_drop(r, "connect_failed", "cannot queue the handshake");
}

/* ------------------------------------------------------------------------ */
/* loop thread: requests */

static void sent_unlink(svc_redis *r, rreq *q) {
    if (q->prev)
        q->prev->next = q->next;
    else
        r->sent_head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        r->sent_tail = q->prev;
    q->next = q->prev = NULL;
}

static void reply_cb(redisAsyncContext *ac, void *reply_, void *privdata) {
    svc_redis *r = ac->data;
    const redisReply *reply = reply_;
    rreq *q = privdata;
    sent_unlink(r, q);
    if (!reply) return complete(r, q, CK_EIO); /* the connection went away */
    r->t_progress = now_s();
    double rtt = r->t_progress - q->t_sent;
    int status = CK_EIO, bad = 0;
    if (reply->type == REDIS_REPLY_ERROR) {
        bad = 1;
    } else if (q->op == OP_PUT) {
        if (reply->type == REDIS_REPLY_STATUS && reply->len == 2 && !memcmp(reply->str, "OK", 2))
            status = CK_OK;
        else
            bad = 1;
    } else if (q->op == OP_DEL) {
        if (reply->type == REDIS_REPLY_INTEGER)
            status = CK_OK;
        else
            bad = 1;
    } else if (reply->type == REDIS_REPLY_NIL) {
        status = CK_ENOTFOUND;
    } else if (reply->type == REDIS_REPLY_STRING && (size_t)reply->len <= r->c.max_value_bytes &&
               (reply->len == 0 || reply->str)) {
        q->val = malloc(reply->len ? (size_t)reply->len : 1);
        if (q->val) {
            if (reply->len) memcpy(q->val, reply->str, (size_t)reply->len);
            q->len = (size_t)reply->len;
            q->val_owned = 1;
            status = CK_OK;
        }
    } else {
        bad = 1;
    }
    if (bad && reply->type == REDIS_REPLY_ERROR) {
        char m[200];
        svc_log(SVC_LOG_WARN, "redis_error_reply", "op=%s error=%s",
                q->op == OP_PUT   ? "SET"
                : q->op == OP_GET ? "GET"
                                  : "DEL",
                svc_log_str(m, sizeof m, reply->str ? reply->str : "", reply->str ? (size_t)reply->len : 0));
    }
    pthread_mutex_lock(&r->mu);
    svc_hist_observe(&r->st.rtt_s, rtt);
    if (bad) r->st.bad_replies++;
    if (q->op == OP_GET && status == CK_OK) {
        r->st.hits++;
        r->st.bytes_read += q->len;
        r->st.inflight_bytes += q->len; /* the copy waits for poll */
        q->bytes += q->len;
    } else if (q->op == OP_GET && status == CK_ENOTFOUND) {
        r->st.misses++;
    }
    pthread_mutex_unlock(&r->mu);
    complete(r, q, status);
}

static void send_req(svc_redis *r, rreq *q) {
    const char *argv[5];
    size_t lens[5];
    int argc = 0;
    if (q->op == OP_PUT) {
        argv[0] = "SET", lens[0] = 3;
        argv[1] = q->key, lens[1] = q->key_len;
        argv[2] = q->val ? q->val : "", lens[2] = q->len;
        argc = 3;
        if (r->c.ttl_s > 0 && !(q->flags & COLD_PUT_PERSIST)) {
            argv[3] = "EX", lens[3] = 2;
            argv[4] = r->ttl, lens[4] = strlen(r->ttl);
            argc = 5;
        }
    } else {
        argv[0] = q->op == OP_GET ? "GET" : "DEL", lens[0] = 3;
        argv[1] = q->key, lens[1] = q->key_len;
        argc = 2;
    }
    /* hiredis copies the command into its output buffer (pipelined: every
     * command of this wake-up goes out in as few writes as the socket takes). */
    if (redisAsyncCommandArgv(r->ac, reply_cb, q, argc, argv, lens) != REDIS_OK)
        return complete(r, q, CK_EIO);
    if (q->op == OP_PUT) {
        pthread_mutex_lock(&r->mu);
        r->st.bytes_written += q->len;
        pthread_mutex_unlock(&r->mu);
    }
    q->val = NULL; /* the inline value is not needed any more */
    q->len = 0;
    q->t_sent = now_s();
    q->next = NULL;
    q->prev = r->sent_tail;
    if (r->sent_tail)
        r->sent_tail->next = q;
    else
        r->sent_head = q;
    r->sent_tail = q;
}

/* uv_async_send coalesces: drain the whole queue. */
static void async_cb(uv_async_t *h) {
    svc_redis *r = h->data;
    pthread_mutex_lock(&r->mu);
    rreq *q = r->in_head;
    r->in_head = r->in_tail = NULL;
    pthread_mutex_unlock(&r->mu);
    while (q) {
        rreq *next = q->next;
        if (r->state == ST_UP && r->ac)
            send_req(r, q);
        else
            complete(r, q, CK_EIO);
        q = next;
    }
}

/* Timeouts hiredis 0.14 does not have: connect + handshake, and replies.
 * A reply is late when the oldest request has waited timeout_ms and no
 * reply at all came in meanwhile: a long pipeline that Redis is working
 * through (a burst of spills on a slow link) is progress, not a stall. */
static void tick_cb(uv_timer_t *t) {
    svc_redis *r = t->data;
    double now = now_s(), limit = r->c.timeout_ms / 1e3;
    if (r->state == ST_CONNECTING && now - r->t_state > limit) {
        conn_drop(r, "connect_timeout", NULL);
    } else if (r->state == ST_UP && r->sent_head && now - r->sent_head->t_sent > limit &&
               now - r->t_progress > limit) {
        pthread_mutex_lock(&r->mu);
        r->st.timeouts++;
        pthread_mutex_unlock(&r->mu);
        conn_drop(r, "reply_timeout", NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* life cycle */

static void free_queue(rreq *q) {
    while (q) {
        rreq *n = q->next;
        req_free(q);
        q = n;
    }
}

static void handle_closed(uv_handle_t *h) {
    svc_redis *r = h->data;
    if (++r->n_closed < 3) return;
    free_queue(r->in_head);
    free_queue(r->done_head);
    pthread_mutex_destroy(&r->mu);
    free(r->prefix);
    free(r);
}

int svc_redis_new(uv_loop_t *loop, const svc_redis_config *c, svc_redis **out, char *err, size_t errlen) {
    *out = NULL;
    svc_redis *r = calloc(1, sizeof *r);
    if (!r) return CK_ENOMEM;
    int rc = svc_redis_parse_url(c->url, &r->url, err, errlen);
    if (rc) goto fail;
    r->c = *c;
    r->c.url = NULL;
    if (c->ttl_s < 0 || c->timeout_ms <= 0 || c->backoff_min_ms <= 0 ||
        c->backoff_max_ms < c->backoff_min_ms || !c->max_inflight_bytes || !c->max_value_bytes) {
        snprintf(err, errlen, "redis: bad TTL, timeout, backoff or size limit");
        rc = CK_EINVAL;
        goto fail;
    }
    r->prefix = strdup(c->prefix ? c->prefix : "");
    if (!r->prefix) {
        rc = CK_ENOMEM;
        goto fail;
    }
    r->prefix_len = strlen(r->prefix);
    if (r->prefix_len > 128) {
        snprintf(err, errlen, "redis: key prefix longer than 128 bytes");
        rc = CK_EINVAL;
        goto fail;
    }
    snprintf(r->ttl, sizeof r->ttl, "%d", c->ttl_s);
    static const double rtt[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                 0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
    svc_hist_init(&r->st.rtt_s, rtt, (int)(sizeof rtt / sizeof rtt[0]));
    r->base.ops = &redis_ops;
    r->loop = loop;
    pthread_mutex_init(&r->mu, NULL);
    uv_async_init(loop, &r->async, async_cb);
    uv_timer_init(loop, &r->tick);
    uv_timer_init(loop, &r->retry);
    r->async.data = r->tick.data = r->retry.data = r;
    uv_timer_start(&r->tick, tick_cb, TICK_MS, TICK_MS);
    conn_start(r);
    *out = r;
    return CK_OK;
fail:
    free(r->prefix);
    free(r);
    return rc;
}

cold_store *svc_redis_store(svc_redis *r) { return r ? &r->base : NULL; }

void svc_redis_get_stats(svc_redis *r, svc_redis_stats *s) {
    pthread_mutex_lock(&r->mu);
    *s = r->st;
    pthread_mutex_unlock(&r->mu);
}

typedef struct cmd_ctx {
    svc_redis_reply_cb cb;
    void *ud;
} cmd_ctx;

static void cmd_cb(redisAsyncContext *ac, void *reply, void *priv) {
    (void)ac;
    cmd_ctx *x = priv;
    x->cb(x->ud, reply);
    free(x);
}

int svc_redis_command(svc_redis *r, svc_redis_reply_cb cb, void *ud, int argc, const char **argv,
                      const size_t *lens) {
    if (!r || !r->ac || r->state != ST_UP) return CK_ESTATE;
    cmd_ctx *x = malloc(sizeof *x);
    if (!x) return CK_ENOMEM;
    x->cb = cb;
    x->ud = ud;
    if (redisAsyncCommandArgv(r->ac, cmd_cb, x, argc, argv, lens) != REDIS_OK) {
        free(x);
        return CK_ESTATE;
    }
    return CK_OK;
}

const char *svc_redis_prefix(const svc_redis *r) { return r->prefix; }

void svc_redis_close(svc_redis *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int again = r->closing;
    r->closing = 1;
    r->up = 0;
    r->st.up = 0;
    pthread_mutex_unlock(&r->mu);
    if (again) return;
    uv_timer_stop(&r->tick);
    uv_timer_stop(&r->retry);
    redisAsyncContext *ac = r->ac;
    r->ac = NULL;
    r->state = ST_DOWN;
    if (ac) redisAsyncFree(ac); /* requests on it complete into the done queue, discarded */
    async_cb(&r->async);        /* the same for requests never sent */
    uv_close((uv_handle_t *)&r->async, handle_closed);
    uv_close((uv_handle_t *)&r->tick, handle_closed);
    uv_close((uv_handle_t *)&r->retry, handle_closed);
}
