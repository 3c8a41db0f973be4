/* cli_generate.c - `confkv generate`: one prompt, one completion. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ck_err.h"
#include "cli.h"
#include "cli_chat.h"
#include "gen.h"
#include "jw.h"
#include "kvpol.h"
#include "tier.h"

static void help(void) {
    printf("usage: confkv generate --model M [--tokenizer T] [options]\n\n"
           "  --model PATH           GGUF or llama2.c checkpoint\n"
           "  --tokenizer PATH       llama2.c tokenizer (GGUF carries its own)\n"
           "  --prompt TEXT          prompt (default: none, generation starts from BOS)\n"
           "  --messages FILE        a chat (JSON: [{\"role\", \"content\"}, ...]) rendered with the\n"
           "                         model's chat template and tokenized so that no content can\n"
           "                         forge a turn marker (docs/CHAT_TEMPLATES.md)\n"
           "  --chat-template FILE   with --messages: this Jinja template instead of the model's\n"
           "  --render-only          with --messages: print the rendered prompt exactly and exit\n"
           "                         (reads only the vocabulary: vocab-only GGUF files work)\n"
           "  --date YYYY-MM-DD      the date templates format (strftime_now; default today)\n"
           "  --max-tokens N         completion tokens at most (default 256)\n"
           "  --steps N              llama2.c's -n: N positions in all, prompt included\n"
           "                         (sets --max-tokens to N - prompt tokens + 1)\n"
           "  --max-batch-tokens N   tokens a forward step takes at most: the prompt's prefill\n"
           "                         chunk (default 256)\n"
           "  --temperature X        0 = greedy (default 1.0)\n"
           "  --top-p X  --top-k N  --min-p X  --repeat-penalty X  --seed S\n"
           "  --ignore-eos           keep generating past end-of-text tokens\n"
           "  --stop TEXT            stop before this text (repeatable, up to %d)\n"
           "  --policy P             KV policy: full, window:N, sinks:N, h2o:N, conf, conf-int8\n"
           "  --json                 one JSON object instead of plain text\n"
           "  --confidence-trace     with --json: entropy, gap, p_max of every token\n"
           "  --backend B            cpu (default), cuda, auto\n"
           "  --threads N            CPU threads (default: all cores)\n"
           "  --dump-logits FILE     write each step's logits (raw, before sampling) to FILE:\n"
           "                         steps x vocab little-endian float32, step 0 = after the\n"
           "                         prompt, step i = after completion token i-1\n"
           "  --dump-steps K         with --dump-logits: the first K steps only (default: all)\n",
           GEN_MAX_STOPS);
}

/* --dump-logits: where the steps go, how many are wanted and written. */
typedef struct logit_dump {
    FILE *f;
    int steps; /* steps to write; < 0 = all */
    int written;
} logit_dump;

/* gen_params.on_logits: append one step's logits as little-endian float32.
 * The engine runs on x86-64 and aarch64, both little-endian, so the floats
 * go out as they lie in memory; a big-endian host is refused at open. */
static int dump_logits_cb(void *ud, int step, const float *logits, int n_vocab) {
    logit_dump *d = ud;
    (void)step;
    if (d->steps >= 0 && d->written >= d->steps) return CK_OK;
    if (fwrite(logits, sizeof *logits, (size_t)n_vocab, d->f) != (size_t)n_vocab) return CK_EIO;
    d->written++;
    return CK_OK;
}

