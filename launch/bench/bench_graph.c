/* SPDX-License-Identifier: Apache-2.0 */
/* Stream capture into a CUDA graph through the engine's driver table. */
#include <stdlib.h>

#include "bench/bench_graph.h"
#include "cuda_driver.h"
#include "log.h"

struct hm_bench_graph {
  CUgraph graph;
  CUgraphExec exec;
};

/*
 * Relaxed mode: the body runs on this thread only, and a library call that is unsafe to
 * capture shows up as a failed capture, which we handle, rather than as an error in
 * some other thread's work.
 */
hm_status hm_bench_graph_capture(hm_stream *stream, hm_bench_body body, void *ctx, hm_bench_graph **out) {
  *out = NULL;
  if (stream == NULL || stream->engine->kind != HM_BACKEND_CUDA) return HM_OK;
  CUstream s = (CUstream)stream->native;
  CUresult r = hm_cu.cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
  if (r != CUDA_SUCCESS) return HM_OK;
  hm_status body_st = body(ctx, stream);
  CUgraph graph = NULL;
  r = hm_cu.cuStreamEndCapture(s, &graph);
  if (body_st != HM_OK || r != CUDA_SUCCESS || graph == NULL) {
    if (graph) hm_cu.cuGraphDestroy(graph);
    HM_INFO(BENCH, "graph capture failed (%s); timing eagerly",
            body_st != HM_OK ? hm_last_error() : "driver");
    hm_error_clear();
    return HM_OK;
  }
  hm_bench_graph *g = calloc(1, sizeof(*g));
  if (g == NULL) {
    hm_cu.cuGraphDestroy(graph);
    HM_FAIL(HM_OUT_OF_MEMORY, "graph");
  }
  g->graph = graph;
  r = hm_cu.cuGraphInstantiateWithFlags(&g->exec, graph, 0);
  if (r != CUDA_SUCCESS) {
    hm_cu.cuGraphDestroy(graph);
    free(g);
    return hm_cu_fail(r, "cuGraphInstantiateWithFlags", __FILE__, __LINE__);
  }
  *out = g;
  return HM_OK;
}

hm_status hm_bench_graph_launch(hm_bench_graph *graph, hm_stream *stream) {
  HM_CU_CHECK(cuGraphLaunch(graph->exec, (CUstream)stream->native));
  return HM_OK;
}

void hm_bench_graph_destroy(hm_bench_graph *graph) {
  if (graph == NULL) return;
  if (graph->exec) hm_cu.cuGraphExecDestroy(graph->exec);
  if (graph->graph) hm_cu.cuGraphDestroy(graph->graph);
  free(graph);
}
