/* test_svc_redis.c - the Redis cold store (svc_redis.h) against a real
 * redis-server that this program starts on a free loopback port (exit 77
 * when redis-server is missing). The store runs as in confkvd: its libuv
 * loop on a thread of its own, requests and poll from this (the "engine")
 * thread.
 *
 *   - URL parsing (no server needed)
 *   - put/get/del round trips, nil -> CK_ENOTFOUND, prefix and TTL on the keys
 *   - a 1000-block burst, pipelined, every value back byte for byte
 *   - the bytes-in-flight bound refuses with CK_EBUSY, then recovers
 *   - a tier (coldfmt blocks) over Redis: a value corrupted in Redis is an
 *     integrity failure, never KV
 *   - AUTH (password, ACL user), SELECT db, a unix socket; a wrong password
 *     never comes up and fails fast
 *   - SIGSTOP of the server: replies time out, requests fail, it recovers
 *   - kill -9 of the server: requests fail fast (no hang), and after a restart
 *     on the same port the store reconnects by itself and works again */
#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "ck_err.h"
#include "ck_test.h"
#include "cold.h"
#include "coldfmt.h"
#include "engine.h"
#include "kv.h"
#include "svc_log.h"
#include "svc_redis.h"
#include "tier.h"

extern char **environ;

static char g_dir[256];   /* scratch folder (sockets, logs) */
static int g_port;        /* the main server's port */
static pid_t g_pid = -1;  /* the main server */
static pid_t g_pid2 = -1; /* a second one (auth test) */

/* A failed check returns early: never leave a server behind. */
static void kill_servers(void) {
    if (g_pid > 0) kill(g_pid, SIGKILL);
    if (g_pid2 > 0) kill(g_pid2, SIGKILL);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* redis-server */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &n)) {
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* A blocking connection for checks from the test (not the store under test). */
static redisContext *sync_conn(int port, const char *auth, int db) {
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (auth) {
        redisReply *r = redisCommand(c, "AUTH %s", auth);
        if (r) freeReplyObject(r);
    }
    if (db) {
        redisReply *r = redisCommand(c, "SELECT %d", db);
        if (r) freeReplyObject(r);
    }
    return c;
}

static long long sync_int(redisContext *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
    if (r) freeReplyObject(r);
    return v;
}

/* Start redis-server on port with extra arguments; wait until it answers. */
static pid_t start_redis(int port, const char *const *extra, const char *auth) {
    char p[16], logf[300];
    snprintf(p, sizeof p, "%d", port);
    snprintf(logf, sizeof logf, "%s/redis-%d.log", g_dir, port);
    const char *argv[32] = {
        "redis-server", "--port",      p,    "--bind",    "127.0.0.1", "--save", "",   "--appendonly",
        "no",           "--daemonize", "no", "--logfile", logf,        "--dir",  g_dir};
    int n = 15;
    for (; extra && *extra && n < 31; extra++) argv[n++] = *extra;
    argv[n] = NULL;
    pid_t pid;
    if (posix_spawnp(&pid, "redis-server", NULL, NULL, (char *const *)argv, environ)) return -1;
    for (int i = 0; i < 100; i++) {
        redisContext *c = sync_conn(port, auth, 0);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            int ok = r && r->type == REDIS_REPLY_STATUS;
            if (r) freeReplyObject(r);
            redisFree(c);
            if (ok) return pid;
        }
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
}

static void stop_redis(pid_t *pid) {
    if (*pid <= 0) return;
    kill(*pid, SIGKILL);
    waitpid(*pid, NULL, 0);
    *pid = -1;
}

/* ------------------------------------------------------------------------ */
/* the store on a loop thread */

typedef struct harness {
    uv_loop_t loop;
    uv_async_t stop;
    pthread_t th;
    svc_redis *r;
    cold_store *s;
} harness;

static void *loop_main(void *arg) {
    harness *h = arg;
    uv_run(&h->loop, UV_RUN_DEFAULT);
    return NULL;
}

static void stop_cb(uv_async_t *a) {
    harness *h = a->data;
    svc_redis_close(h->r);
    uv_close((uv_handle_t *)a, NULL);
}

static svc_redis_stats stats(harness *h) {
    svc_redis_stats s;
    svc_redis_get_stats(h->r, &s);
    return s;
}

/* Wait (polling the store as the engine does) until the store is up (or
 * down when want_up is 0). */
static int wait_up(harness *h, int want_up, double seconds) {
    double t0 = now_s();
    while (now_s() - t0 < seconds) {
        cold_poll(h->s);
        if (stats(h).up == want_up) return 1;
        sleep_ms(5);
    }
    return 0;
}

static int h_start(harness *h, const char *url, const svc_redis_config *base) {
    memset(h, 0, sizeof *h);
    uv_loop_init(&h->loop);
    svc_redis_config c;
    if (base)
        c = *base;
    else
        svc_redis_config_default(&c);
    c.url = url;
    c.prefix = "confkv-test:";
    char err[256];
    /* Handles are made before the loop thread runs: no race. */
    if (svc_redis_new(&h->loop, &c, &h->r, err, sizeof err)) {
        fprintf(stderr, "svc_redis_new: %s\n", err);
        return -1;
    }
    h->s = svc_redis_store(h->r);
    uv_async_init(&h->loop, &h->stop, stop_cb);
    h->stop.data = h;
    pthread_create(&h->th, NULL, loop_main, h);
    return 0;
}

static void h_stop(harness *h) {
    uv_async_send(&h->stop);
    pthread_join(h->th, NULL);
    uv_loop_close(&h->loop);
}

/* A request's outcome. */
typedef struct res {
    int done, status;
    size_t len;
    unsigned char *data;
    double t;
} res;

static void cb(void *ud, int status, const void *data, size_t len) {
    res *r = ud;
    r->done++;
    r->status = status;
    r->len = len;
    r->t = now_s();
    free(r->data);
    r->data = NULL;
    if (data && len && (r->data = malloc(len))) memcpy(r->data, data, len);
}

static int wait_res(harness *h, res *r, int n, double seconds) {
    double t0 = now_s();
    for (;;) {
        cold_poll(h->s);
        int all = 1;
        for (int i = 0; i < n; i++) all &= r[i].done > 0;
        if (all) return 1;
        if (now_s() - t0 > seconds) return 0;
        sleep_ms(1);
    }
}

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        b[i] = (unsigned char)(seed >> 16);
    }
}

