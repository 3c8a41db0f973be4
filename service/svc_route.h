/* svc_route.h - the cascade's rule: is the small model out of its depth?
 *
 * A job sent to `"model": "auto"` starts on the small model of route_models.
 * Its tokens' confidence signals (entropy in nats, top-1 minus top-2
 * probability, top-1 probability) are fed here one by one; the rule says
 * when the job must move to the large model. A job moves at most once.
 *
 * Rule grammar (config `route_rule`, flag --route-rule), comma-separated:
 *   tokens=N            the window: the decision looks at N generated tokens
 *                       (1..256; default 16)
 *   at=first|every      first (default): decide once, after the first N
 *                       tokens; every: after every token from the N-th on,
 *                       over the last N tokens
 *   STAT_SIGNAL OP X    a condition, STAT one of mean, min, max; SIGNAL one
 *                       of entropy, gap, pmax; OP < or >; X a number.
 *                       Several conditions: escalate when ANY holds.
 *   always / never      escalate at the decision point whatever the signals
 *                       / never (for tests and A/B runs)
 *   rewind=K            on escalation, the small model's last K tokens (the
 *                       uncertain ones the decision looked at) are dropped;
 *                       0..tokens, default 0 (every token so far is kept)
 *
 * What the large model continues from: the prompt and the small model's
 * first A = n - K generated tokens (n: tokens fed when the rule said move;
 * svc_route_accepted). Those A tokens stay in the result (their text
 * first); A is the result's route.at_token. With at=first and
 * rewind=tokens the large model starts from the prompt alone: its text is
 * then exactly what the large model alone makes of the job.
 * Example (the default): "tokens=16,mean_entropy>1.5,min_pmax<0.05".
 * A job that ends (EOS, stop, length) before its first decision point stays
 * on the small model.
 *
 * Pure and allocation-free: a route_state lives in the job's work item. */
#ifndef CK_SVC_ROUTE_H
#define CK_SVC_ROUTE_H
#include <stddef.h>

#define SVC_ROUTE_MAX_COND 8
#define SVC_ROUTE_MAX_WINDOW 256
#define SVC_ROUTE_DEFAULT "tokens=16,mean_entropy>1.5,min_pmax<0.05"

enum { SVC_ROUTE_ENTROPY = 0, SVC_ROUTE_GAP, SVC_ROUTE_PMAX };
enum { SVC_ROUTE_MEAN = 0, SVC_ROUTE_MIN, SVC_ROUTE_MAX };

typedef struct svc_route_cond {
    int stat, signal; /* SVC_ROUTE_MEAN.., SVC_ROUTE_ENTROPY.. */
    int greater;      /* 1: stat > x escalates; 0: stat < x */
    double x;
} svc_route_cond;

typedef struct svc_route_rule {
    int tokens; /* window */
    int every;  /* at=every */
    int always, never;
    int rewind; /* tokens dropped on escalation (<= tokens) */
    int n_cond;
    svc_route_cond cond[SVC_ROUTE_MAX_COND];
} svc_route_rule;

/* Parse a rule (NULL or "" = SVC_ROUTE_DEFAULT). 0, or CK_EINVAL with a
 * sentence naming the bad item in err. */
int svc_route_parse(const char *spec, svc_route_rule *r, char *err, size_t errlen);
/* The rule re-printed canonically (for logs and /readyz). */
void svc_route_name(const svc_route_rule *r, char *buf, size_t cap);

/* One job's view: a ring of the last `tokens` signals. */
typedef struct svc_route_state {
    float sig[3][SVC_ROUTE_MAX_WINDOW];
    int n;       /* tokens seen */
    int decided; /* at=first: the decision has been made */
} svc_route_state;

void svc_route_begin(svc_route_state *s);
/* Feed one generated token's signals. Returns 1 when the job must move now
 * (then the caller moves it and stops feeding), else 0. */
int svc_route_feed(const svc_route_rule *r, svc_route_state *s, float entropy, float gap, float pmax);
/* After svc_route_feed said move: the small model's tokens the large one
 * continues after (tokens fed minus rewind, at least 0). */
int svc_route_accepted(const svc_route_rule *r, const svc_route_state *s);

#endif
