/* SPDX-License-Identifier: Apache-2.0 */
/*
 * humming-moe tune --plan --gaps: where a layer's kernel table loses to the cost model's
 * own best kernel. A table holds one kernel per M bucket, judged over the whole bucket;
 * walked over token counts a factor sqrt(2) apart, each point's table kernel is priced
 * against the best candidate there. What bucket ends are worth is read from these lines
 * (docs/PERF.md, eighteenth session); they are the model's, not measurements.
 */
#include "cli/tune_gaps.h"

#include <math.h>
#include <stdio.h>

#include "check.h"
#include "heuristics/choose.h"

#define GAPS_MAX_TOKENS 16384
/* Points where the table's kernel is predicted this much slower than the best get a line. */
#define GAPS_SHOWN 1.10

typedef struct gap_sums {
  int points;
  double log_ratio, plan_us, best_us, worst;
  int64_t worst_tokens;
} gap_sums;

/* Predicted microseconds of tuning t on lc's type at valid M m. */
static hm_status predicted(const hm_layer_config *lc, const hm_gemm_config *base, const hm_gemm_tuning *t,
                           int64_t m, const hm_device_profile *p, double *us) {
  hm_gemm_config cfg = *base;
  cfg.tuning = *t;
  hm_choose_cost c;
  HM_CHECK(hm_choose_cost_of(lc, &cfg, m, p, &c));
  *us = c.predicted_us;
  return HM_OK;
}

/* One token count: the table's kernel against the model's best, a line where it loses. */
static hm_status gap_at(const hm_model_layer *l, hm_gemm_type type, const hm_gemm_plan *plan, int64_t tokens,
                        const hm_device_profile *p, gap_sums *s) {
  const hm_layer_config *lc = &l->config;
  const int64_t m = tokens * hm_choose_token_rows(lc, type);
  const hm_gemm_config *pick = &plan->cfg[hm_gemm_plan_pick(plan, m)];
  hm_gemm_tuning best;
  int n = 0;
  double plan_us = 0, best_us = 0;
  HM_CHECK(hm_choose_ranked(lc, type, p, m, &best, 1, &n));
  HM_CHECK(predicted(lc, pick, &pick->tuning, m, p, &plan_us));
  HM_CHECK(predicted(lc, pick, n > 0 ? &best : &pick->tuning, m, p, &best_us));
  const double ratio = best_us > 0 ? plan_us / best_us : 1.0;
  s->points++;
  s->log_ratio += log(ratio);
  s->plan_us += plan_us;
  s->best_us += best_us;
  if (ratio > s->worst) s->worst = ratio, s->worst_tokens = tokens;
  if (ratio < GAPS_SHOWN) return HM_OK;
  char a[96], b[96];
  hm_gemm_tuning_name(&pick->tuning, a, sizeof(a));
  hm_gemm_tuning_name(&best, b, sizeof(b));
  printf("  %-16s %-18s %7lld %9lld %11.2f %11.2f %6.2fx  %s -> %s\n", l->role, hm_gemm_type_name(type),
         (long long)tokens, (long long)m, plan_us, best_us, ratio, a, b);
  return HM_OK;
}

hm_status hm_cli_tune_gaps(const hm_model_layer *l, hm_gemm_type type, const hm_device_profile *p) {
  hm_gemm_plan plan;
  HM_CHECK(hm_choose_plan(&l->config, type, p, &plan));
  gap_sums s = {0, 0, 0, 0, 1.0, 1};
  int64_t last = 0;
  for (double t = 1; t <= GAPS_MAX_TOKENS; t *= M_SQRT2) {
    const int64_t tokens = llround(t);
    if (tokens == last) continue;
    last = tokens;
    HM_CHECK(gap_at(l, type, &plan, tokens, p, &s));
  }
  printf(
      "# %-16s %-18s %d token counts: table / best %.3f (geometric mean), worst %.2fx at %lld tokens; "
      "summed %.1f / %.1f us\n",
      l->role, hm_gemm_type_name(type), s.points, exp(s.log_ratio / s.points), s.worst,
      (long long)s.worst_tokens, s.plan_us, s.best_us);
  return HM_OK;
}

void hm_cli_tune_gaps_header(void) {
  printf(
      "# lines where the table's kernel is predicted %.2fx the best or more, then a summary a layer and "
      "type\n",
      GAPS_SHOWN);
  printf("# %-16s %-18s %7s %9s %11s %11s %7s  %s\n", "layer", "type", "tokens", "valid_M", "table_us",
         "best_us", "ratio", "table -> best");
}
