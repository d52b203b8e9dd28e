/* SPDX-License-Identifier: Apache-2.0 */
/* humming-moe: the tool around the engine (environment help; more verbs per module). */
#include <stdio.h>
#include <string.h>

#include "humming.h"
#include "params.h"

int hm_cli_inspect(int argc, char **argv);
int hm_cli_precompile(int argc, char **argv);
int hm_cli_tune(int argc, char **argv);

static void usage(FILE *out) {
  fprintf(out, "usage: humming-moe <command> [options]\n"
               "  precompile    fill the kernel cache for a model (precompile --help)\n"
               "  tune          time GEMM candidates on this GPU, keep the winners (tune --help)\n"
               "  --help-env    list the HUMMING_* environment parameters\n"
               "  --version     print the library version\n"
               "  inspect DIR   what a checkpoint holds, its layer configs, memory per rank\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "precompile") == 0) return hm_cli_precompile(argc, argv);
  if (strcmp(argv[1], "tune") == 0) return hm_cli_tune(argc, argv);
  if (strcmp(argv[1], "--help-env") == 0) {
    hm_params_print(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("humming-moe %s\n", hm_get_version());
    return 0;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "inspect") == 0) return hm_cli_inspect(argc - 2, argv + 2);
  fprintf(stderr, "humming-moe: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
