/* cli_http.c - a blocking HTTP/1.1 client for the CLI (cli_http.h). */
#include "cli_http.h"

#include <errno.h>
#include <http_parser.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ck_err.h"

/* Split "host:port" / "[v6]:port". 0 or CK_EINVAL. */
static int split_hostport(const char *hp, char *host, size_t hcap, char *port, size_t pcap) {
    const char *colon;
    size_t hn;
    if (hp[0] == '[') {
        const char *close = strchr(hp, ']');
        if (!close || close[1] != ':') return CK_EINVAL;
        hp++;
        hn = (size_t)(close - hp);
        colon = close + 1;
    } else {
        colon = strrchr(hp, ':');
        /* More than one colon without brackets: an IPv6 address whose port
         * cannot be told apart. */
        if (!colon || memchr(hp, ':', (size_t)(colon - hp))) return CK_EINVAL;
        hn = (size_t)(colon - hp);
    }
    if (hn == 0 || hn >= hcap) return CK_EINVAL;
    const char *p = colon + 1;
    size_t pn = strlen(p);
    if (pn == 0 || pn >= pcap || pn > 5) return CK_EINVAL;
    long v = 0;
    for (size_t i = 0; i < pn; i++) {
        if (p[i] < '0' || p[i] > '9') return CK_EINVAL;
        v = v * 10 + (p[i] - '0');
    }
    if (v < 1 || v > 65535) return CK_EINVAL;
    memcpy(host, hp, hn);
    host[hn] = 0;
    memcpy(port, p, pn + 1);
    return CK_OK;
}

/* Connect to the first address that answers. Returns 0 and the socket in
 * *out; CK_EINVAL (not HOST:PORT) or CK_EIO with err filled. */
static int dial(const char *hostport, int timeout_ms, int *out, char *err, size_t errlen) {
    char host[256], port[8];
    *out = -1;
    if (split_hostport(hostport, host, sizeof host, port, sizeof port)) {
        snprintf(err, errlen, "'%s' is not HOST:PORT", hostport);
        return CK_EINVAL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV},
                    *ai;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g) {
        snprintf(err, errlen, "cannot resolve %s: %s", host, gai_strerror(g));
        return CK_EIO;
    }
    /* SO_SNDTIMEO bounds connect() too (Linux), so one timeout covers all. */
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    int fd = -1, last = 0;
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        if (setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) ||
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) ||
            connect(fd, a->ai_addr, a->ai_addrlen)) {
            last = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s: %s", hostport,
                 last == EINPROGRESS || last == EAGAIN ? "timed out" : strerror(last));
        return CK_EIO;
    }
    *out = fd;
    return CK_OK;
}

static int send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct reply_state {
    char *body;
    size_t len, cap, max;
    int done, too_long, oom;
} reply_state;

static int on_body(http_parser *p, const char *at, size_t n) {
    reply_state *s = p->data;
    if (n > s->max - s->len) {
        s->too_long = 1;
        return 1; /* stops the parser */
    }
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n + 1) cap *= 2;
        char *b = realloc(s->body, cap);
        if (!b) {
            s->oom = 1;
            return 1;
        }
        s->body = b;
        s->cap = cap;
    }
    memcpy(s->body + s->len, at, n);
    s->len += n;
    return 0;
}

static int on_complete(http_parser *p) {
    ((reply_state *)p->data)->done = 1;
    return 0;
}

