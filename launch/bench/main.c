/* SPDX-License-Identifier: Apache-2.0 */
/* humming-moe-bench: entry point; the modes live beside this file. */
#include <stdio.h>

#include "humming.h"

int main(int argc, char **argv) {
  (void)argc, (void)argv;
  hm_engine_config cfg = HM_ENGINE_CONFIG_INIT;
  hm_engine *e = NULL;
  if (hm_engine_create(&cfg, &e) != HM_OK) {
    fprintf(stderr, "humming-moe-bench: %s\n", hm_last_error());
    return 1;
  }
  printf("# humming-moe-bench %s on %s\n", hm_get_version(), hm_engine_device_name(e));
  hm_engine_destroy(e);
  hm_shutdown();
  return 0;
}
