/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The expert/tensor-parallel layer of the layer and e2e modes under mpirun: the
 * communicator of a preset, and each rank's shard with random weights drawn expert by
 * expert, so that a rank draws only its own experts and the host reference of a small
 * layer (every expert, drawn the same way) is the same layer.
 */
#ifndef HM_BENCH_MOE_DIST_H
#define HM_BENCH_MOE_DIST_H

#include "bench/bench_moe.h"

/* Whether the layer and e2e modes shard their layers (mpirun with --ep x --tp = ranks). */
bool hm_bench_dist(const hm_bench *b);

/* The communicator of config's layer for steps of up to max_tokens per rank (bf16 rows, or fp8 for fp8 1x128
 * activations). */
hm_status hm_bench_dist_comm(hm_bench *b, const hm_moe_config *config, int64_t max_tokens, hm_comm **out);

/* This rank's layer of config on comm, its shard drawn from seed (collective). */
hm_status hm_bench_dist_layer(hm_bench *b, hm_comm *comm, const hm_moe_config *config, uint64_t seed,
                              hm_bench_moe *out);

/* The whole layer on the host engine, every expert drawn as hm_bench_dist_layer draws them. */
hm_status hm_bench_dist_reference(hm_bench *b, const hm_moe_config *config, uint64_t seed, int64_t max_tokens,
                                  hm_moe_layer **out);

/* '#' lines of the sharding: ranks, plan, payload and layout, the check, then each rank's share and binding.
 */
void hm_bench_dist_header(hm_bench *b, hm_comm *comm, const hm_moe_config *config, bool checked);

/* Whether a host reference of config fits on every rank of the job (a few hundred MB each). */
bool hm_bench_dist_checkable(const hm_bench *b, const hm_moe_config *config);

#endif
