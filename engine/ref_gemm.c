/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The reference GEMM: checks the problem and turns the layout into a row plan; then, a
 * wave of plan rows at a time (so memory stays bounded at any M), converts the wave's
 * A rows to f32 once and runs one task per (expert, tile of B rows, block of rows) on
 * the parallel-for. ref_gemm_tile.c does the arithmetic.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "numfmt.h"
#include "parallel.h"
#include "ref_gemm_tile.h"

static hm_status check_weights(const hm_host_weights *w) {
  HM_CHECK_NOT_NULL(w);
  if (w->experts < 1) HM_FAIL(HM_INVALID_ARGUMENT, "weights have %lld experts", (long long)w->experts);
  if (w->n < 1 || w->k < 1)
    HM_FAIL(HM_INVALID_ARGUMENT, "weight shape N = %lld, K = %lld is empty", (long long)w->n,
            (long long)w->k);
  HM_CHECK(hm_quant_format_check(&w->fmt, w->n, w->k));
  HM_CHECK_NOT_NULL(w->qweight);
  if (w->fmt.scale_kind != HM_SCALE_NONE) HM_CHECK_NOT_NULL(w->scales);
  if (w->fmt.zero_point) HM_CHECK_NOT_NULL(w->zeros);
  if (w->fmt.global_scale) HM_CHECK_NOT_NULL(w->global_scale);
  return HM_OK;
}

static hm_status check_activations(const hm_ref_gemm_problem *p) {
  switch (p->act) {
    case HM_F32:
    case HM_F16:
    case HM_BF16:
      if (p->act_scale != HM_ACT_SCALE_NONE)
        HM_FAIL(HM_INVALID_ARGUMENT, "activation type %s takes no scales (act_scale = %d)",
                hm_dtype_name(p->act), (int)p->act_scale);
      return HM_OK;
    case HM_F8E4M3:
    case HM_I8:
      if (p->act_scale != HM_ACT_SCALE_TOKEN && p->act_scale != HM_ACT_SCALE_GROUP128)
        HM_FAIL(HM_INVALID_ARGUMENT, "activation type %s needs TOKEN or GROUP128 scales (act_scale = %d)",
                hm_dtype_name(p->act), (int)p->act_scale);
      HM_CHECK_NOT_NULL(p->args.a_scale);
      return HM_OK;
    default:
      HM_FAIL(HM_INVALID_ARGUMENT, "activation type %s is not f32, f16, bf16, f8e4m3 or i8",
              hm_dtype_name(p->act));
  }
}

static hm_status check_problem(const hm_ref_gemm_problem *p) {
  HM_CHECK_NOT_NULL(p);
  HM_CHECK(check_weights(p->w));
  HM_CHECK(check_activations(p));
  if (p->out != HM_F32 && p->out != HM_F16 && p->out != HM_BF16)
    HM_FAIL(HM_INVALID_ARGUMENT, "output type %s is not f32, f16 or bf16", hm_dtype_name(p->out));
  HM_CHECK_NOT_NULL(p->args.a);
  HM_CHECK_NOT_NULL(p->args.c);
  if (p->threads < 0) HM_FAIL(HM_INVALID_ARGUMENT, "threads = %d is negative", p->threads);
  return HM_OK;
}

/* Converts plan rows a_first + [begin, end) of A to f32, zero padded to k_pad. */
static hm_status convert_a_rows(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const hm_ref_job *job = ctx;
  begin += job->a_first;
  end += job->a_first;
  const hm_ref_gemm_problem *p = job->p;
  size_t act_bytes = (size_t)hm_dtype_bits(p->act) / 8;
  int64_t scales_per_row = p->act_scale == HM_ACT_SCALE_GROUP128 ? (job->k + 127) / 128 : 1;
  for (int64_t r = begin; r < end; r++) {
    int64_t a_row = job->plan.a_row[r];
    const uint8_t *src = (const uint8_t *)p->args.a + (size_t)(a_row * job->k) * act_bytes;
    float *dst = job->a_f32 + (size_t)((r - job->a_first) * job->k_pad);
    if (p->act_scale == HM_ACT_SCALE_NONE)
      HM_CHECK(hm_convert_to_f32(p->act, src, dst, job->k));
    else
      HM_CHECK(hm_dequantize_activations(src, p->args.a_scale + a_row * scales_per_row, 1, job->k, p->act,
                                         p->act_scale, dst));
    memset(dst + job->k, 0, (size_t)(job->k_pad - job->k) * sizeof(float));
  }
  return HM_OK;
}

static int64_t tile_count(const hm_ref_job *job) {
  return (job->n + HM_REF_TILE_N - 1) / HM_REF_TILE_N;
}

