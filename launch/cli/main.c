/* SPDX-License-Identifier: Apache-2.0 */
/* humming-moe: the tool around the engine (environment help; more verbs per module). */
#include <stdio.h>
#include <string.h>

#include "humming.h"
#include "params.h"

static void usage(FILE *out) {
  fprintf(out, "usage: humming-moe <command> [options]\n"
               "  --help-env    list the HUMMING_* environment parameters\n"
               "  --version     print the library version\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
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
  fprintf(stderr, "humming-moe: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
