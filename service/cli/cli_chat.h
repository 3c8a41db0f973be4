/* cli_chat.h - `confkv generate --messages`: a chat file rendered with the
 * model's template (engine/core/chat.h), for the CLI. */
#ifndef CK_CLI_CHAT_H
#define CK_CLI_CHAT_H
#include <stdint.h>
#include <time.h>

#include "chat.h"
#include "cli.h"

/* Messages read from a JSON file: an array of {"role", "content"}, or an
 * object {"messages": [...], "add_generation_prompt": bool (default true),
 * "tools": [...] (a job's `tools`: an array of tool objects, passed to the
 * template as they are; absent or null: None)}. content is a string or
 * OpenAI's [{"type": "text", "text": ...}] parts. */
typedef struct cli_chat {
    chat_message *msgs; /* (n), strings owned here */
    int n;
    jinja_value *tools; /* owned (svc_jv.h), or NULL */
    int add_generation_prompt;
    char *tmpl; /* --chat-template text, or NULL */
    size_t tmpl_len;
    struct tm now; /* --date, or the current local time */
} cli_chat;

/* Read the messages file, the template override (path may be NULL) and the
 * date ("YYYY-MM-DD" or NULL). 0, or 1 with a message printed. */
int cli_chat_load(const cli_args *a, const char *messages_path, const char *template_path, const char *date,
                  cli_chat *c);
void cli_chat_free(cli_chat *c);

/* --render-only: print the rendering of c with the template of model_path
 * (the override when given), loading only its vocabulary; what the render
 * changed (chat.h's warnings) goes to stderr. Exit code. */
int cli_chat_render_only(const cli_args *a, const char *model_path, const char *tok_path, const cli_chat *c);

/* The prompt ids of c for a loaded model m: rendered and tokenized under
 * chat.h's anti-forgery rule; *warnings: chat_render's CHAT_WARN_* bits.
 * 0, or 1 with a message printed. */
int cli_chat_ids(const cli_args *a, const model *m, const cli_chat *c, int32_t *ids, int max, int *n,
                 int *warnings);

/* What a GGUF file's prompt format is (vocabulary only: vocab-only files
 * work), with template_path overriding its template: `confkv version
 * --model`. 0 or CK_E* with a sentence in err. */
int cli_chat_describe(const char *model_path, const char *template_path, chat_model_info *info, char *err,
                      size_t errlen);

#endif
