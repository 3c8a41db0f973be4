/* cli_broker.c - `confkv broker`: librdkafka's mock cluster as a standalone
 * process (svc_broker.h), for tests and demos in which confkvd restarts. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "cli.h"
#include "svc_broker.h"

static void help(void) {
    printf("usage: confkv broker [--partitions N] [--ready-file PATH] [--port P] [--topic T]...\n\n"
           "Runs an in-memory Kafka broker (librdkafka's mock cluster) until SIGTERM/SIGINT,\n"
           "with confkvd's topics created (confkv.jobs, confkv.results, confkv.metrics, confkv.dlq,\n"
           "confkv.stream).\n"
           "  --partitions N    partitions per topic (default 4)\n"
           "  --ready-file P    write {\"bootstrap_servers\": \"host:port\"} there once ready\n"
           "  --port P          also accept bootstrap connections on 127.0.0.1:P (forwarded\n"
           "                    to the broker; clients then follow its advertised address)\n"
           "  --topic T         create T too (repeatable, up to 16)\n"
           "Data lives in memory and is lost when the process exits.\n");
}

/* --port: a TCP forwarder from a fixed port to the mock broker's own. */
typedef struct fwd {
    uv_tcp_t a, b; /* client side, broker side */
    uv_connect_t conn;
    int closed;
} fwd;

typedef struct wreq {
    uv_write_t w;
    char *buf;
} wreq;

static struct sockaddr_in broker_addr;

static void fwd_closed(uv_handle_t *h) {
    fwd *f = h->data;
    if (++f->closed == 2) free(f);
}

static void fwd_close(fwd *f) {
    if (!uv_is_closing((uv_handle_t *)&f->a)) uv_close((uv_handle_t *)&f->a, fwd_closed);
    if (!uv_is_closing((uv_handle_t *)&f->b)) uv_close((uv_handle_t *)&f->b, fwd_closed);
}

static void alloc_cb(uv_handle_t *h, size_t sz, uv_buf_t *b) {
    (void)h;
    b->base = malloc(sz);
    b->len = b->base ? sz : 0;
}

static void write_done(uv_write_t *w, int status) {
    wreq *r = (wreq *)w;
    free(r->buf);
    free(r);
}

static void relay(uv_stream_t *from, ssize_t n, const uv_buf_t *b) {
    fwd *f = from->data;
    uv_stream_t *to = from == (uv_stream_t *)&f->a ? (uv_stream_t *)&f->b : (uv_stream_t *)&f->a;
    if (n < 0) {
        free(b->base);
        fwd_close(f);
        return;
    }
    if (n == 0) {
        free(b->base);
        return;
    }
    wreq *r = malloc(sizeof *r);
    if (!r) {
        free(b->base);
        fwd_close(f);
        return;
    }
    r->buf = b->base;
    uv_buf_t out = uv_buf_init(b->base, (unsigned)n);
    if (uv_write(&r->w, to, &out, 1, write_done)) {
        free(r->buf);
        free(r);
        fwd_close(f);
    }
}

static void connected(uv_connect_t *c, int status) {
    fwd *f = c->data;
    if (status < 0) {
        fwd_close(f);
        return;
    }
    uv_read_start((uv_stream_t *)&f->a, alloc_cb, relay);
    uv_read_start((uv_stream_t *)&f->b, alloc_cb, relay);
}

static void on_accept(uv_stream_t *ls, int status) {
    if (status < 0) return;
    fwd *f = calloc(1, sizeof *f);
    if (!f) return;
    uv_tcp_init(ls->loop, &f->a);
    uv_tcp_init(ls->loop, &f->b);
    f->a.data = f->b.data = f->conn.data = f;
    if (uv_accept(ls, (uv_stream_t *)&f->a) ||
        uv_tcp_connect(&f->conn, &f->b, (struct sockaddr *)&broker_addr, connected))
        fwd_close(f);
}

static void on_signal(uv_signal_t *h, int sig) { uv_stop(h->loop); }

int cli_broker(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "broker", 0};
    int partitions = 4, port = -1;
    const char *ready = NULL, *t = NULL;
    const char *topics[21] = {"confkv.jobs", "confkv.results", "confkv.metrics", "confkv.dlq",
                              "confkv.stream"};
    int n_topics = 5;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_int(&a, "--partitions", 1, 1024, &partitions) || cli_str(&a, "--ready-file", &ready) ||
            cli_int(&a, "--port", 0, 65535, &port))
            continue;
        if (cli_str(&a, "--topic", &t)) {
            if (n_topics == 21) {
                cli_error(&a, "at most 16 --topic");
                return 2;
            }
            if (t) topics[n_topics++] = t;
            continue;
        }
        return cli_unknown(&a);
    }
    if (a.bad) return 2;
    signal(SIGPIPE, SIG_IGN);
    char err[512];
    svc_broker *b = NULL;
    if (svc_broker_start(partitions, topics, n_topics, &b, err, sizeof err)) {
        cli_error(&a, "%s", err);
        return 1;
    }
    const char *boot = svc_broker_bootstraps(b);
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_tcp_t ls;
    char boot_out[300];
    snprintf(boot_out, sizeof boot_out, "%s", boot);
    if (port >= 0) {
        const char *colon = strrchr(boot, ':');
        uv_ip4_addr("127.0.0.1", colon ? atoi(colon + 1) : 0, &broker_addr);
        struct sockaddr_in la;
        uv_ip4_addr("127.0.0.1", port, &la);
        uv_tcp_init(&loop, &ls);
        int rc = uv_tcp_bind(&ls, (struct sockaddr *)&la, 0);
        if (!rc) rc = uv_listen((uv_stream_t *)&ls, 64, on_accept);
        if (rc) {
            cli_error(&a, "--port %d: %s", port, uv_strerror(rc));
            svc_broker_stop(b);
            return 1;
        }
        struct sockaddr_in got;
        int len = sizeof got;
        uv_tcp_getsockname(&ls, (struct sockaddr *)&got, &len);
        snprintf(boot_out, sizeof boot_out, "127.0.0.1:%d", ntohs(got.sin_port));
    }
    printf("confkv broker: bootstrap servers %s (%d partitions per topic)\n", boot_out, partitions);
    fflush(stdout);
    if (ready) {
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", ready);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "{\"bootstrap_servers\": \"%s\"}\n", boot_out) < 0 || fclose(f) ||
            rename(tmp, ready)) {
            cli_error(&a, "cannot write %s", ready);
            svc_broker_stop(b);
            return 1;
        }
    }
    uv_signal_t st, si;
    uv_signal_init(&loop, &st);
    uv_signal_init(&loop, &si);
    uv_signal_start(&st, on_signal, SIGTERM);
    uv_signal_start(&si, on_signal, SIGINT);
    uv_run(&loop, UV_RUN_DEFAULT);
    fprintf(stderr, "confkv broker: stopping\n");
    svc_broker_stop(b);
    return 0;
}
