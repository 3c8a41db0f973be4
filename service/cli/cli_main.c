/* cli_main.c - `confkv`: the command-line tool. One subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "arch.h"
#include "cpu_features.h"
#include "cli.h"
#include "cli_chat.h"
#include "jw.h"
#include "svc_proc.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"generate", cli_generate, "generate text from a model (greedy or sampled), with confidence"},
    {"eval", cli_eval, "compare KV policies: memory kept against quality lost"},
    {"route-eval", cli_route_eval, "the cascade's rule: jobs kept on the small model against quality lost"},
    {"bench", cli_bench, "measure prefill/decode speed against this machine's roofline"},
    {"convert", cli_convert, "convert a llama2.c checkpoint (or any model) to GGUF"},
    {"synth", cli_synth, "write a random-weight GGUF model of any shape"},
    {"broker", cli_broker, "run an embedded Kafka broker (for tests and demos with confkvd)"},
    {"submit", cli_submit, "send jobs to confkvd through Kafka and print their results"},
    {"batch", cli_batch, "run an OpenAI Batch API file through confkvd (Kafka) or in-process"},
    {"loadgen", cli_loadgen, "send the serve bench's load to confkvd through Kafka; throughput, latency"},
    {"templates", cli_templates,
     "cache templates (prompt prefixes in Redis): create, list, inspect, delete, prewarm"},
    {"tune", cli_tune,
     "the tuning report: signal distributions, alerts, memory/quality frontier, recommended config"},
    {"tokenize", cli_tokenize, "print the token ids of a text (any GGUF vocabulary, even vocab-only files)"},
    {"version", cli_version, "print the version and the compiled-in backends"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: confkv <command> [options]   (confkv <command> --help for its options)\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int cli_version(int argc, char **argv) {
    int json = 0;
    const char *model_path = NULL, *tmpl_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model_path = argv[++i];
        else if (!strcmp(argv[i], "--chat-template") && i + 1 < argc)
            tmpl_path = argv[++i];
        else {
            fprintf(stderr, "usage: confkv version [--json] [--model GGUF [--chat-template FILE]]\n"
                            "  --model: also the file's architecture, tokenizer and chat template\n");
            return strcmp(argv[i], "--help") ? 2 : 0;
        }
    }
    chat_model_info ci;
    if (model_path) {
        char err[512] = "";
        if (cli_chat_describe(model_path, tmpl_path, &ci, err, sizeof err)) {
            fprintf(stderr, "confkv version: %s\n", err);
            return 1;
        }
    }
    const char *const *be = be_compiled();
    if (json) {
        jw w;
        jw_init(&w, stdout);
        jw_obj(&w);
        jw_key(&w, "version");
        jw_str(&w, CONFKV_VERSION);
        jw_key(&w, "backends");
        jw_arr(&w);
        for (int i = 0; be[i]; i++) jw_str(&w, be[i]);
        jw_arr_end(&w);
        jw_key(&w, "architectures");
        jw_arr(&w);
        for (int i = 0; i < arch_count(); i++) jw_str(&w, arch_at(i)->name);
        jw_arr_end(&w);
        jw_key(&w, "tokenizers");
        jw_arr(&w);
        jw_str(&w, "llama");
        jw_str(&w, "gpt2");
        jw_str(&w, "llama2c");
        jw_arr_end(&w);
        jw_key(&w, "chat_templates");
        jw_str(&w, "jinja");
        /* the CPU backend's kernels: what this CPU runs, and what a CPU
         * backend would pick now (CONFKV_CPU_KERNELS forces a level) */
        char cpu[64], why[160] = "";
        const int best = cpu_isa_detect(), sel = cpu_isa_select(why, sizeof why);
        jw_key(&w, "cpu");
        jw_obj(&w);
        jw_key(&w, "model");
        jw_str(&w, cpu_model_name(cpu, sizeof cpu));
        jw_key(&w, "isa");
        jw_str(&w, cpu_isa_name(best));
        jw_key(&w, "kernels");
        jw_str(&w, sel >= 0 ? cpu_isa_name(sel) : why);
        jw_key(&w, "kernels_available");
        jw_arr(&w);
        for (int i = 0; i <= best; i++) jw_str(&w, cpu_isa_name(i));
        jw_arr_end(&w);
        jw_key(&w, "threads"); /* the CPU backend's default (--threads 0) */
        jw_int(&w, be_cpu_default_threads());
        jw_obj_end(&w);
        if (model_path) {
            jw_key(&w, "model");
            jw_obj(&w);
            jw_key(&w, "arch");
            jw_str(&w, ci.arch);
            jw_key(&w, "tokenizer");
            jw_str(&w, ci.tok_model);
            jw_key(&w, "tokenizer_pre");
            jw_str(&w, ci.tok_pre);
            jw_key(&w, "chat_template");
            jw_str(&w, ci.template_source);
            jw_key(&w, "chat_template_hash");
            jw_str(&w, ci.template_hash);
            jw_obj_end(&w);
        }
        jw_obj_end(&w);
        putchar('\n');
    } else {
        printf("confkv %s (backends:", CONFKV_VERSION);
        for (int i = 0; be[i]; i++) printf(" %s", be[i]);
        printf(")\n");
        if (model_path)
            printf("model: arch %s, tokenizer %s%s%s, chat template %s%s%s\n", ci.arch, ci.tok_model,
                   ci.tok_pre[0] ? " pre " : "", ci.tok_pre, ci.template_source,
                   ci.template_hash[0] ? " " : "", ci.template_hash);
    }
    return 0;
}

int main(int argc, char **argv) {
    svc_prefer_passive_wait(argv);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) return cli_version(1, argv);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "confkv: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
