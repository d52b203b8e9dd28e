/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Choosing among the candidates: per bucket of valid M, the one with the least cost
 * relative to the roofline summed over the bucket's sample points (relative, so that a
 * bucket's large-M end does not drown its small-M start), ties within the model's
 * resolution going to the measured fixed table, and the kernel table built from the
 * buckets.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "heuristics/choose.h"
#include "log.h"

/* Upper ends of a dense layer's buckets, in rows; the last bucket is open. 8 rows is the
 * decode tile's height; from 128 to 2048 rows they double, as the MoE ones below. */
static const int64_t dense_rows[] = {1, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
/*
 * A MoE layer's, in rows per expert as 64ths. At decode an expert sees a fraction of a
 * row (DeepSeek-V3, top 8 of 256: 1/32 a token), and 1-4 tokens (<= 1/8) want other
 * kernels than 16 (1/2): two CTAs an SM, data-parallel or Stream-K one (docs/PERF.md
 * eighth session). One token (1/32) has its own: DeepSeek-V3's gate_up ran it 1.07x
 * faster on Stream-K one CTA an SM than on the two that four tokens want (1.09x the
 * other way; eleventh session). Between 4 and 64 rows an expert the best tile by the cost
 * model changes twice in a 4x range: 8-row tiles at 4 rows, 16-row or taller ones at 16
 * (W4A16 DeepSeek-V3 gate_up at 128 tokens 1.34x slower on the tile judged over 4-16 rows,
 * down at 362 tokens 1.24x; W4A8 1.6x at 16-22 rows on the tile judged over 16-64), so
 * buckets end at 8 and 32 rows as well: by the model alone (not yet measured), MoE launches
 * of 65-2048 tokens of DeepSeek-V3 and Qwen3 take 4 % less predicted time on the H200 (W4A8
 * 8.5 %, W4A16 2.8 %, W8A8 1.8 %), 5.6 % on the H20. Past 512 rows an expert (dense: 512 rows)
 * the warp-specialized tiles take 256 tokens (HM_GEMM_TALL_ROWS).
 */
static const int64_t moe_rows_x64[] = {2, 8, 32, 64, 256, 512, 1024, 2048, 4096, 8192, 32768};
#define BUCKETS ((int)HM_ARRAY_SIZE(dense_rows) + 1)
#define SAMPLES 3

_Static_assert(HM_ARRAY_SIZE(moe_rows_x64) == HM_ARRAY_SIZE(dense_rows), "one bucket count for every layer");
_Static_assert(BUCKETS <= HM_GEMM_PLAN_MAX, "a layer's kernel table holds one kernel per bucket at most");

int hm_choose_bucket_count(void) { return BUCKETS; }

bool hm_choose_tuning_equal(const hm_gemm_tuning *a, const hm_gemm_tuning *b) {
  return a->bm == b->bm && a->bn == b->bn && a->bk == b->bk && a->warps_m == b->warps_m &&
         a->warps_n == b->warps_n && a->warps_k == b->warps_k && a->stages == b->stages &&
         a->stream_k == b->stream_k && a->sk_min_iters == b->sk_min_iters &&
         a->ctas_per_sm == b->ctas_per_sm && a->mma == b->mma && a->ws == b->ws;
}

/* Upper end of bucket index < BUCKETS - 1; a bucket is at least a row wide, for layers of
 * few experts. */
static int64_t bucket_end(const hm_layer_config *lc, hm_gemm_type type, int index) {
  if (type == HM_GEMM_DENSE || lc->experts <= 1) return dense_rows[index];
  const int64_t end = (moe_rows_x64[index] * lc->experts + 63) / 64;
  const int64_t at_least = index > 0 ? bucket_end(lc, type, index - 1) + 1 : 1;
  return end > at_least ? end : at_least;
}

void hm_choose_bucket(const hm_layer_config *lc, hm_gemm_type type, int index, int64_t *m_lo, int64_t *m_hi) {
  *m_lo = index <= 0 ? 0 : bucket_end(lc, type, index - 1);
  *m_hi = index >= BUCKETS - 1 ? INT64_MAX : bucket_end(lc, type, index);
}

int64_t hm_choose_bucket_m(int64_t m_lo, int64_t m_hi) {
  if (m_hi == INT64_MAX) return m_lo > 0 ? 4 * m_lo : 4096;
  return m_hi;
}

/*
 * Start, geometric middle and judging point of (m_lo, m_hi], none below one token's
 * token_rows: a MoE launch holds whole tokens, top_k rows on top_k experts each. Judged at
 * one row, one expert's few tiles made Stream-K look needed where one token of DeepSeek-V3's
 * down (8 rows) ran data-parallel two CTAs an SM in 24.8 us, Stream-K in 29.9 (H200,
 * docs/PERF.md tenth session). A bucket that ends below one token, never launched, is
 * judged at its end.
 */
static void sample_points(int64_t m_lo, int64_t m_hi, int token_rows, int64_t out[SAMPLES]) {
  const int64_t last = hm_choose_bucket_m(m_lo, m_hi);
  int64_t first = m_lo + 1 > token_rows ? m_lo + 1 : token_rows;
  if (first > last) first = last;
  out[0] = first;
  out[1] = (int64_t)llround(sqrt((double)first * (double)last));
  out[2] = last;
}

static hm_status base_config(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *p,
                             hm_gemm_config *out) {
  HM_CHECK_NOT_NULL(lc);
  HM_CHECK_NOT_NULL(p);
  HM_CHECK(hm_gemm_config_from_layer(lc, type, p->arch, out));
  /* Checked before the candidates, which it would turn down one by one in silence. */
  return hm_gemm_config_check_layer(out);
}

int hm_choose_token_rows(const hm_layer_config *lc, hm_gemm_type type) {
  return type != HM_GEMM_DENSE && lc->top_k > 1 ? lc->top_k : 1;
}

hm_status hm_choose_score(const hm_layer_config *lc, const hm_gemm_config *cfg, const hm_device_profile *p,
                          int64_t m_lo, int64_t m_hi, double *score, double *predicted_us) {
  int64_t ms[SAMPLES];
  sample_points(m_lo, m_hi, hm_choose_token_rows(lc, cfg->compute.type), ms);
  *score = 0;
  for (int s = 0; s < SAMPLES; s++) {
    hm_choose_cost c;
    HM_CHECK(hm_choose_cost_of(lc, cfg, ms[s], p, &c));
    *score += c.predicted_us / c.roofline_us;
    if (predicted_us) *predicted_us = c.predicted_us;
  }
  return HM_OK;
}

/*
 * Whether b is the fixed table's tuning under another schedule (Stream-K, CTAs an SM) and
 * that tuning the swapped decode tile: the cost model's schedule terms were fitted to that
 * tile run under each (choose_cost.c), so their order among its schedules stands. Other
 * tiles keep the table's measured schedule within the model's resolution.
 */
static bool decode_reschedule(const hm_gemm_tuning *table, const hm_gemm_tuning *b) {
  hm_gemm_tuning rescheduled = *b;
  rescheduled.stream_k = table->stream_k;
  rescheduled.sk_min_iters = table->sk_min_iters;
  rescheduled.ctas_per_sm = table->ctas_per_sm;
  return table->bm == 8 && hm_choose_tuning_equal(&rescheduled, table);
}

/* Whether cfg's tile runs alone on its SM on profile p. */
static bool runs_alone(const hm_gemm_config *cfg, const hm_device_profile *p) {
  return hm_gemm_exclusive_sm(cfg) && hm_choose_tuning_legal(cfg, &cfg->tuning, p);
}

/*
 * The measured decode tiles of a dense 4-bit weight-only GEMM (the format measured) whose
 * 64-column units are about one a SM: one unit a CTA over the whole K, data-parallel, the
 * table's 8 or 16 rows, instead of Stream-K over 256-column tiles. Alone on its SM
 * (hm_gemm_exclusive_sm), such a CTA publishes no partial and waits for none. N = 8192 on
 * an H100, bk 256, four warps along k, eight stages (docs/PERF.md, twenty-fifth session):
 * 8 rows ran 1.18-1.19x faster at K = 8192 and one to eight tokens, 1.23x at K = 4096 and
 * 1.07x at K = 32768 at one token; 16 rows at 16 tokens 1.19x at K = 4096 and 1.09x at
 * K = 8192, but 0.93x at K = 32768. The 8-row tile then went to bk 512, eight warps along
 * k and four stages: 1.084x on an H200, whose loop the warps' issue rate sets (two warps a
 * scheduler hide what one cannot), and 1.02x on an H100, whose DRAM sets it (N = K = 8192
 * at one token; thirty-fifth and thirty-sixth sessions); at 16 rows the same 1.07x on an
 * H200 (15.89 against 17.00 us, sixteen warps along k 16.76; fortieth session). The 8-row
 * tile on six stages ran 1.03x (one and two tokens) and 1.045x (eight) faster than on four
 * at N = K = 8192 on an H100, five 1.03x throughout, seven within 1 % of six; at 16 rows six
 * were level (forty-third session): more weight in flight where one CTA an SM streams alone.
 * At 16 rows k-tiles of 1024 on three stages ran 1.02x faster than bk 512 on four (N = K =
 * 8192, H100, forty-fourth session: the loop 1.13x shorter, half the iterations of a loop
 * whose warps set its pace, the first stage later). The 8-row tile is offered where K
 * fills its ring, six stages or else four (it was measured on 16 k-tiles); at 16 rows only
 * on the 16 k-tiles of 512 measured, since the model scores it below Stream-K at K = 4096
 * (where the bk 256 tile ran 1.19x faster) and above it at K = 32768 (where that tile ran
 * 0.93x). Elsewhere the bk 256 one stands.
 * Units within 7/8 of the SMs, as Stream-K's tile-aligned split (hm_sk_ctas); the table
 * only knows the arch, so it is settled here.
 */
bool hm_choose_unit_tile(const hm_gemm_config *base, const hm_device_profile *p, int bm,
                         hm_gemm_tuning *out) {
  const int64_t units = (base->layer.n + 63) / 64;
  const bool w4a16 = hm_gemm_weight_bits(base->layer.weight) == 4 &&
                     (base->layer.act == HM_F16 || base->layer.act == HM_BF16);
  if ((bm != 8 && bm != 16) || !w4a16 || units > p->sm_count || 8 * units < 7 * (int64_t)p->sm_count)
    return false;
  const hm_gemm_tuning deep = {bm, 64, 512, 1, 1, 8, 4, false, 0, 1, HM_MMA_SYNC, false};
  hm_gemm_tuning ring6 = deep;
  ring6.stages = 6;
  const hm_gemm_tuning long16 = {bm, 64, 1024, 1, 1, 8, 3, false, 0, 1, HM_MMA_SYNC, false};
  const hm_gemm_tuning unit = {bm, 64, 256, 1, 1, 4, 8, false, 0, 1, HM_MMA_SYNC, false};
  hm_gemm_config cfg = *base;
  cfg.tuning = deep;
  const int64_t k_tiles = hm_gemm_k_iters(&cfg);
  const struct {
    hm_gemm_tuning tuning;
    bool offered;
  } order[] = {{ring6, bm == 8 && k_tiles >= ring6.stages},
               {long16, bm == 16 && k_tiles == 16},
               {deep, bm == 8 ? k_tiles >= deep.stages : k_tiles == 16},
               {unit, true}};
  for (size_t i = 0; i < HM_ARRAY_SIZE(order); i++) {
    cfg.tuning = order[i].tuning;
    if (order[i].offered && runs_alone(&cfg, p)) {
      *out = cfg.tuning;
      return true;
    }
  }
  return false;
}

/*
 * The unit tile of the table's rows, where the table holds the tile that runs alone on its
 * SM. It joins the table's own tile rather than replacing it: where the model scores that
 * one better, it stands (16 rows at K = 32768, as measured; 8 rows at K = 32768 and eight
 * tokens, not measured).
 */
static bool unit_per_sm_decode(const hm_gemm_config *table, const hm_device_profile *p, hm_gemm_tuning *out) {
  return hm_gemm_exclusive_sm(table) && hm_choose_unit_tile(table, p, table->tuning.bm, out);
}

/* The best score seen, and the candidate that scored it. */
typedef struct scored {
  int index;
  double score, predicted_us;
} scored;

static void keep_if_better(scored *kept, int index, double score, double predicted_us, bool wins_ties) {
  if (score < kept->score || (wins_ties && score <= kept->score))
    *kept = (scored){index, score, predicted_us};
}

/*
 * The index of the best of cands over (m_lo, m_hi], and its predicted time at the judging
 * point. The fixed table's tuning, which measurements chose, wins when it scores within the
 * model's resolution of the best (HM_CHOOSE_MODEL_RESOLUTION); for the swapped decode tile,
 * under the schedule that scores best (the table's own on exact ties). The table holds its
 * tiles as they run (hm_gemm_prefer_ws), so a candidate is compared as it would run.
 */
static hm_status pick_best(const hm_layer_config *lc, const hm_gemm_config *base, const hm_device_profile *p,
                           const hm_gemm_tuning *cands, int count, int64_t m_lo, int64_t m_hi, int *best,
                           double *predicted_us) {
  hm_gemm_config table;
  const int64_t judge_m = hm_choose_bucket_m(m_lo, m_hi);
  const bool has_table = hm_gemm_select(base, judge_m, &table) == HM_OK;
  hm_gemm_tuning unit;
  const bool has_unit = has_table && unit_per_sm_decode(&table, p, &unit);
  scored overall = {-1, INFINITY, 0}, table_tile = {-1, INFINITY, 0};
  for (int i = 0; i < count; i++) {
    hm_gemm_config cfg = *base;
    cfg.tuning = cands[i];
    double score = 0, at_judge = 0;
    HM_CHECK(hm_choose_score(lc, &cfg, p, m_lo, m_hi, &score, &at_judge));
    keep_if_better(&overall, i, score, at_judge, false);
    hm_gemm_config as_run = cfg;
    HM_CHECK(hm_gemm_prefer_ws(&as_run, judge_m));
    const bool is_table = (has_table && hm_choose_tuning_equal(&as_run.tuning, &table.tuning)) ||
                          (has_unit && hm_choose_tuning_equal(&as_run.tuning, &unit));
    if (is_table || (has_table && decode_reschedule(&table.tuning, &cands[i])))
      keep_if_better(&table_tile, i, score, at_judge, is_table);
  }
  if (overall.index < 0)
    HM_FAIL(HM_UNSUPPORTED, "no legal GEMM tuning for N=%lld K=%lld E=%lld on %s", (long long)lc->n,
            (long long)lc->k, (long long)lc->experts, p->name);
  const bool tie =
      table_tile.index >= 0 && table_tile.score <= overall.score * (1.0 + HM_CHOOSE_MODEL_RESOLUTION);
  const scored *chosen = tie ? &table_tile : &overall;
  *best = chosen->index;
  *predicted_us = chosen->predicted_us;
  return HM_OK;
}

hm_status hm_choose_config(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                           int64_t m_lo, int64_t m_hi, hm_gemm_config *out, double *predicted_us) {
  HM_CHECK_NOT_NULL(out);
  if (m_lo < 0 || m_hi <= m_lo) HM_FAIL(HM_INVALID_ARGUMENT, "M range (%lld, %lld]", (long long)m_lo, (long long)m_hi);
  hm_gemm_config base;
  HM_CHECK(base_config(lc, type, profile, &base));
  hm_gemm_tuning *cands = NULL;
  int count = 0, best = -1;
  double predicted = 0;
  HM_CHECK(hm_choose_candidates(&base, profile, &cands, &count));
  hm_status ret = pick_best(lc, &base, profile, cands, count, m_lo, m_hi, &best, &predicted);
  if (ret == HM_OK) {
    *out = base;
    out->tuning = cands[best];
    if (predicted_us) *predicted_us = predicted;
    ret = hm_gemm_prefer_ws(out, hm_choose_bucket_m(m_lo, m_hi));
  }
  free(cands);
  return ret;
}

typedef struct ranked_item {
  double us;
  int index;
} ranked_item;

static int compare_ranked(const void *a, const void *b) {
  const ranked_item *x = a, *y = b;
  if (x->us != y->us) return x->us < y->us ? -1 : 1;
  return x->index - y->index;
}

hm_status hm_choose_ranked(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                           int64_t valid_m, hm_gemm_tuning *out, int max, int *count) {
  HM_CHECK_NOT_NULL(out);
  HM_CHECK_NOT_NULL(count);
  *count = 0;
  hm_gemm_config base;
  HM_CHECK(base_config(lc, type, profile, &base));
  hm_status ret = HM_OK;
  hm_gemm_tuning *cands = NULL;
  ranked_item *items = NULL;
  int n = 0;
  HM_CHECK(hm_choose_candidates(&base, profile, &cands, &n));
  items = calloc((size_t)(n ? n : 1), sizeof(*items));
  if (items == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "%d ranked candidates", n);
  for (int i = 0; i < n; i++) {
    hm_gemm_config cfg = base;
    cfg.tuning = cands[i];
    hm_choose_cost c;
    HM_CHECK_GOTO(hm_choose_cost_of(lc, &cfg, valid_m, profile, &c), done);
    items[i] = (ranked_item){c.predicted_us, i};
  }
  qsort(items, (size_t)n, sizeof(*items), compare_ranked);
  for (int i = 0; i < n && i < max; i++) out[(*count)++] = cands[items[i].index];
done:
  free(items);
  free(cands);
  return ret;
}

hm_status hm_choose_plan(const hm_layer_config *lc, hm_gemm_type type, const hm_device_profile *profile,
                         hm_gemm_plan *out) {
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  hm_gemm_config base;
  HM_CHECK(base_config(lc, type, profile, &base));
  hm_status ret = HM_OK;
  hm_gemm_tuning *cands = NULL;
  int count = 0;
  HM_CHECK(hm_choose_candidates(&base, profile, &cands, &count));
  for (int b = 0; b < BUCKETS; b++) {
    int64_t lo, hi;
    int best = -1;
    double predicted = 0;
    hm_choose_bucket(lc, type, b, &lo, &hi);
    HM_CHECK_GOTO(pick_best(lc, &base, profile, cands, count, lo, hi, &best, &predicted), done);
    hm_gemm_config as_run = base;
    as_run.tuning = cands[best];
    HM_CHECK_GOTO(hm_gemm_prefer_ws(&as_run, hm_choose_bucket_m(lo, hi)), done);
    const int last = out->count - 1;
    if (last >= 0 && hm_choose_tuning_equal(&out->cfg[last].tuning, &as_run.tuning)) {
      out->m_hi[last] = hi;
      continue;
    }
    out->cfg[out->count] = as_run;
    out->m_hi[out->count++] = hi;
  }
done:
  free(cands);
  return ret;
}
