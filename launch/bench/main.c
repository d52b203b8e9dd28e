/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe-bench: kernel, layer, comm and e2e benchmarks of the engine. With no
 * arguments it runs the layer mode on the embedded default (deepseek-mini, w4a16), on
 * the GPU when there is one and on the host backend otherwise.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_setup.h"

typedef int (*mode_fn)(hm_bench *b);

static const mode_fn modes[] = {
    [HM_MODE_KERNEL] = hm_bench_kernel,
    [HM_MODE_LAYER] = hm_bench_layer,
    [HM_MODE_COMM] = hm_bench_comm,
    [HM_MODE_E2E] = hm_bench_e2e,
};

int main(int argc, char **argv) {
  static hm_bench b; /* large (option lists); static keeps it off the stack */
  int rc = hm_bench_parse(argc, argv, &b.o);
  if (rc != 0 || b.o.help || b.o.list_models) return rc;
  rc = hm_bench_start(&b);
  if (rc == 0) rc = modes[b.o.mode](&b);
  return hm_bench_finish(&b, rc);
}