static int host_little_endian(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static void print_json(const cli_engine *e, const char *prompt, const int32_t *prompt_ids, int n_prompt,
                       const gen_result *r, int trace, const char *policy, const kvpol_stats *ks,
                       const tier_stats *ts, size_t token_bytes, int warnings) {
    jw w;
    jw_init(&w, stdout);
    jw_obj(&w);
    jw_key(&w, "model");
    jw_str(&w, e->m->name);
    jw_key(&w, "prompt");
    jw_str(&w, prompt);
    jw_key(&w, "prompt_ids");
    jw_arr(&w);
    for (int i = 0; i < n_prompt; i++) jw_int(&w, prompt_ids[i]);
    jw_arr_end(&w);
    jw_key(&w, "completion");
    jw_strn(&w, r->text, r->text_len);
    jw_key(&w, "tokens");
    jw_arr(&w);
    for (int i = 0; i < r->n_tokens; i++) jw_int(&w, r->tokens[i]);
    jw_arr_end(&w);
    jw_key(&w, "finish_reason");
    jw_str(&w, gen_finish_name(r->finish));
    if (warnings) { /* what the chat's rendering changed, as the service's result says it */
        jw_key(&w, "warnings");
        jw_arr(&w);
        for (int bit = 1; bit > 0 && bit <= warnings; bit <<= 1)
            if (warnings & bit) jw_str(&w, chat_warning_text(bit));
        jw_arr_end(&w);
    }
    jw_key(&w, "usage");
    jw_obj(&w);
    jw_key(&w, "prompt_tokens");
    jw_int(&w, r->n_prompt);
    jw_key(&w, "completion_tokens");
    jw_int(&w, r->n_tokens);
    jw_obj_end(&w);
    int steps = r->n_tokens ? r->n_tokens : 1;
    jw_key(&w, "confidence");
    jw_obj(&w);
    jw_key(&w, "mean_entropy");
    jw_num(&w, r->sum_entropy / steps);
    jw_key(&w, "mean_gap");
    jw_num(&w, r->sum_gap / steps);
    jw_key(&w, "mean_pmax");
    jw_num(&w, r->sum_pmax / steps);
    jw_obj_end(&w);
    if (policy) {
        jw_key(&w, "kv");
        jw_obj(&w);
        jw_key(&w, "policy");
        jw_str(&w, policy);
        jw_key(&w, "retained_mean");
        jw_num(&w, r->full_token_steps > 0 ? r->hot_token_steps / r->full_token_steps : 1.0);
        jw_key(&w, "retained_peak");
        jw_num(&w, r->full_peak_tokens ? (double)r->hot_peak_tokens / r->full_peak_tokens : 1.0);
        jw_key(&w, "recalls");
        jw_int(&w, (int64_t)ks->recalls);
        jw_key(&w, "demotions");
        jw_int(&w, (int64_t)ks->demotions);
        jw_key(&w, "hot_peak_bytes");
        jw_int(&w, (int64_t)r->hot_peak_bytes);
        jw_key(&w, "warm_peak_bytes");
        jw_int(&w, (int64_t)ts->peak_bytes);
        jw_obj_end(&w);
    }
    jw_key(&w, "timings");
    jw_obj(&w);
    jw_key(&w, "prefill_s");
    jw_num(&w, r->prefill_s);
    jw_key(&w, "decode_s");
    jw_num(&w, r->decode_s);
    jw_key(&w, "decode_tokens_per_s");
    jw_num(&w, r->decode_s > 0 ? r->n_tokens / r->decode_s : 0);
    jw_obj_end(&w);
    if (trace && r->trace) {
        jw_key(&w, "trace");
        jw_arr(&w);
        for (int i = 0; i < r->n_tokens; i++) {
            jw_obj(&w);
            jw_key(&w, "id");
            jw_int(&w, r->tokens[i]);
            jw_key(&w, "entropy");
            jw_num(&w, r->trace[i].entropy);
            jw_key(&w, "gap");
            jw_num(&w, r->trace[i].gap);
            jw_key(&w, "pmax");
            jw_num(&w, r->trace[i].pmax);
            jw_obj_end(&w);
        }
        jw_arr_end(&w);
    }
    jw_obj_end(&w);
    putchar('\n');
}

int cli_generate(int argc, char **argv) {
    cli_args a = {argc, argv, 1, "generate", 0};
    cli_engine_opts eo;
    cli_engine_opts_default(&eo);
    gen_params gp;
    gen_params_default(&gp);
    const char *prompt = "", *stop = NULL, *policy = NULL, *dump_path = NULL;
    const char *messages = NULL, *chat_tmpl = NULL, *date = NULL;
    int json = 0, trace = 0, steps = 0, dump_steps = -1, render_only = 0;
    while (a.i < a.argc && !a.bad) {
        if (cli_flag(&a, "--help") || cli_flag(&a, "-h")) {
            help();
            return 0;
        }
        if (cli_engine_flag(&a, &eo) || cli_sampling_flag(&a, &gp.samp) || cli_str(&a, "--prompt", &prompt) ||
            cli_str(&a, "--policy", &policy) || cli_str(&a, "--dump-logits", &dump_path) ||
            cli_str(&a, "--messages", &messages) || cli_str(&a, "--chat-template", &chat_tmpl) ||
            cli_str(&a, "--date", &date) || cli_int(&a, "--dump-steps", 0, 1 << 24, &dump_steps) ||
            cli_int(&a, "--max-tokens", 0, 1 << 24, &gp.max_tokens) ||
            cli_int(&a, "--steps", 1, 1 << 24, &steps) ||
            cli_int(&a, "--max-batch-tokens", 1, 1 << 16, &eo.max_batch_tokens))
            continue;
        if (cli_str(&a, "--stop", &stop)) {
            if (gp.n_stop == GEN_MAX_STOPS) {
                cli_error(&a, "at most %d --stop strings", GEN_MAX_STOPS);
                return 2;
            }
            gp.stop[gp.n_stop++] = stop;
            continue;
        }
        if (cli_flag(&a, "--json"))
            json = 1;
        else if (cli_flag(&a, "--confidence-trace"))
            trace = 1;
        else if (cli_flag(&a, "--ignore-eos"))
            gp.ignore_eos = 1;
        else if (cli_flag(&a, "--render-only"))
            render_only = 1;
        else
            return cli_unknown(&a);
    }
    if (a.bad) return 2;
    if ((render_only || chat_tmpl) && !messages) {
        cli_error(&a, "--render-only and --chat-template go with --messages");
        return 2;
    }
    if (messages && *prompt) {
        cli_error(&a, "give --prompt or --messages, not both");
        return 2;
    }
    cli_chat chat = {0};
    if (messages && cli_chat_load(&a, messages, chat_tmpl, date, &chat)) return 1;
    if (render_only) {
        if (!eo.model_path) {
            cli_chat_free(&chat);
            cli_error(&a, "--model is required");
            return 2;
        }
        int code = cli_chat_render_only(&a, eo.model_path, eo.tokenizer_path, &chat);
        cli_chat_free(&chat);
        return code;
    }
    if (dump_steps >= 0 && !dump_path) {
        cli_error(&a, "--dump-steps needs --dump-logits");
        return 2;
    }
    if (dump_path && !host_little_endian()) {
        cli_error(&a, "--dump-logits writes little-endian floats; this host is big-endian");
        return 2;
    }
    gp.want_trace = trace;
    kvpol_config pc;
    char err[256];
    if (policy && kvpol_parse(policy, &pc, err, sizeof err)) {
        cli_error(&a, "--policy: %s", err);
        return 2;
    }

    if (policy && pc.cache_compression) eo.kv8_blocks = -1; /* as many as f32 blocks */
    cli_engine e;
    int rc = cli_engine_open(&a, &eo, &e);
    if (rc) {
        cli_chat_free(&chat);
        return rc;
    }
    int max = e.b->opt.max_ctx;
    int32_t *ids = malloc((size_t)max * sizeof *ids);
    gen_ctx *g = NULL;
    tier *warm = NULL;
    kvpol *pol = NULL;
    gen_result r = {0};
    logit_dump dump = {NULL, dump_steps, 0};
    int n = 0, exit_code = 1, warnings = 0;
    if (!ids) goto out;
    if (messages) {
        if (cli_chat_ids(&a, e.m, &chat, ids, max, &n, &warnings)) goto out;
        rc = 0;
        if (!json)
            for (int bit = 1; bit > 0 && bit <= warnings; bit <<= 1)
                if (warnings & bit) fprintf(stderr, "confkv generate: warning: %s\n", chat_warning_text(bit));
    } else {
        rc = tok_encode(e.m->tok, prompt, strlen(prompt), 1, ids, max, &n);
    }
    if (rc == CK_ETOOLONG) {
        cli_error(&a, "the prompt is %d tokens; the context holds %d", n, max);
        goto out;
    } else if (rc) {
        cli_error(&a, "cannot tokenize the prompt: %s", ck_strerror(rc));
        goto out;
    }
    /* llama2.c prints the token sampled at each of its `steps` positions
     * after the prompt's first: steps - n + 1 completion tokens. */
    if (steps) gp.max_tokens = steps - n + 1 > 0 ? steps - n + 1 : 0;
    if ((rc = gen_new(e.m, e.b, &e.pool, 0, &g))) {
        cli_error(&a, "%s", ck_strerror(rc));
        goto out;
    }
    if (policy) {
        tier_config tc;
        tier_config_default(&tc, e.b);
        tc.compress = pc.cache_compression;
        if ((rc = tier_new(&tc, &warm)) || (rc = kvpol_new(&pc, e.b, &e.pool, &e.pool8, warm, &pol))) {
            cli_error(&a, "policy: %s", ck_strerror(rc));
            goto out;
        }
        gen_set_policy(g, pol);
    }
    if (dump_path) {
        if (!(dump.f = fopen(dump_path, "wb"))) {
            cli_error(&a, "--dump-logits: cannot create %s", dump_path);
            goto out;
        }
        gp.on_logits = dump_logits_cb;
        gp.on_logits_ud = &dump;
    }
    if ((rc = gen_run(g, ids, n, &gp, &r))) {
        if (rc == CK_EIO && dump.f)
            cli_error(&a, "--dump-logits: cannot write %s", dump_path);
        else
            cli_error(&a, "generation failed: %s", ck_strerror(rc));
        goto out;
    }
    if (dump.f) {
        int bad = fclose(dump.f) != 0;
        dump.f = NULL;
        if (bad) {
            cli_error(&a, "--dump-logits: cannot write %s", dump_path);
            goto out;
        }
        /* Fewer steps than asked when the run stopped early (EOS, a stop
         * string, --max-tokens): say so, the file alone cannot tell. */
        fprintf(stderr, "confkv generate: %d steps x %d logits in %s\n", dump.written, e.m->cfg.vocab_size,
                dump_path);
    }
    if (json) {
        char pname[64] = "";
        if (policy) kvpol_name(&pc, pname, sizeof pname);
        size_t token_bytes = e.b->kv_block_floats * sizeof(float) / (size_t)e.b->opt.block_size;
        print_json(&e, prompt, ids, n, &r, trace, policy ? pname : NULL, pol ? kvpol_get_stats(pol) : NULL,
                   warm ? tier_get_stats(warm) : NULL, token_bytes, warnings);
    } else {
        fputs(prompt, stdout);
        fwrite(r.text, 1, r.text_len, stdout);
        putchar('\n');
        fprintf(stderr, "confkv generate: %d tokens, %.1f tokens/s (decode)\n", r.n_tokens,
                r.decode_s > 0 ? r.n_tokens / r.decode_s : 0.0);
    }
    exit_code = 0;
out:
    cli_chat_free(&chat);
    if (dump.f) fclose(dump.f);
    gen_result_free(&r);
    gen_free(g);
    kvpol_free(pol);
    tier_free(warm);
    free(ids);
    cli_engine_close(&e);
    return exit_code;
}
