/* cli_redis.c - a blocking Redis connection for the CLI (cli_redis.h). */
#include "cli_redis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "ck_err.h"
#include "svc_redis.h"

/* An error reply's text, bounded: Redis is not trusted to send a short one. */
static int reply_text_len(const redisReply *rep) {
    return rep->str ? (int)(rep->len < 200 ? rep->len : 200) : 0;
}

/* A handshake step must answer +OK. */
static int handshake(cli_redis *r, const char *what, int argc, const char **argv, const size_t *lens,
                     char *err, size_t errlen) {
    redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
    if (!rep) {
        snprintf(err, errlen, "redis %s: %s: %s", r->where, what, r->c->errstr);
        return CK_EIO;
    }
    int ok = rep->type == REDIS_REPLY_STATUS && rep->len == 2 && rep->str && !memcmp(rep->str, "OK", 2);
    if (!ok)
        snprintf(err, errlen, "redis %s: %s refused: %.*s", r->where, what,
                 rep->type == REDIS_REPLY_ERROR || rep->type == REDIS_REPLY_STATUS ? reply_text_len(rep) : 0,
                 rep->str ? rep->str : "");
    freeReplyObject(rep);
    return ok ? CK_OK : CK_EIO;
}

int cli_redis_open(cli_redis *r, const char *url, int timeout_ms, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    svc_redis_url u;
    int rc = svc_redis_parse_url(url, &u, err, errlen);
    if (rc) return CK_EINVAL;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (u.is_unix) {
        snprintf(r->where, sizeof r->where, "%s", u.path);
        r->c = redisConnectUnixWithTimeout(u.path, tv);
    } else {
        /* An IPv6 address goes back in brackets so the port stays readable. */
        snprintf(r->where, sizeof r->where, strchr(u.host, ':') ? "[%s]:%d" : "%s:%d", u.host, u.port);
        r->c = redisConnectWithTimeout(u.host, u.port, tv);
    }
    if (!r->c) {
        snprintf(err, errlen, "redis %s: out of memory", r->where);
        return CK_ENOMEM;
    }
    if (r->c->err) {
        snprintf(err, errlen, "cannot connect to redis at %s: %s", r->where, r->c->errstr);
        rc = CK_EIO;
        goto fail;
    }
    /* The connect timeout bounds every reply too: a stalled server fails the
     * command instead of hanging the CLI. */
    if (redisSetTimeout(r->c, tv) != REDIS_OK) {
        snprintf(err, errlen, "redis %s: cannot set the reply timeout", r->where);
        rc = CK_EIO;
        goto fail;
    }
    if (u.password[0]) { /* AUTH [user] password: the user form for ACL users */
        const char *argv[3] = {"AUTH", u.user, u.password};
        size_t lens[3] = {4, strlen(u.user), strlen(u.password)};
        if (!u.user[0]) {
            argv[1] = argv[2];
            lens[1] = lens[2];
        }
        if ((rc = handshake(r, "AUTH", u.user[0] ? 3 : 2, argv, lens, err, errlen))) goto fail;
    }
    if (u.db) {
        char db[16];
        snprintf(db, sizeof db, "%d", u.db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        if ((rc = handshake(r, "SELECT", 2, argv, lens, err, errlen))) goto fail;
    }
    return CK_OK;
fail:
    cli_redis_close(r);
    return rc;
}

void cli_redis_close(cli_redis *r) {
    if (r->c) redisFree(r->c);
    r->c = NULL;
}

int cli_redis_cmd(cli_redis *r, int argc, const char **argv, const size_t *lens, redisReply **out, char *err,
                  size_t errlen) {
    *out = NULL;
    if (!r->c) {
        snprintf(err, errlen, "redis: not connected");
        return CK_EIO;
    }
    redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
    if (!rep) {
        snprintf(err, errlen, "redis %s: %s: %s", r->where, argv[0],
                 r->c->errstr[0] ? r->c->errstr : "no reply");
        return CK_EIO;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        snprintf(err, errlen, "redis %s: %s: %.*s", r->where, argv[0], reply_text_len(rep),
                 rep->str ? rep->str : "");
        freeReplyObject(rep);
        return CK_EIO;
    }
    *out = rep;
    return CK_OK;
}

int cli_redis_int(const redisReply *rep, long long *out) {
    if (!rep || rep->type != REDIS_REPLY_INTEGER) return CK_EFORMAT;
    *out = rep->integer;
    return CK_OK;
}

int cli_redis_score(const redisReply *rep, int64_t *out, int *present) {
    *out = 0;
    *present = 0;
    if (!rep) return CK_EFORMAT;
    if (rep->type == REDIS_REPLY_NIL) return CK_OK;
    /* RESP2 sends scores as bulk strings ("3", "1e+20", "inf"); a use count
     * is whole and far below 2^53, where doubles stop being exact. */
    char buf[64];
    if (rep->type != REDIS_REPLY_STRING || !rep->str || rep->len == 0 || rep->len >= sizeof buf)
        return CK_EFORMAT;
    memcpy(buf, rep->str, rep->len);
    buf[rep->len] = 0;
    char *end;
    double v = strtod(buf, &end);
    if (*end || !isfinite(v) || v < 0 || v > 9007199254740992.0 || v != floor(v)) return CK_EFORMAT;
    *out = (int64_t)v;
    *present = 1;
    return CK_OK;
}
