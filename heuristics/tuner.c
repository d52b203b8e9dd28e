/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The autotuner's loop: per bucket, the candidates (analytic choice, the GEMM module's
 * default, the cost model's next best), all compiled in one parallel batch, then timed
 * one after another on the bench at both ends of the bucket (its smallest M and the M it
 * is named for). A candidate replaces the analytic choice only if it is faster at both by
 * a margin above the timing noise, so a tuned table is never slower than the heuristics
 * on the timed shapes; one bucket spans M = 1 and M = 32 at decode, where the fastest
 * tile at one end lost 4.5 % at the other when only the middle was timed.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine.h"
#include "heuristics/choose_engine.h"
#include "heuristics/tuner.h"
#include "heuristics/tuner_bench.h"
#include "kernels/gemm_gen.h"
#include "log.h"

/* Largest valid M timed: above it a bucket keeps the analytic choice, as it does where the
 * launch's buffers outgrow the bench (masked launches of many tokens). */
#define TUNER_MAX_VALID_M ((int64_t)1 << 16)
#define MAX_PER_BUCKET 16
#define DEFAULT_CANDIDATES 6
#define DEFAULT_REPS 15
/* A candidate must beat the analytic choice by 1 % at every timed M (medians of 15 launches
 * spread 1-4 % on the H200). */
#define WIN_MARGIN 0.99

typedef struct bucket_work {
  int count;
  hm_gemm_config cfg[MAX_PER_BUCKET]; /* [0]: the analytic choice, [1]: the default */
  hm_kernel_source src[MAX_PER_BUCKET];
  hm_gemm_source gen[MAX_PER_BUCKET];
} bucket_work;

/* Launches a timed sample of req: 0 asks for one. */
static int chain_of(const hm_tune_request *req) {
  return req->chain > 0 ? req->chain : 1;
}

/* The valid M a bucket is timed at: its judging M, at most TUNER_MAX_VALID_M. */
static int64_t timed_m(int64_t m_lo, int64_t m_hi) {
  const int64_t m = hm_choose_bucket_m(m_lo, m_hi);
  return m < TUNER_MAX_VALID_M ? m : TUNER_MAX_VALID_M;
}

bool hm_tuner_bucket_timed(const hm_layer_config *layer, hm_gemm_type type, int64_t m_lo, int64_t m_hi) {
  return m_lo < TUNER_MAX_VALID_M && hm_tuner_bench_fits(layer, type, timed_m(m_lo, m_hi));
}

static bool already(const bucket_work *w, const hm_gemm_tuning *t) {
  for (int i = 0; i < w->count; i++)
    if (hm_choose_tuning_equal(&w->cfg[i].tuning, t)) return true;
  return false;
}

static hm_status add_candidate(bucket_work *w, const hm_gemm_config *base, const hm_gemm_tuning *t) {
  if (w->count == MAX_PER_BUCKET || (w->count > 1 && already(w, t))) return HM_OK;
  w->cfg[w->count] = *base;
  w->cfg[w->count].tuning = *t;
  HM_CHECK(hm_gemm_gen(&w->cfg[w->count], &w->gen[w->count]));
  w->src[w->count] = w->gen[w->count].src;
  w->count++;
  return HM_OK;
}

