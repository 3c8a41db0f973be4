/* fuzz_http.c - HTTP bytes from the network: requests to confkvd's server
 * (svc_http.c) and replies to the CLI's client (cli_http.c).
 *
 * Input: byte 0 bit 7 picks the side. Server side: the rest is what a client
 * sends on one connection, delivered in reads of (byte 0 & 0x7f) bytes (0:
 * the server's 4 KiB slab), then EOF. The server code runs as it is (this
 * file includes svc_http.c, to reach its static connection callbacks) on a
 * connection without a socket: its reply is built and then its write fails,
 * which closes the connection as a closed peer would. Checked: the handler
 * sees only GET/HEAD/POST with NUL-terminated strings inside the limits of
 * svc_http.h; any reply is a well-formed HTTP response (http-parser parses it
 * to completion with the Content-Length it declares); every connection is
 * freed. Client side: the rest is the reply, read by cli_http_read_reply from
 * a socketpair; checked: the documented codes, and a body within max_reply,
 * NUL-terminated. */
#include <sys/socket.h>

#include "cli_http.h"
#include "fuzz.h"
#include "svc_http.c"

/* libFuzzer gives a harness no context pointer: one loop and one server
 * object live for the whole run, as in confkvd. */
static uv_loop_t loop;
static svc_http srv;
static int handled;

static void handler(void *ud, const svc_http_req *q, svc_http_resp *r) {
    handled++;
    FUZZ_CHECK(!strcmp(q->method, "GET") || !strcmp(q->method, "HEAD") || !strcmp(q->method, "POST"));
    FUZZ_CHECK(strlen(q->path) <= MAX_URL && strlen(q->query) <= MAX_URL);
    FUZZ_CHECK(!strpbrk(q->path, "?#") && !strchr(q->query, '#'));
    FUZZ_CHECK(q->body_len <= MAX_BODY && q->body[q->body_len] == 0);
    if (!strcmp(q->path, "/echo")) {
        /* a body of the handler's own: the query and the request body */
        size_t ql = strlen(q->query);
        r->status = 200;
        r->content_type = "application/octet-stream";
        r->body = malloc(ql + q->body_len + 1);
        FUZZ_CHECK(r->body != NULL);
        memcpy(r->body, q->query, ql);
        memcpy(r->body + ql, q->body, q->body_len);
        r->len = ql + q->body_len;
    } else if (!strcmp(q->path, "/ok")) {
        r->status = 200;
    } else if (!strcmp(q->path, "/busy")) {
        r->status = 503;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    uv_loop_init(&loop);
    srv.loop = &loop;
    srv.handler = handler;
    srv.settings.on_url = on_url;
    srv.settings.on_body = on_body;
    srv.settings.on_message_complete = on_complete;
    return 0;
}

static int resp_done;
static int resp_complete(http_parser *p) {
    resp_done = 1;
    return 0;
}

/* The reply in c->out (out_len bytes, no NUL: a search must stay inside
 * them): head, then exactly Content-Length bytes, and nothing after. */
static void check_reply(const conn *c) {
    const char *end = memmem(c->out, c->out_len, "\r\n\r\n", 4);
    FUZZ_CHECK(end != NULL);
    size_t hlen = (size_t)(end + 4 - c->out);
    const char *cl = memmem(c->out, hlen, "Content-Length: ", 16);
    FUZZ_CHECK(cl != NULL);
    size_t blen = 0;
    for (const char *d = cl + 16; d < end && *d >= '0' && *d <= '9'; d++)
        blen = blen * 10 + (size_t)(*d - '0');
    size_t total = hlen + blen;
    FUZZ_CHECK(total == c->out_len);
    http_parser p;
    http_parser_init(&p, HTTP_RESPONSE);
    http_parser_settings s;
    http_parser_settings_init(&s);
    s.on_message_complete = resp_complete;
    resp_done = 0;
    size_t used = http_parser_execute(&p, &s, c->out, total);
    FUZZ_CHECK(used == total && HTTP_PARSER_ERRNO(&p) == HPE_OK && resp_done);
    FUZZ_CHECK(p.status_code >= 200 && p.status_code <= 503);
}

static void server_side(const uint8_t *data, size_t size, size_t chunk) {
    conn *c = calloc(1, sizeof *c);
    FUZZ_CHECK(c != NULL);
    c->srv = &srv;
    uv_tcp_init(&loop, &c->tcp);
    uv_timer_init(&loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    c->next = srv.conns;
    if (srv.conns) srv.conns->prev = c;
    srv.conns = c;
    srv.n_conns++;
    http_parser_init(&c->parser, HTTP_REQUEST);
    c->parser.data = c;
    handled = 0;
    for (size_t off = 0; off < size && !c->replied;) {
        size_t n = size - off < chunk ? size - off : chunk;
        char *b = malloc(n); /* exactly n bytes: ASan sees an overread */
        FUZZ_CHECK(b != NULL);
        memcpy(b, data + off, n);
        uv_buf_t buf = uv_buf_init(b, (unsigned)n);
        read_cb((uv_stream_t *)&c->tcp, (ssize_t)n, &buf);
        free(b);
        off += n;
    }
    FUZZ_CHECK(handled <= 1);
    if (c->replied) {
        if (c->out) check_reply(c);
    } else {
        FUZZ_CHECK(handled == 0);
        read_cb((uv_stream_t *)&c->tcp, UV_EOF, NULL);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    FUZZ_CHECK(srv.conns == NULL && srv.n_conns == 0);
}

static void client_side(const uint8_t *data, size_t size) {
    int sv[2];
    if (size > 65536 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) return;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(sv[0], data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(sv[0]); /* EOF after the reply, as the server's Connection: close */
    if (off == size) {
        int status = -1;
        char *reply = NULL, err[256];
        size_t rlen = 0, max = 4096;
        err[0] = 0;
        int rc = cli_http_read_reply(sv[1], "fuzz", max, &status, &reply, &rlen, err, sizeof err);
        FUZZ_CHECK(rc == 0 || rc == CK_EIO || rc == CK_EFORMAT || rc == CK_ETOOLONG || rc == CK_ENOMEM);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        if (rc == 0) {
            FUZZ_CHECK(reply && rlen <= max && rlen <= size && reply[rlen] == 0);
            FUZZ_CHECK(status >= 100 && status <= 599);
        } else {
            FUZZ_CHECK(reply == NULL && rlen == 0);
        }
        free(reply);
    }
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 0x80)
        client_side(data + 1, size - 1);
    else
        server_side(data + 1, size - 1, data[0] ? data[0] : 4096);
    return 0;
}
