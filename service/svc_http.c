/* svc_http.c - HTTP/1.1 for the operational endpoints (svc_http.h). */
#include "svc_http.h"

#include <http_parser.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"

#define MAX_URL 1024
#define MAX_REQUEST 16384
#define MAX_BODY 8192
#define MAX_CONNS 64
#define CONN_TIMEOUT_MS 10000

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    http_parser parser;
    struct svc_http *srv;
    struct conn *prev, *next;
    char url[MAX_URL + 1];
    size_t url_len, got;
    char body[MAX_BODY + 1];
    size_t body_len;
    int url_too_long, body_too_long, complete, replied, open_handles;
    char *out; /* the reply being written: out_len bytes, not NUL-terminated */
    size_t out_len;
} conn;

struct svc_http {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port, n_conns, closing, listener_open;
    conn *conns;
    svc_http_handler handler;
    void *ud;
    http_parser_settings settings;
};

static void maybe_free_server(svc_http *s) {
    if (s->closing && !s->listener_open && !s->conns) free(s);
}

static void conn_closed(uv_handle_t *h) {
    conn *c = h->data;
    if (--c->open_handles) return;
    svc_http *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    free(c->out);
    free(c);
    maybe_free_server(s);
}

static void conn_close(conn *c) {
    if (uv_is_closing((uv_handle_t *)&c->tcp)) return;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void write_cb(uv_write_t *req, int status) { conn_close(req->data); }

static void reply(conn *c, int status, const char *ctype, const char *body, size_t len) {
    if (c->replied) return;
    c->replied = 1;
    const char *reason = status == 200   ? "OK"
                         : status == 400 ? "Bad Request"
                         : status == 404 ? "Not Found"
                         : status == 405 ? "Method Not Allowed"
                         : status == 413 ? "Content Too Large"
                         : status == 414 ? "URI Too Long"
                         : status == 503 ? "Service Unavailable"
                                         : "Error";
    char head[256];
    int hl =
        snprintf(head, sizeof head,
                 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                 status, reason, ctype, len);
    c->out = malloc((size_t)hl + len);
    if (!c->out) {
        conn_close(c);
        return;
    }
    memcpy(c->out, head, (size_t)hl);
    if (len) memcpy(c->out + hl, body, len);
    c->out_len = (size_t)hl + len;
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->out_len);
    c->wr.data = c;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, write_cb)) conn_close(c);
}

static void reply_text(conn *c, int status, const char *text) {
    reply(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

static int on_url(http_parser *p, const char *at, size_t len) {
    conn *c = p->data;
    if (c->url_len + len > MAX_URL) {
        c->url_too_long = 1;
        return 0;
    }
    memcpy(c->url + c->url_len, at, len);
    c->url_len += len;
    c->url[c->url_len] = 0;
    return 0;
}

static int on_body(http_parser *p, const char *at, size_t len) {
    conn *c = p->data;
    if (c->body_len + len > MAX_BODY) {
        c->body_too_long = 1;
        return 0;
    }
    memcpy(c->body + c->body_len, at, len);
    c->body_len += len;
    c->body[c->body_len] = 0;
    return 0;
}

static int on_complete(http_parser *p) {
    conn *c = p->data;
    c->complete = 1;
    return 1; /* stop parsing: one request per connection */
}

static void handle(conn *c) {
    if (c->url_too_long) return reply_text(c, 414, "URI too long\n");
    if (c->body_too_long) return reply_text(c, 413, "body too large\n");
    const char *method = http_method_str((enum http_method)c->parser.method);
    if (c->parser.method != HTTP_GET && c->parser.method != HTTP_HEAD && c->parser.method != HTTP_POST)
        return reply_text(c, 405, "GET, HEAD or POST only\n");
    /* the path without the query */
    char path[MAX_URL + 1];
    size_t n = strcspn(c->url, "?#");
    memcpy(path, c->url, n);
    path[n] = 0;
    const char *query = c->url[n] == '?' ? c->url + n + 1 : "";
    char qbuf[MAX_URL + 1];
    snprintf(qbuf, sizeof qbuf, "%.*s", (int)strcspn(query, "#"), query);
    svc_http_req q = {method, path, qbuf, c->body, c->body_len};
    svc_http_resp r = {404, "text/plain; charset=utf-8", NULL, 0};
    c->srv->handler(c->srv->ud, &q, &r);
    if (!r.body) {
        const char *t = r.status == 404 ? "not found\n" : r.status == 200 ? "ok\n" : "unavailable\n";
        reply_text(c, r.status, t);
        return;
    }
    reply(c, r.status, r.content_type, r.body, c->parser.method == HTTP_HEAD ? 0 : r.len);
    free(r.body);
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
    static char slab[4096]; /* the loop is single-threaded; data is parsed before the next read */
    (void)h;
    (void)suggested;
    *b = uv_buf_init(slab, sizeof slab);
}

static void read_cb(uv_stream_t *st, ssize_t nread, const uv_buf_t *b) {
    conn *c = st->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    if (nread == 0 || c->replied) return;
    c->got += (size_t)nread;
    if (c->got > MAX_REQUEST) return reply_text(c, 400, "request too large\n");
    size_t used = http_parser_execute(&c->parser, &c->srv->settings, b->base, (size_t)nread);
    if (c->complete) return handle(c);
    if (HTTP_PARSER_ERRNO(&c->parser) != HPE_OK || used != (size_t)nread) reply_text(c, 400, "bad request\n");
}

static void timeout_cb(uv_timer_t *t) { conn_close(t->data); }

static void accept_cb(uv_stream_t *ls, int status) {
    svc_http *s = ls->data;
    if (status < 0) return;
    conn *c = calloc(1, sizeof *c);
    if (!c) return;
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp)) {
        conn_close(c);
        return;
    }
    if (s->n_conns > MAX_CONNS || s->closing) {
        reply_text(c, 503, "too many connections\n");
        return;
    }
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    uv_timer_start(&c->timer, timeout_cb, CONN_TIMEOUT_MS, 0);
    uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

int svc_http_start(uv_loop_t *loop, const char *host, int port, svc_http_handler h, void *ud, svc_http **out,
                   char *err, size_t errlen) {
    *out = NULL;
    struct sockaddr_storage addr;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&addr) &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&addr)) {
        snprintf(err, errlen, "http: '%s' is not an IP address", host);
        return CK_EINVAL;
    }
    svc_http *s = calloc(1, sizeof *s);
    if (!s) return CK_ENOMEM;
    s->loop = loop;
    s->handler = h;
    s->ud = ud;
    s->settings.on_url = on_url;
    s->settings.on_body = on_body;
    s->settings.on_message_complete = on_complete;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    s->listener_open = 1;
    int rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0);
    if (!rc) rc = uv_listen((uv_stream_t *)&s->listener, 64, accept_cb);
    if (rc) {
        snprintf(err, errlen, "http: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        svc_http_close(s);
        return CK_EIO;
    }
    struct sockaddr_storage got;
    int len = sizeof got;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&got, &len);
    s->port = ntohs(got.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&got)->sin6_port
                                              : ((struct sockaddr_in *)&got)->sin_port);
    *out = s;
    return 0;
}

int svc_http_port(const svc_http *s) { return s->port; }

static void listener_closed(uv_handle_t *h) {
    svc_http *s = h->data;
    s->listener_open = 0;
    maybe_free_server(s);
}

void svc_http_close(svc_http *s) {
    if (!s || s->closing) return;
    s->closing = 1;
    for (conn *c = s->conns; c; c = c->next) conn_close(c);
    uv_close((uv_handle_t *)&s->listener, listener_closed);
}