static hm_status gather(const hm_tune_request *req, const hm_device_profile *p, hm_tune_bucket *b, bucket_work *w) {
  hm_gemm_config base, pick, dflt;
  HM_CHECK(hm_gemm_config_from_layer(req->layer, req->type, p->arch, &base));
  HM_CHECK(hm_choose_config(req->layer, req->type, p, b->m_lo, b->m_hi, &pick, &b->predicted_us));
  b->heuristic = pick.tuning;
  HM_CHECK(add_candidate(w, &base, &pick.tuning));
  HM_CHECK(hm_gemm_select(&base, b->m, &dflt));
  HM_CHECK(add_candidate(w, &base, &dflt.tuning));
  hm_gemm_tuning ranked[MAX_PER_BUCKET];
  int n = 0;
  const int want = req->candidates > 0 ? req->candidates : DEFAULT_CANDIDATES;
  HM_CHECK(hm_choose_ranked(req->layer, req->type, p, b->m, ranked, want < MAX_PER_BUCKET ? want : MAX_PER_BUCKET,
                            &n));
  /* Each ranked tile, and the warp-specialized kernel the choice would run it as
   * (hm_gemm_prefer_ws): the timing decides between the two. */
  for (int i = 0; i < n; i++) {
    hm_gemm_config as_run = base;
    as_run.tuning = ranked[i];
    HM_CHECK(hm_gemm_prefer_ws(&as_run, b->m));
    HM_CHECK(add_candidate(w, &base, &ranked[i]));
    HM_CHECK(add_candidate(w, &base, &as_run.tuning));
  }
  return HM_OK;
}

/* Candidate i's medians at the bucket's ends: us[0] at its smallest M, us[1] at b->m. */
static hm_status time_ends(hm_engine *e, hm_tuner_bench *bench, const hm_tune_request *req,
                           const bucket_work *w, int i, const hm_tune_bucket *b, double us[2]) {
  const int reps = req->reps > 0 ? req->reps : DEFAULT_REPS, chain = chain_of(req);
  hm_kernel *k = NULL;
  HM_CHECK(hm_kernel_get(e, &w->src[i], &k));
  HM_CHECK(hm_tuner_bench_time(bench, k, &w->cfg[i], b->m, reps, chain, &us[1]));
  us[0] = us[1];
  if (b->m_lo + 1 < b->m)
    HM_CHECK(hm_tuner_bench_time(bench, k, &w->cfg[i], b->m_lo + 1, reps, chain, &us[0]));
  return HM_OK;
}

static hm_status time_bucket(hm_engine *e, hm_tuner_bench *bench, const hm_tune_request *req, bucket_work *w,
                             hm_tune_bucket *b) {
  double heur[2], best = WIN_MARGIN;
  for (int i = 0; i < w->count; i++) {
    double us[2];
    HM_CHECK(time_ends(e, bench, req, w, i, b, us));
    b->timed++;
    if (i == 0) {
      heur[0] = us[0], heur[1] = us[1];
      b->heuristic_us = b->tuned_us = us[1];
      b->tuned = w->cfg[0].tuning;
      continue;
    }
    if (i == 1) b->default_us = us[1];
    const double worst = fmax(us[0] / heur[0], us[1] / heur[1]);
    if (worst < best) {
      best = worst;
      b->tuned_us = us[1];
      b->tuned = w->cfg[i].tuning;
    }
  }
  HM_INFO(TUNE, "M in (%lld, %lld] at %lld and %lld: %d candidates, heuristic %.2f us, tuned %.2f us",
          (long long)b->m_lo, (long long)b->m_hi, (long long)(b->m_lo + 1), (long long)b->m, w->count,
          b->heuristic_us, b->tuned_us);
  return HM_OK;
}

static hm_status entry_of(const hm_tune_request *req, const hm_tune_identity *id, int arch, const hm_tune_bucket *b,
                          hm_tune_entry *out) {
  hm_gemm_config base;
  HM_CHECK(hm_gemm_config_from_layer(req->layer, req->type, arch, &base));
  memset(out, 0, sizeof(*out));
  out->id = *id;
  hm_tune_layer_key(&base, out->layer, sizeof(out->layer));
  out->m_lo = b->m_lo;
  out->m_hi = b->m_hi;
  out->tuning = b->tuned;
  out->tuned_us = b->tuned_us;
  out->heuristic_us = b->heuristic_us;
  out->chain = chain_of(req);
  return HM_OK;
}

static void free_work(bucket_work *w, int buckets) {
  for (int i = 0; i < buckets; i++)
    for (int j = 0; j < w[i].count; j++) hm_gemm_source_free(&w[i].gen[j]);
}