/* ------------------------------------------------------------------------ */
/* tests */

static void test_url(void) {
    svc_redis_url u;
    char err[256];
    CK_CHECK(svc_redis_parse_url("redis://127.0.0.1:6380/2", &u, err, sizeof err) == 0);
    CK_CHECK(!u.is_unix && !strcmp(u.host, "127.0.0.1") && u.port == 6380 && u.db == 2 && !u.password[0]);
    CK_CHECK(svc_redis_parse_url("redis://h", &u, err, sizeof err) == 0 && u.port == 6379 && u.db == 0);
    CK_CHECK(svc_redis_parse_url("redis://:p%40ss@h:1/", &u, err, sizeof err) == 0);
    CK_CHECK(!strcmp(u.password, "p@ss") && !u.user[0] && u.port == 1 && u.db == 0);
    CK_CHECK(svc_redis_parse_url("redis://alice:s3cret@[::1]:7000/15", &u, err, sizeof err) == 0);
    CK_CHECK(!strcmp(u.user, "alice") && !strcmp(u.password, "s3cret") && !strcmp(u.host, "::1") &&
             u.port == 7000 && u.db == 15);
    CK_CHECK(svc_redis_parse_url("unix:///run/redis.sock?db=3", &u, err, sizeof err) == 0);
    CK_CHECK(u.is_unix && !strcmp(u.path, "/run/redis.sock") && u.db == 3);
    static const char *bad[] = {"",
                                "http://h",
                                "redis://",
                                "redis://h:0",
                                "redis://h:65536",
                                "redis://h:x",
                                "redis://h/x",
                                "redis://h/-1",
                                "redis://user@h",
                                "redis://:@h",
                                "redis://:%zz@h",
                                "redis://:%0@h",
                                "redis://:%00@h",
                                "redis://[::1",
                                "redis://[::1]x",
                                "unix://rel",
                                "unix:///s?x=1",
                                "redis://h /1",
                                NULL};
    for (int i = 0; bad[i]; i++) {
        err[0] = 0;
        CK_CHECK_MSG(svc_redis_parse_url(bad[i], &u, err, sizeof err) == CK_EINVAL && err[0], "%s", bad[i]);
    }
    /* the password never shows in the message */
    CK_CHECK(svc_redis_parse_url("redis://u:hunter2@h:99999", &u, err, sizeof err) == CK_EINVAL);
    CK_CHECK(!strstr(err, "hunter2"));
}

