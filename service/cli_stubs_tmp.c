#include "cli.h"
#include <stdio.h>
int cli_bench(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "bench: not built yet\n"); return 1; }
int cli_eval(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "eval: not built yet\n"); return 1; }
