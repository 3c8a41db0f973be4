#include "cli.h"
#include <stdio.h>
int cli_bench_serve(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "serve: not built yet\n"); return 1; }