static void test_round_trip(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    CK_CHECK(h_start(&h, url, NULL) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    res r[4] = {{0}};
    unsigned char v[3000];
    fill(v, sizeof v, 1);
    CK_CHECK(h.s->ops->put(h.s, "a", v, sizeof v, 0, cb, &r[0]) == 0);
    CK_CHECK(h.s->ops->put(h.s, "empty", v, 0, 0, cb, &r[1]) == 0);
    CK_CHECK(wait_res(&h, r, 2, 5) && r[0].status == 0 && r[1].status == 0);
    CK_CHECK(h.s->ops->get(h.s, "a", cb, &r[2]) == 0);
    CK_CHECK(h.s->ops->get(h.s, "nope", cb, &r[3]) == 0);
    CK_CHECK(wait_res(&h, r + 2, 2, 5));
    CK_CHECK(r[2].status == 0 && r[2].len == sizeof v && !memcmp(r[2].data, v, sizeof v));
    CK_CHECK(r[3].status == CK_ENOTFOUND);
    /* the key carries the prefix and a TTL */
    redisContext *c = sync_conn(g_port, NULL, 0);
    CK_CHECK(c);
    long long ttl = sync_int(c, "TTL confkv-test:a");
    CK_CHECK_MSG(ttl > 86000 && ttl <= 86400, "ttl %lld", ttl);
    CK_CHECK(sync_int(c, "STRLEN confkv-test:empty") == 0);
    /* del, then the key is gone */
    CK_CHECK(h.s->ops->del(h.s, "a") == 0);
    res g = {0};
    CK_CHECK(h.s->ops->get(h.s, "a", cb, &g) == 0);
    CK_CHECK(wait_res(&h, &g, 1, 5) && g.status == CK_ENOTFOUND);
    CK_CHECK(sync_int(c, "EXISTS confkv-test:a") == 0);
    /* a reply of the wrong type is an error, not a value */
    redisReply *rp = redisCommand(c, "RPUSH confkv-test:list x");
    if (rp) freeReplyObject(rp);
    res w = {0};
    CK_CHECK(h.s->ops->get(h.s, "list", cb, &w) == 0);
    CK_CHECK(wait_res(&h, &w, 1, 5) && w.status == CK_EIO);
    svc_redis_stats st = stats(&h);
    CK_CHECK(st.requests[0] == 2 && st.requests[1] == 4 && st.requests[2] == 1);
    CK_CHECK(st.hits == 1 && st.misses == 2 && st.bad_replies == 1 && st.failures == 1);
    CK_CHECK(st.bytes_written == sizeof v && st.bytes_read == sizeof v && st.inflight_bytes == 0);
    CK_CHECK(st.rtt_s.total == 7 && st.connects == 1 && st.reconnects == 0);
    /* keys too long are refused at once */
    char big[700];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = 0;
    CK_CHECK(h.s->ops->get(h.s, big, cb, &w) == CK_EINVAL);
    /* Expiry follows the put's flag, not the key's name: a "tpl:" key put
     * without COLD_PUT_PERSIST expires, any key put with it never does (-1). */
    res pr[2] = {{0}};
    CK_CHECK(h.s->ops->put(h.s, "tpl:plain", v, 8, 0, cb, &pr[0]) == 0);
    CK_CHECK(h.s->ops->put(h.s, "kept", v, 8, COLD_PUT_PERSIST, cb, &pr[1]) == 0);
    CK_CHECK(wait_res(&h, pr, 2, 5) && pr[0].status == 0 && pr[1].status == 0);
    ttl = sync_int(c, "TTL confkv-test:tpl:plain");
    CK_CHECK_MSG(ttl > 86000 && ttl <= 86400, "tpl:plain ttl %lld", ttl);
    CK_CHECK_MSG(sync_int(c, "TTL confkv-test:kept") == -1, "a persistent put has a TTL");
    redisFree(c);
    for (int i = 0; i < 4; i++) free(r[i].data);
    free(g.data);
    free(w.data);
    h_stop(&h);
}

#define BURST 1000
#define BLOCK 20480

static void test_burst(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    CK_CHECK(h_start(&h, url, NULL) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    unsigned char *v = malloc((size_t)BURST * BLOCK);
    res *r = calloc(BURST, sizeof *r);
    CK_CHECK(v && r);
    double t0 = now_s();
    for (int i = 0; i < BURST; i++) {
        char key[32];
        snprintf(key, sizeof key, "burst:%d", i);
        fill(v + (size_t)i * BLOCK, BLOCK, (unsigned)i);
        CK_CHECK(h.s->ops->put(h.s, key, v + (size_t)i * BLOCK, BLOCK, 0, cb, &r[i]) == 0);
    }
    CK_CHECK(wait_res(&h, r, BURST, 20));
    double t_put = now_s() - t0;
    for (int i = 0; i < BURST; i++) CK_CHECK(r[i].status == 0);
    memset(r, 0, BURST * sizeof *r);
    t0 = now_s();
    for (int i = 0; i < BURST; i++) {
        char key[32];
        snprintf(key, sizeof key, "burst:%d", i);
        CK_CHECK(h.s->ops->get(h.s, key, cb, &r[i]) == 0);
    }
    CK_CHECK(wait_res(&h, r, BURST, 20));
    double t_get = now_s() - t0;
    for (int i = 0; i < BURST; i++)
        CK_CHECK_MSG(r[i].status == 0 && r[i].len == BLOCK &&
                         !memcmp(r[i].data, v + (size_t)i * BLOCK, BLOCK),
                     "block %d", i);
    fprintf(stderr, "     burst: %d x %d bytes: put %.3f s, get %.3f s\n", BURST, BLOCK, t_put, t_get);
    svc_redis_stats st = stats(&h);
    CK_CHECK(st.bytes_written == (uint64_t)BURST * BLOCK && st.bytes_read == (uint64_t)BURST * BLOCK);
    CK_CHECK(st.inflight_bytes == 0 && st.failures == 0 && st.busy == 0);
    for (int i = 0; i < BURST; i++) {
        char key[32];
        snprintf(key, sizeof key, "burst:%d", i);
        h.s->ops->del(h.s, key);
        free(r[i].data);
    }
    /* the dels land (poll releases their bytes) */
    redisContext *c = sync_conn(g_port, NULL, 0);
    CK_CHECK(c);
    for (int i = 0; i < 200 && sync_int(c, "EXISTS confkv-test:burst:999"); i++) {
        cold_poll(h.s);
        sleep_ms(10);
    }
    cold_poll(h.s);
    CK_CHECK(sync_int(c, "EXISTS confkv-test:burst:0") == 0 &&
             sync_int(c, "EXISTS confkv-test:burst:999") == 0);
    redisFree(c);
    free(v);
    free(r);
    h_stop(&h);
}

/* Accepted bytes not yet delivered are bounded: beyond, CK_EBUSY at once. */
static void test_inflight_bound(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    svc_redis_config c;
    svc_redis_config_default(&c);
    c.max_inflight_bytes = 100000;
    CK_CHECK(h_start(&h, url, &c) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    unsigned char v[BLOCK];
    fill(v, sizeof v, 5);
    res r[10] = {{0}};
    int accepted = 0, busy = 0;
    for (int i = 0; i < 10; i++) {
        int rc = h.s->ops->put(h.s, "bound", v, sizeof v, 0, cb, &r[i]);
        if (rc == 0)
            accepted++;
        else if (rc == CK_EBUSY)
            busy++, r[i].done = 1;
    }
    CK_CHECK_MSG(accepted == 4 && busy == 6, "accepted %d busy %d", accepted, busy);
    CK_CHECK(wait_res(&h, r, 10, 5));
    CK_CHECK(stats(&h).inflight_bytes == 0 && stats(&h).busy == 6);
    res again = {0};
    CK_CHECK(h.s->ops->put(h.s, "bound", v, sizeof v, 0, cb, &again) == 0); /* room again */
    CK_CHECK(wait_res(&h, &again, 1, 5) && again.status == 0);
    h.s->ops->del(h.s, "bound");
    h_stop(&h);
}

/* The warm tier over Redis: blocks go out as coldfmt values and come back
 * verified; a value corrupted in Redis is an integrity failure. */
static void test_tier_corruption(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    CK_CHECK(h_start(&h, url, NULL) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    const kvq_shape shape = {5, 16, 32};
    tier_config tc = {
        .shape = shape, .max_cold = 64, .cold = h.s, .instance = 1, .fingerprint = "0123456789abcdef"};
    tc.budget_bytes = kvq_f32_bytes(&shape); /* one slot */
    tier *t = NULL;
    CK_CHECK(tier_new(&tc, &t) == 0);
    kv_seq s;
    kv_seq_init(&s, 1, 64, 16);
    size_t n = kvq_f32_bytes(&shape) / sizeof(float);
    float *blk[3], *back = malloc(n * sizeof(float));
    for (int j = 0; j < 3; j++) {
        blk[j] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) blk[j][i] = (float)((i * 7 + (size_t)j * 13) % 101) / 17.0f - 3.0f;
        CK_CHECK(tier_put(t, &s, j, blk[j], 16) == 0); /* blocks 0 and 1 spill */
    }
    const tier_stats *st = tier_get_stats(t);
    for (int i = 0; i < 500 && stats(&h).requests[0] > 0 && (stats(&h).inflight_bytes > 0); i++) {
        tier_poll(t);
        sleep_ms(2);
    }
    tier_poll(t);
    CK_CHECK(st->spills == 2 && st->spill_failures == 0 && s.tier[0] == KV_TIER_COLD &&
             s.tier[1] == KV_TIER_COLD);
    redisContext *c = sync_conn(g_port, NULL, 0);
    CK_CHECK(c);
    redisReply *keys = redisCommand(c, "KEYS confkv-test:kv:*");
    CK_CHECK(keys && keys->type == REDIS_REPLY_ARRAY && keys->elements == 2);
    long long vlen = sync_int(c, "STRLEN %s", keys->element[0]->str);
    CK_CHECK(vlen > COLDFMT_HEADER_BYTES && (size_t)vlen < kvq_f32_bytes(&shape) + 200);
    /* Corrupt one byte of the value of block 0 or 1 (whichever key is first)
     * and leave the other intact. */
    redisReply *rp = redisCommand(c, "SETRANGE %s 200 X", keys->element[0]->str);
    CK_CHECK(rp);
    freeReplyObject(rp);
    rp = redisCommand(c, "GETRANGE %s 0 3", keys->element[1]->str);
    CK_CHECK(rp && rp->type == REDIS_REPLY_STRING && rp->len == 4 && !memcmp(rp->str, "CKVB", 4));
    freeReplyObject(rp);
    freeReplyObject(keys);
    CK_CHECK(tier_take(t, s.slot[2], back) == 0); /* room for one fetch at a time */
    int hits = 0, bad = 0;
    for (int j = 0; j < 2; j++) {
        CK_CHECK(tier_fetch(t, &s, j) == 0);
        for (int i = 0; i < 1000 && s.tier[j] == KV_TIER_COLD; i++) {
            tier_poll(t);
            sleep_ms(2);
        }
        if (s.tier[j] == KV_TIER_WARM) {
            CK_CHECK(tier_take(t, s.slot[j], back) == 0 && !memcmp(back, blk[j], n * sizeof(float)));
            hits++;
        } else {
            CK_CHECK(s.tier[j] == KV_TIER_DROPPED);
            bad++;
        }
    }
    CK_CHECK(hits == 1 && bad == 1);
    CK_CHECK(st->integrity_failures == 1 && st->fetch_misses == 1 && st->fetch_hits == 1);
    /* every key was deleted (the bad one too) */
    for (int i = 0; i < 100; i++) {
        tier_poll(t);
        redisReply *k = redisCommand(c, "KEYS confkv-test:kv:*");
        int left = k && k->type == REDIS_REPLY_ARRAY ? (int)k->elements : -1;
        if (k) freeReplyObject(k);
        if (left == 0) break;
        sleep_ms(10);
    }
    redisReply *k = redisCommand(c, "KEYS confkv-test:kv:*");
    CK_CHECK(k && k->type == REDIS_REPLY_ARRAY && k->elements == 0);
    freeReplyObject(k);
    tier_release_seq(t, &s);
    tier_free(t);
    kv_seq_free(&s);
    for (int j = 0; j < 3; j++) free(blk[j]);
    free(back);
    redisFree(c);
    h_stop(&h);
}

/* AUTH with a password and with an ACL user, SELECT, a unix socket; a wrong
 * password never comes up and requests fail fast. */
static void test_auth_db_unix(void) {
    int port = free_port();
    char sock[300];
    snprintf(sock, sizeof sock, "%s/r.sock", g_dir);
    const char *extra[] = {
        "--requirepass", "pw1", "--unixsocket", sock, "--unixsocketperm", "700", "--user", "alice", "on",
        ">pw2",          "~*",  "+@all",        NULL};
    pid_t pid = g_pid2 = start_redis(port, extra, "pw1");
    CK_CHECK(pid > 0);
    const char *urls[2];
    char u0[128], u1[128], u2[400];
    snprintf(u0, sizeof u0, "redis://:pw1@127.0.0.1:%d/3", port);
    snprintf(u1, sizeof u1, "redis://alice:pw2@127.0.0.1:%d/4", port);
    snprintf(u2, sizeof u2, "unix://%s?db=5", sock);
    urls[0] = u0, urls[1] = u1;
    for (int i = 0; i < 2; i++) {
        static harness h; /* static: a failed check returns with its loop thread still running */
        CK_CHECK(h_start(&h, urls[i], NULL) == 0);
        CK_CHECK_MSG(wait_up(&h, 1, 5), "%s", urls[i]);
        res r = {0}, g = {0};
        CK_CHECK(h.s->ops->put(h.s, "authed", "v", 1, 0, cb, &r) == 0);
        CK_CHECK(wait_res(&h, &r, 1, 5) && r.status == 0);
        CK_CHECK(h.s->ops->get(h.s, "authed", cb, &g) == 0);
        CK_CHECK(wait_res(&h, &g, 1, 5) && g.status == 0 && g.len == 1 && g.data[0] == 'v');
        free(g.data);
        redisContext *c = sync_conn(port, "pw1", 3 + i);
        CK_CHECK(c && sync_int(c, "EXISTS confkv-test:authed") == 1);
        redisFree(c);
        h_stop(&h);
    }
    /* a wrong password: never up; requests fail fast */
    snprintf(u0, sizeof u0, "redis://:wrong@127.0.0.1:%d", port);
    static harness h; /* static: a failed check returns with its loop thread still running */
    CK_CHECK(h_start(&h, u0, NULL) == 0);
    sleep_ms(300);
    cold_poll(h.s);
    CK_CHECK(stats(&h).up == 0);
    res r = {0};
    double t0 = now_s();
    CK_CHECK(h.s->ops->get(h.s, "authed", cb, &r) == 0);
    CK_CHECK(wait_res(&h, &r, 1, 1) && r.status == CK_EIO && now_s() - t0 < 0.1);
    h_stop(&h);
    stop_redis(&pid);
    /* a unix socket, no password */
    port = free_port();
    const char *extra2[] = {"--unixsocket", sock, "--unixsocketperm", "700", NULL};
    pid = g_pid2 = start_redis(port, extra2, NULL);
    CK_CHECK(pid > 0);
    CK_CHECK(h_start(&h, u2, NULL) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    res p = {0};
    CK_CHECK(h.s->ops->put(h.s, "sock", "v", 1, 0, cb, &p) == 0);
    CK_CHECK(wait_res(&h, &p, 1, 5) && p.status == 0);
    redisContext *c = sync_conn(port, NULL, 5);
    CK_CHECK(c && sync_int(c, "EXISTS confkv-test:sock") == 1);
    redisFree(c);
    h_stop(&h);
    stop_redis(&pid);
    g_pid2 = -1;
}

/* A server that stops answering (SIGSTOP): replies time out, the connection
 * is dropped, requests fail; after SIGCONT it comes back. */
static void test_stalled_server(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    svc_redis_config c;
    svc_redis_config_default(&c);
    c.timeout_ms = 300;
    CK_CHECK(h_start(&h, url, &c) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    kill(g_pid, SIGSTOP);
    res r = {0};
    double t0 = now_s();
    CK_CHECK(h.s->ops->put(h.s, "stall", "v", 1, 0, cb, &r) == 0);
    CK_CHECK(wait_res(&h, &r, 1, 2) && r.status == CK_EIO);
    double waited = now_s() - t0;
    CK_CHECK_MSG(waited < 0.7, "%.3f s", waited);
    CK_CHECK(stats(&h).timeouts == 1 && stats(&h).up == 0);
    kill(g_pid, SIGCONT);
    CK_CHECK(wait_up(&h, 1, 8));
    res g = {0};
    CK_CHECK(h.s->ops->put(h.s, "stall", "w", 1, 0, cb, &g) == 0);
    CK_CHECK(wait_res(&h, &g, 1, 5) && g.status == 0);
    CK_CHECK(stats(&h).reconnects >= 1);
    h.s->ops->del(h.s, "stall");
    h_stop(&h);
}

/* kill -9 mid-run: every request completes quickly (CK_EIO), nothing hangs;
 * after a restart on the same port the store is back by itself. */
static void test_kill9_and_reconnect(void) {
    static harness h; /* static: a failed check returns with its loop thread still running */
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    CK_CHECK(h_start(&h, url, NULL) == 0);
    CK_CHECK(wait_up(&h, 1, 5));
    unsigned char v[BLOCK];
    fill(v, sizeof v, 9);
    enum { N = 400 };
    res *r = calloc(N, sizeof *r);
    double *t_req = calloc(N, sizeof *t_req);
    CK_CHECK(r && t_req);
    /* a steady stream of puts and gets; the server dies in the middle */
    int killed_at = -1, ok_after = 0;
    for (int i = 0; i < N; i++) {
        char key[32];
        snprintf(key, sizeof key, "k9:%d", i % 50);
        t_req[i] = now_s();
        int rc =
            (i & 1) ? h.s->ops->get(h.s, key, cb, &r[i]) : h.s->ops->put(h.s, key, v, sizeof v, 0, cb, &r[i]);
        CK_CHECK(rc == 0 || rc == CK_EBUSY);
        if (rc) r[i].done = 1, r[i].t = t_req[i];
        if (i == N / 4) {
            kill(g_pid, SIGKILL);
            waitpid(g_pid, NULL, 0);
            g_pid = -1;
            killed_at = i;
        }
        cold_poll(h.s);
        sleep_ms(2);
    }
    CK_CHECK(wait_res(&h, r, N, 5));
    double worst = 0;
    for (int i = killed_at + 1; i < N; i++) {
        double d = r[i].t - t_req[i];
        if (d > worst) worst = d;
        ok_after += r[i].status == 0;
    }
    fprintf(stderr, "     kill -9: %d requests after, slowest answered in %.1f ms, %d ok\n",
            N - killed_at - 1, worst * 1e3, ok_after);
    CK_CHECK_MSG(worst < 0.5, "a request took %.3f s while Redis was down", worst);
    CK_CHECK(stats(&h).up == 0 && stats(&h).failures > 0);
    /* restart on the same port: back by itself */
    g_pid = start_redis(g_port, NULL, NULL);
    CK_CHECK(g_pid > 0);
    double t0 = now_s();
    CK_CHECK(wait_up(&h, 1, 8));
    fprintf(stderr, "     reconnected %.2f s after the restart\n", now_s() - t0);
    res p = {0}, g = {0};
    CK_CHECK(h.s->ops->put(h.s, "again", v, sizeof v, 0, cb, &p) == 0);
    CK_CHECK(wait_res(&h, &p, 1, 5) && p.status == 0);
    CK_CHECK(h.s->ops->get(h.s, "again", cb, &g) == 0);
    CK_CHECK(wait_res(&h, &g, 1, 5) && g.status == 0 && g.len == sizeof v && !memcmp(g.data, v, sizeof v));
    svc_redis_stats st = stats(&h);
    CK_CHECK(st.reconnects >= 1 && st.disconnects >= 1 && st.up == 1);
    for (int i = 0; i < N; i++) free(r[i].data);
    free(r);
    free(t_req);
    free(g.data);
    h_stop(&h);
}

/* ------------------------------------------------------------------------ */
/* the engine with Redis as its cold tier */

#define N_REQ 100
typedef struct outcome {
    char text[4096];
    int done, n_tok;
} outcome;

static eng *spill_engine(cold_store *cold, size_t hot, size_t warm) {
    eng_config c;
    eng_config_default(&c);
    c.model_path = ck_test_model_path("stories260K.bin");
    c.tokenizer_path = ck_test_model_path("tok512.bin");
    c.backend = "cpu";
    c.threads = 1;
    c.kv_budget_bytes = hot;
    c.warm_budget_bytes = warm;
    c.cold = cold;
    c.prefix_cache_off = 1; /* only the tiers at work here */
    kvpol_parse("full", &c.policy, NULL, 0);
    eng *e = NULL;
    char err[256];
    if (eng_new(&c, &e, err, sizeof err)) fprintf(stderr, "eng_new: %s\n", err);
    return e;
}

/* Step until idle, or (steps > 0) for that many steps. */
static int drive(eng *e, outcome *o, int steps) {
    eng_event ev[256];
    for (int it = 0; it < 2000000; it++) {
        eng_stats st;
        eng_get_stats(e, &st);
        if (steps && it >= steps) return 0;
        if (!steps && eng_idle(e)) return 0;
        int n = 0;
        if (eng_step(e, ev, 256, &n)) return -1;
        if (!n && !st.running) sleep_ms(1); /* waiting on Redis */
        for (int i = 0; i < n; i++) {
            outcome *x = &o[ev[i].user_tag];
            if (ev[i].type == ENG_EV_ERROR) return -1;
            if (ev[i].type == ENG_EV_FINISHED) {
                x->done = 1;
                x->n_tok = ev[i].result->n_tokens;
                snprintf(x->text, sizeof x->text, "%.*s", (int)ev[i].result->text_len, ev[i].result->text);
            }
        }
    }
    return -1;
}

/* 60 requests start; 40 of higher priority arrive and preempt them (policy
 * full never preempts for memory: it admits only what fits whole). */
static int spill_run(eng *e, outcome *o) {
    static const char *prompts[] = {"Lily saw a cat", "Once upon a time", "Tom had a big red", "The sun was"};
    memset(o, 0, N_REQ * sizeof *o);
    for (int i = 0; i < N_REQ; i++) {
        eng_request q;
        memset(&q, 0, sizeof q);
        samp_params_default(&q.samp);
        q.samp.temperature = 0;
        q.prompt = prompts[i % 4];
        q.prompt_len = strlen(q.prompt);
        q.max_tokens = 150 + i % 60;
        q.ignore_eos = 1;
        q.priority = i < 60 ? 0 : 5;
        q.user_tag = (uint64_t)i;
        uint64_t id;
        if (eng_submit(e, &q, &id, NULL, 0)) return -1;
        if (i == 59 && drive(e, o, 100)) return -1; /* the first wave is well under way */
    }
    return drive(e, o, 0);
}

static void test_engine_spills_to_redis(void) {
    harness h;
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", g_port);
    CK_CHECK(!h_start(&h, url, NULL));
    static outcome a[N_REQ], b[N_REQ];
    /* 120 blocks hot (two longest sequences), 12 warm: preempted blocks spill */
    eng *small = spill_engine(h.s, 120 * 5120, 12 * 5120), *big = spill_engine(NULL, 0, 0);
    int up = wait_up(&h, 1, 5), ra = small && big && up ? spill_run(small, a) : -1,
        rb = small && big && up ? spill_run(big, b) : -1;
    eng_stats st = {0};
    if (small) eng_get_stats(small, &st);
    svc_redis_stats rs = stats(&h);
    eng_free(small);
    eng_free(big);
    h_stop(&h);
    CK_CHECK(up && !ra && !rb);
    fprintf(stderr,
            "  %llu preemptions, %llu blocks spilled to Redis, %llu fetched back, %llu Redis GET hits\n",
            (unsigned long long)st.preemptions, (unsigned long long)st.cold_spills,
            (unsigned long long)st.cold_fetch_hits, (unsigned long long)rs.hits);
    CK_CHECK(st.preemptions > 0 && st.cold_spills > 0 && st.cold_fetch_hits > 0 && rs.hits > 0);
    CK_CHECK(st.integrity_failures == 0 && st.recomputes == 0);
    for (int i = 0; i < N_REQ; i++) {
        CK_CHECK(a[i].done && b[i].done);
        CK_CHECK_MSG(a[i].n_tok == b[i].n_tok && !strcmp(a[i].text, b[i].text), "request %d differs", i);
    }
}

int main(void) {
    CK_RUN(test_url);
    signal(SIGPIPE, SIG_IGN);
    svc_log_set_level(getenv("CONFKV_TEST_LOG") ? "debug" : "error");
    snprintf(g_dir, sizeof g_dir, "/tmp/confkv-redis-XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    g_port = free_port();
    atexit(kill_servers);
    g_pid = start_redis(g_port, NULL, NULL);
    if (g_pid <= 0) {
        fprintf(stderr, "redis-server missing or not starting: skipping the server tests\n");
        return ck_test_summary() ? 1 : 77;
    }
    CK_RUN(test_round_trip);
    CK_RUN(test_burst);
    CK_RUN(test_inflight_bound);
    CK_RUN(test_tier_corruption);
    CK_RUN(test_engine_spills_to_redis);
    CK_RUN(test_auth_db_unix);
    CK_RUN(test_stalled_server);
    CK_RUN(test_kill9_and_reconnect);
    stop_redis(&g_pid);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_dir);
    return ck_test_summary();
}
