/* svc_http.h - a tiny HTTP/1.1 server on libuv for /metrics, /healthz,
 * /readyz and the few POSTs confkvd takes (/templates/prewarm).
 *
 * Requests are parsed by http-parser (Debian's libhttp-parser); one request
 * per connection (the reply says Connection: close). Limits: URL 1 KiB,
 * body 8 KiB, request 16 KiB, 64 connections at once, 10 s per connection; anything
 * over them is answered 400/414/503 or closed. The handler runs on the loop
 * and must not block.
 *
 * Ownership: the handler fills svc_http_resp; body is malloc'd and taken by
 * the server. svc_http_close closes the listener and every connection; the
 * server frees itself once the loop has run their close callbacks. */
#ifndef CK_SVC_HTTP_H
#define CK_SVC_HTTP_H
#include <stddef.h>
#include <uv.h>

typedef struct svc_http_resp {
    int status;               /* 200, 404, 503, ... */
    const char *content_type; /* static string */
    char *body;               /* malloc'd (taken), may be NULL */
    size_t len;
} svc_http_resp;

/* A request: GET, HEAD or POST (others are answered 405 before the
 * handler). Every string is NUL-terminated and valid during the call. */
typedef struct svc_http_req {
    const char *method;
    const char *path;  /* without the query */
    const char *query; /* after '?', "" when none */
    const char *body;  /* POST body (body_len bytes), "" when none */
    size_t body_len;
} svc_http_req;

typedef void (*svc_http_handler)(void *ud, const svc_http_req *q, svc_http_resp *r);

typedef struct svc_http svc_http;

/* Listen on host:port (port 0: any free port). */
int svc_http_start(uv_loop_t *loop, const char *host, int port, svc_http_handler h, void *ud, svc_http **out,
                   char *err, size_t errlen);
int svc_http_port(const svc_http *s);
void svc_http_close(svc_http *s);

#endif
