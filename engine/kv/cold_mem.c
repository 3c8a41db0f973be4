/* cold_mem.c - an in-memory cold store (cold.h): a chained hash table plus a
 * queue of completions delivered by poll. It keeps the asynchronous contract
 * of the real store, so code tested against it behaves the same on Redis. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cold.h"

typedef struct mem_entry {
    struct mem_entry *next;
    char *key;
    void *val;
    size_t len;
    unsigned flags; /* of the last put (cold_mem_put_flags); nothing expires here */
} mem_entry;

typedef struct mem_req {
    struct mem_req *next;
    int op; /* 0 put, 1 get */
    char *key;
    int status;
    cold_cb cb;
    void *ud;
} mem_req;

#define MEM_BUCKETS 4096

typedef struct mem_store {
    cold_store base;
    mem_entry *bucket[MEM_BUCKETS];
    mem_req *head, *tail;
    size_t count, bytes;
    int fail_put, fail_get;
} mem_store;

static uint64_t hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static mem_entry **find(mem_store *m, const char *key) {
    mem_entry **e = &m->bucket[hash(key) % MEM_BUCKETS];
    while (*e && strcmp((*e)->key, key)) e = &(*e)->next;
    return e;
}

static int enqueue(mem_store *m, int op, const char *key, int status, cold_cb cb, void *ud) {
    mem_req *r = calloc(1, sizeof *r);
    if (!r || !(r->key = strdup(key))) {
        free(r);
        return CK_ENOMEM;
    }
    r->op = op;
    r->status = status;
    r->cb = cb;
    r->ud = ud;
    if (m->tail)
        m->tail->next = r;
    else
        m->head = r;
    m->tail = r;
    return CK_OK;
}

static int mem_put(cold_store *s, const char *key, const void *data, size_t len, unsigned flags, cold_cb cb,
                   void *ud) {
    mem_store *m = (mem_store *)s;
    int status = CK_OK;
    if (m->fail_put) {
        status = CK_EIO;
    } else {
        mem_entry **e = find(m, key);
        void *copy = malloc(len ? len : 1);
        if (!copy) return CK_ENOMEM;
        memcpy(copy, data, len);
        if (*e) {
            m->bytes -= (*e)->len;
            free((*e)->val);
        } else {
            mem_entry *n = calloc(1, sizeof *n);
            if (!n || !(n->key = strdup(key))) {
                free(n);
                free(copy);
                return CK_ENOMEM;
            }
            *e = n;
            m->count++;
        }
        (*e)->val = copy;
        (*e)->len = len;
        (*e)->flags = flags;
        m->bytes += len;
    }
    return enqueue(m, 0, key, status, cb, ud);
}

static int mem_get(cold_store *s, const char *key, cold_cb cb, void *ud) {
    mem_store *m = (mem_store *)s;
    return enqueue(m, 1, key, m->fail_get ? CK_EIO : CK_OK, cb, ud);
}

static int mem_del(cold_store *s, const char *key) {
    mem_store *m = (mem_store *)s;
    mem_entry **e = find(m, key);
    if (!*e) return CK_ENOTFOUND;
    mem_entry *d = *e;
    *e = d->next;
    m->count--;
    m->bytes -= d->len;
    free(d->key);
    free(d->val);
    free(d);
    return CK_OK;
}

static void mem_poll(cold_store *s) {
    mem_store *m = (mem_store *)s;
    /* Detach the queue first: callbacks may queue new requests, which are
     * delivered by the next poll. */
    mem_req *r = m->head;
    m->head = m->tail = NULL;
    while (r) {
        mem_req *next = r->next;
        if (r->op == 0) {
            if (r->cb) r->cb(r->ud, r->status, NULL, 0);
        } else if (r->status) {
            if (r->cb) r->cb(r->ud, r->status, NULL, 0);
        } else {
            mem_entry *e = *find(m, r->key);
            if (r->cb) {
                if (e)
                    r->cb(r->ud, CK_OK, e->val, e->len);
                else
                    r->cb(r->ud, CK_ENOTFOUND, NULL, 0);
            }
        }
        free(r->key);
        free(r);
        r = next;
    }
}

static void mem_destroy(cold_store *s) {
    mem_store *m = (mem_store *)s;
    if (!m) return;
    for (mem_req *r = m->head; r;) {
        mem_req *n = r->next;
        free(r->key);
        free(r);
        r = n;
    }
    for (int i = 0; i < MEM_BUCKETS; i++)
        for (mem_entry *e = m->bucket[i]; e;) {
            mem_entry *n = e->next;
            free(e->key);
            free(e->val);
            free(e);
            e = n;
        }
    free(m);
}

static const cold_ops mem_ops = {mem_put, mem_get, mem_del, mem_poll, mem_destroy};

int cold_mem_new(cold_store **out) {
    mem_store *m = calloc(1, sizeof *m);
    if (!m) return CK_ENOMEM;
    m->base.ops = &mem_ops;
    *out = &m->base;
    return CK_OK;
}

int cold_mem_put_flags(const cold_store *s, const char *key) {
    mem_entry *e = *find((mem_store *)s, key);
    return e ? (int)e->flags : CK_ENOTFOUND;
}

void cold_mem_set_failing(cold_store *s, int fail_put, int fail_get) {
    mem_store *m = (mem_store *)s;
    m->fail_put = fail_put;
    m->fail_get = fail_get;
}

size_t cold_mem_count(const cold_store *s) { return ((const mem_store *)s)->count; }
size_t cold_mem_bytes(const cold_store *s) { return ((const mem_store *)s)->bytes; }
