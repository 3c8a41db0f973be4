/* eng_stats.c - eng_get_stats: the engine's counters (eng.st) with the
 * figures that live in its parts filled in at the time of the call: pools,
 * tiers, the prefix cache, sessions, templates, the breaker, thresholds. */
#include "eng_int.h"
#include "engine.h"
#include "kvpol.h"
#include "pfx.h"
#include "sess.h"
#include "tier.h"
#include "tpl.h"

void eng_get_stats(const eng *e, eng_stats *s) {
    *s = e->st;
    s->threshold_entropy = e->c.policy.entropy_threshold;
    s->threshold_gap = e->c.policy.prob_gap_threshold;
    s->threshold_pmax = e->c.policy.max_prob_threshold;
    s->running = e->runq.n;
    s->breaker_engaged = 0;
    for (req *r = e->all; r; r = r->next)
        s->breaker_engaged += r->state == REQ_RUNNING && kvpol_breaker_engaged(r->pol);
    s->waiting = e->waitq.n;
    s->hot_blocks_used = kv_pool_used(&e->kv.pool);
    s->hot_blocks = e->kv.pool.n_blocks;
    s->hot_bytes = (size_t)s->hot_blocks_used * e->block_bytes;
    s->hot_capacity_bytes = (size_t)e->kv.pool.n_blocks * e->block_bytes;
    s->int8_bytes = (size_t)kv_pool_used(&e->kv.pool8) * e->b->kv8_block_bytes;
    s->warm_bytes = tier_get_stats(e->kv.warm)->bytes + tier_get_stats(e->kv.warm8)->bytes;
    s->warm_capacity_bytes = e->mem.warm;
    const tier_stats *tiers[2] = {tier_get_stats(e->kv.warm), tier_get_stats(e->kv.warm8)};
    s->cold_spills = s->cold_fetch_hits = s->cold_fetch_misses = s->integrity_failures = 0;
    for (int i = 0; i < 2; i++) {
        if (!tiers[i]) continue;
        s->cold_spills += tiers[i]->spills;
        s->cold_fetch_hits += tiers[i]->fetch_hits;
        s->cold_fetch_misses += tiers[i]->fetch_misses;
        s->integrity_failures += tiers[i]->integrity_failures;
    }
    if (e->pfx) {
        const pfx_stats *p = pfx_get_stats(e->pfx);
        s->prefix_hits_warm = p->hits_warm;
        s->prefix_hits_cold = p->hits_cold;
        s->prefix_hits_template = p->hits_template;
        s->prefix_promotions = p->promotions;
        s->prefix_persisted = p->persisted;
        s->prefix_integrity_failures = p->integrity_failures;
        s->prefix_bytes = p->bytes;
        s->prefix_pinned = p->pinned;
        s->integrity_failures += p->integrity_failures;
    }
    const sess_stats *ss = sess_get_stats(e->sess);
    s->sessions_fetched = ss->cold_hits;
    s->session_misses = ss->misses;
    s->session_integrity_failures = ss->integrity_failures;
    s->integrity_failures += ss->integrity_failures;
    s->resolving = e->n_resolving;
    const tpl_cache_stats *ts = tpl_cache_get_stats(e->tpl);
    s->template_fetches = ts->fetches;
    s->template_misses = ts->fetch_misses;
    s->template_saves = ts->saves;
    s->integrity_failures += ts->integrity_failures;
}
