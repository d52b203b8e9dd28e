/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What a layer runs on an engine: its kernel table (one config per M bucket) from one
 * of four sources. The tuning table is only read here; serving never tunes, `humming-moe
 * tune` does.
 */
#ifndef HM_CHOOSE_ENGINE_H
#define HM_CHOOSE_ENGINE_H

#include "heuristics/choose.h"

typedef enum hm_plan_source {
  HM_PLAN_AUTO,      /* per bucket: the tuning table's entry when one is stored, else the heuristic choice */
  HM_PLAN_HEURISTIC, /* the cost model's choice per bucket (hm_choose_plan) */
  HM_PLAN_TUNED,     /* the tuning table's entries; a bucket without one takes the heuristic choice, with a
                        warning */
  HM_PLAN_DEFAULT,   /* hm_gemm_plan_make: the GEMM module's fixed tunings by rows-per-expert class */
  HM_PLAN_PINNED,    /* one kernel for every M: the tuning HUMMING_GEMM_PLAN names (hm_gemm_tuning_name),
                        for A/B measurements; a layer it is not legal for fails */
} hm_plan_source;

#define HM_PLAN_SOURCE_COUNT 5

/* "auto", "heuristic", "tuned", "default", "pinned". */
const char *hm_plan_source_name(hm_plan_source source);
/* The source of that name, or pinned for a tuning's name; HM_INVALID_ARGUMENT otherwise. */
hm_status hm_plan_source_parse(const char *name, hm_plan_source *out);
/* The source HUMMING_GEMM_PLAN asks for. */
hm_status hm_plan_source_from_env(hm_plan_source *out);

/* A kernel table and where each of its entries came from. */
typedef struct hm_layer_plan {
  hm_gemm_plan plan;
  hm_plan_source source[HM_GEMM_PLAN_MAX]; /* HEURISTIC, TUNED, DEFAULT or PINNED */
  int tuned_buckets, heuristic_buckets;    /* of hm_choose_bucket_count(); both 0 for the default source */
} hm_layer_plan;

/* The arch a layer's kernels are made for: the device's on CUDA, the device profile's on the host. */
hm_status hm_heuristics_arch(hm_engine *engine, int *arch);

/*
 * The kernel table of layer lc for a GEMM type on engine from source, every config made
 * for arch. Candidates are ranked on the engine's device profile taken at arch, so
 * every choice is legal where the layer runs; auto and tuned read the node's tuning
 * table under this engine's device, driver and library. Logs the sources at info.
 */
hm_status hm_heuristics_layer_plan(hm_engine *engine, const hm_layer_config *lc, hm_gemm_type type, int arch,
                                   hm_plan_source source, hm_layer_plan *out);

#endif