/* Tasks of any one wave, at most: each expert may add a partial block. */
static int64_t max_wave_tasks(const hm_ref_job *job) {
  int64_t wave = job->plan.rows < HM_REF_WAVE_ROWS ? job->plan.rows : HM_REF_WAVE_ROWS;
  return tile_count(job) * ((wave + HM_REF_BLOCK_ROWS - 1) / HM_REF_BLOCK_ROWS + job->plan.experts);
}

/*
 * Tasks of the wave [a_first, a_first + rows) in (expert, tile, block) order, so a
 * worker's next task often reuses its B tile.
 */
static void make_tasks(hm_ref_job *job, int64_t rows) {
  const int64_t *start = job->plan.expert_start;
  int64_t wave_end = job->a_first + rows;
  job->task_count = 0;
  for (int64_t e = 0; e < job->plan.experts; e++) {
    int64_t first = start[e] > job->a_first ? start[e] : job->a_first;
    int64_t last = start[e + 1] < wave_end ? start[e + 1] : wave_end;
    for (int64_t t = 0; first < last && t < tile_count(job); t++)
      for (int64_t r0 = first; r0 < last; r0 += HM_REF_BLOCK_ROWS)
        job->tasks[job->task_count++] = (hm_ref_task){
            .expert = e,
            .n0 = t * HM_REF_TILE_N,
            .r0 = r0,
            .r1 = last - r0 < HM_REF_BLOCK_ROWS ? last : r0 + HM_REF_BLOCK_ROWS,
        };
  }
}

static hm_status run_tasks(void *ctx, int64_t begin, int64_t end, int worker) {
  hm_ref_job *job = ctx;
  for (int64_t t = begin; t < end; t++) HM_CHECK(hm_ref_tile_run(job, &job->tasks[t], &job->scratch[worker]));
  return HM_OK;
}

static hm_status alloc_buffers(hm_ref_job *job, int64_t max_tasks) {
  int64_t wave = job->plan.rows < HM_REF_WAVE_ROWS ? job->plan.rows : HM_REF_WAVE_ROWS;
  size_t a_bytes = (size_t)wave * (size_t)job->k_pad * sizeof(float);
  job->a_f32 = aligned_alloc(HM_REF_ALIGN, hm_ref_round_up(a_bytes > 0 ? a_bytes : 1, HM_REF_ALIGN));
  if (job->a_f32 == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%zu bytes of f32 activations", a_bytes);
  job->tasks = malloc((size_t)(max_tasks > 0 ? max_tasks : 1) * sizeof(*job->tasks));
  if (job->tasks == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%lld reference GEMM tasks", (long long)max_tasks);
  job->scratch = calloc((size_t)job->workers, sizeof(*job->scratch));
  if (job->scratch == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "reference GEMM scratch");
  for (int i = 0; i < job->workers; i++) HM_CHECK(hm_ref_scratch_init(&job->scratch[i], job->k_pad));
  return HM_OK;
}

static void free_job(hm_ref_job *job) {
  for (int i = 0; job->scratch != NULL && i < job->workers; i++) hm_ref_scratch_free(&job->scratch[i]);
  free(job->scratch);
  free(job->a_f32);
  free(job->tasks);
  hm_ref_plan_free(&job->plan);
}

hm_status hm_ref_gemm(const hm_ref_gemm_problem *p) {
  HM_CHECK(check_problem(p));
  hm_status ret = HM_OK;
  hm_ref_job job = {.p = p, .n = p->w->n, .k = p->w->k, .k_pad = hm_ref_round_up(p->w->k, HM_REF_LANES)};
  HM_CHECK_GOTO(hm_ref_plan_build(&p->args, p->w->experts, &job.plan), done);
  int64_t max_tasks = max_wave_tasks(&job);
  job.workers = hm_parallel_workers(max_tasks, 1, p->threads);
  HM_CHECK_GOTO(alloc_buffers(&job, max_tasks), done);
  for (job.a_first = 0; job.a_first < job.plan.rows; job.a_first += HM_REF_WAVE_ROWS) {
    int64_t left = job.plan.rows - job.a_first;
    int64_t rows = left < HM_REF_WAVE_ROWS ? left : HM_REF_WAVE_ROWS;
    HM_CHECK_GOTO(hm_parallel_for(rows, 16, job.workers, convert_a_rows, &job), done);
    make_tasks(&job, rows);
    HM_CHECK_GOTO(hm_parallel_for(job.task_count, 1, job.workers, run_tasks, &job), done);
  }
done:
  free_job(&job);
  return ret;
}