int cli_http_read_reply(int fd, const char *who, size_t max_reply, int *status, char **reply,
                        size_t *reply_len, char *err, size_t errlen) {
    *reply = NULL;
    *reply_len = 0;
    *status = 0;
    int rc = CK_OK;
    reply_state s = {.max = max_reply};
    http_parser p;
    http_parser_init(&p, HTTP_RESPONSE);
    p.data = &s;
    http_parser_settings cb;
    http_parser_settings_init(&cb);
    cb.on_body = on_body;
    cb.on_message_complete = on_complete;
    char buf[16384];
    while (!s.done) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            snprintf(err, errlen, "%s: %s", who,
                     errno == EAGAIN || errno == EWOULDBLOCK ? "no reply within the timeout"
                                                             : strerror(errno));
            rc = CK_EIO;
            break;
        }
        /* n == 0 tells the parser about EOF: a body without a length ends there. */
        size_t used = http_parser_execute(&p, &cb, buf, (size_t)n);
        if (s.too_long || s.oom) {
            snprintf(err, errlen, "%s: %s", who, s.oom ? "out of memory" : "reply body too long");
            rc = s.oom ? CK_ENOMEM : CK_ETOOLONG;
            break;
        }
        if (HTTP_PARSER_ERRNO(&p) != HPE_OK || used != (size_t)n) {
            snprintf(err, errlen, "%s: not an HTTP reply (%s)", who,
                     http_errno_description(HTTP_PARSER_ERRNO(&p)));
            rc = CK_EFORMAT;
            break;
        }
        if (n == 0 && !s.done) {
            snprintf(err, errlen, "%s: the connection closed before the reply was complete", who);
            rc = CK_EIO;
            break;
        }
    }
    if (rc) {
        free(s.body);
        return rc;
    }
    /* http-parser takes one to three digits; HTTP's codes are 100..599
     * (RFC 9110), and a caller must never see 0, "no status". */
    if (p.status_code < 100 || p.status_code > 599) {
        snprintf(err, errlen, "%s: not an HTTP reply (status %u)", who, p.status_code);
        free(s.body);
        return CK_EFORMAT;
    }
    if (!s.body && !(s.body = malloc(1))) return CK_ENOMEM;
    s.body[s.len] = 0;
    *status = (int)p.status_code;
    *reply = s.body;
    *reply_len = s.len;
    return CK_OK;
}

/* One request: method with a body (POST) or without (GET, body NULL). */
static int request(const char *method, const char *hostport, const char *path, const char *ctype,
                   const char *body, size_t len, int timeout_ms, size_t max_reply, int *status, char **reply,
                   size_t *reply_len, char *err, size_t errlen) {
    *reply = NULL;
    *reply_len = 0;
    *status = 0;
    if (!path || path[0] != '/') {
        snprintf(err, errlen, "bad path");
        return CK_EINVAL;
    }
    for (const char *c = path; *c; c++)
        if ((unsigned char)*c <= 0x20 || *c == 0x7f) {
            snprintf(err, errlen, "bad path");
            return CK_EINVAL;
        }
    int fd, rc = dial(hostport, timeout_ms, &fd, err, errlen);
    if (rc) return rc;

    char head[1536];
    int h = body ? snprintf(head, sizeof head,
                            "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                            "Connection: close\r\n\r\n",
                            method, path, hostport, ctype, len)
                 : snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
                            method, path, hostport);
    if (h < 0 || (size_t)h >= sizeof head) {
        close(fd);
        snprintf(err, errlen, "request head too long");
        return CK_EINVAL;
    }
    if (send_all(fd, head, (size_t)h) || (body && send_all(fd, body, len))) {
        snprintf(err, errlen, "%s: cannot send the request: %s", hostport,
                 errno == EAGAIN ? "timed out" : strerror(errno));
        close(fd);
        return CK_EIO;
    }

    rc = cli_http_read_reply(fd, hostport, max_reply, status, reply, reply_len, err, errlen);
    close(fd);
    return rc;
}

int cli_http_post(const char *hostport, const char *path, const char *ctype, const char *body, size_t len,
                  int timeout_ms, size_t max_reply, int *status, char **reply, size_t *reply_len, char *err,
                  size_t errlen) {
    return request("POST", hostport, path, ctype, body ? body : "", len, timeout_ms, max_reply, status, reply,
                   reply_len, err, errlen);
}

int cli_http_get(const char *hostport, const char *path, int timeout_ms, size_t max_reply, int *status,
                 char **reply, size_t *reply_len, char *err, size_t errlen) {
    return request("GET", hostport, path, NULL, NULL, 0, timeout_ms, max_reply, status, reply, reply_len, err,
                   errlen);
}