/* Compiles every bucket's candidates together; the JIT keeps the cubins for hm_kernel_get. */
static hm_status compile_all(bucket_work *w, int buckets) {
  hm_kernel_source all[HM_GEMM_PLAN_MAX * MAX_PER_BUCKET];
  const hm_cubin *cubins[HM_GEMM_PLAN_MAX * MAX_PER_BUCKET];
  int n = 0;
  for (int i = 0; i < buckets; i++)
    for (int j = 0; j < w[i].count; j++) all[n++] = w[i].src[j];
  return hm_jit_get_cubins(all, n, cubins);
}

static hm_status run_buckets(hm_engine *e, const hm_tune_request *req, const hm_device_profile *p,
                             hm_tune_result *out, bucket_work *work) {
  for (int i = 0; i < hm_choose_bucket_count(); i++) {
    hm_tune_bucket *b = &out->buckets[out->count];
    memset(b, 0, sizeof(*b));
    hm_choose_bucket(req->layer, req->type, i, &b->m_lo, &b->m_hi);
    if (req->max_m > 0 && b->m_lo >= req->max_m) continue;
    if (!hm_tuner_bucket_timed(req->layer, req->type, b->m_lo, b->m_hi)) {
      HM_INFO(TUNE, "%s M in (%lld, %lld]: too large for the tuner's bench, the heuristic's choice serves",
              hm_gemm_type_name(req->type), (long long)b->m_lo, (long long)b->m_hi);
      continue;
    }
    b->m = timed_m(b->m_lo, b->m_hi);
    const hm_status st = gather(req, p, b, &work[out->count]);
    out->count++; /* so that its sources are freed even when gathering failed */
    HM_CHECK(st);
  }
  HM_CHECK(compile_all(work, out->count));
  hm_tuner_bench bench;
  HM_CHECK(hm_tuner_bench_create(e, req, (size_t)p->l2_bytes, &bench));
  hm_status ret = HM_OK;
  for (int i = 0; i < out->count; i++)
    HM_CHECK_GOTO(time_bucket(e, &bench, req, &work[i], &out->buckets[i]), done);
done:
  hm_tuner_bench_destroy(&bench);
  return ret;
}

hm_status hm_tuner_run(hm_engine *engine, const hm_tune_request *req, hm_tune_result *out) {
  HM_CHECK_NOT_NULL(engine);
  HM_CHECK_NOT_NULL(req);
  HM_CHECK_NOT_NULL(req->layer);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (req->shared < 0 ||
      (req->shared > 0 && (req->type == HM_GEMM_DENSE || req->shared >= req->layer->top_k)))
    HM_FAIL(HM_INVALID_ARGUMENT, "tune: %d shared experts in a %s launch of top_k %d", req->shared,
            hm_gemm_type_name(req->type), req->layer->top_k);
  if (req->max_m < 0) HM_FAIL(HM_INVALID_ARGUMENT, "tune: buckets below valid M %lld", (long long)req->max_m);
  if (engine->kind != HM_BACKEND_CUDA) HM_FAIL(HM_UNSUPPORTED, "tuning needs a CUDA engine");
  hm_device_profile p;
  hm_tune_identity id;
  HM_CHECK(hm_device_profile_for_engine(engine, &p));
  /* A profile named in HUMMING_DEVICE_PROFILE ranks candidates; they are built for this GPU. */
  HM_CHECK(hm_heuristics_arch(engine, &p.arch));
  HM_CHECK(hm_tune_identity_for_engine(engine, &id));
  bucket_work *work = calloc(HM_GEMM_PLAN_MAX, sizeof(*work));
  if (work == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "tuner work");
  hm_status ret = run_buckets(engine, req, &p, out, work);
  for (int i = 0; ret == HM_OK && i < out->count; i++)
    ret = entry_of(req, &id, p.arch, &out->buckets[i], &out->entries[i]);
  free_work(work, out->count);
  free(work);
  return ret;
}
