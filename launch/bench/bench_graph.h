/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CUDA-graph capture of one benchmark body, so decode-sized runs are timed without the
 * launch overhead a serving engine also hides with graphs. A body that cannot be
 * captured (a synchronous copy, a first-time compile) is simply run eagerly instead.
 */
#ifndef HM_BENCH_GRAPH_H
#define HM_BENCH_GRAPH_H

#include "bench/bench.h"

typedef struct hm_bench_graph hm_bench_graph;

/* Captures body on stream (CUDA engines). NULL in *out, and HM_OK, when capture failed. */
hm_status hm_bench_graph_capture(hm_stream *stream, hm_bench_body body, void *ctx, hm_bench_graph **out);
hm_status hm_bench_graph_launch(hm_bench_graph *graph, hm_stream *stream);
void hm_bench_graph_destroy(hm_bench_graph *graph);

#endif
