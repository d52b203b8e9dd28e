/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading one FFN layer of one rank: which source matrices, which of their rows and
 * columns (expert range, TP slice, act-order), through the adapter, into the
 * canonical contract. gate_up is [gate; up] along N.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapter.h"
#include "check.h"
#include "numfmt.h"
#include "pack.h"

/* Everything one expert of the layer reads. */
struct expert_src {
  hm_src_matrix gate, up, down; /* fused gate_up: in gate, up unused */
  int64_t *inter;               /* (I) intermediate order, from down's act-order */
  int64_t *hidden;              /* (H) gate_up column order, from gate's act-order */
  int64_t *rows_a, *rows_b;     /* source rows of the two gate_up parts, or of down */
};

struct layer_job {
  hm_ckpt *ck;
  const char *name;
  const hm_ckpt_ffn *ffn;
  hm_ckpt_proj proj;
  int tp_rank, tp_size;
  int64_t slice; /* I / tp_size */
  int64_t n, k;  /* local output shape */
  hm_host_weights *out;
  hm_ckpt_extras *extras;
};

static void expert_src_free(struct expert_src *s) {
  hm_src_release(&s->gate);
  hm_src_release(&s->up);
  hm_src_release(&s->down);
  free(s->inter);
  free(s->hidden);
  free(s->rows_a);
  free(s->rows_b);
  memset(s, 0, sizeof(*s));
}

static hm_status open_one(const struct layer_job *job, const char *proj, int64_t expert, int64_t n, int64_t k,
                          hm_src_matrix *m) {
  const hm_ckpt_ffn *f = job->ffn;
  char module[192];
  hm_src_request req = {module, -1, f->experts, n, k};
  if (f->fused) {
    snprintf(module, sizeof(module), "%s.%s", f->prefix, proj);
    req.expert = expert;
  } else if (f->kind == HM_FFN_ROUTED) {
    snprintf(module, sizeof(module), "%s.%lld.%s", f->prefix, (long long)expert, proj);
  } else {
    snprintf(module, sizeof(module), "%s.%s", f->prefix, proj);
  }
  return hm_adapter_open(job->ck, &req, m);
}

/* Columns of a source in act-order (stable by group); the identity without g_idx. */
static hm_status act_order(const hm_src_matrix *m, int64_t **out) {
  int64_t *order = malloc((size_t)m->k * sizeof(*order));
  int64_t *start = calloc((size_t)m->groups + 1, sizeof(*start));
  if (order == NULL || start == NULL) {
    free(order);
    free(start);
    HM_FAIL(HM_OUT_OF_MEMORY, "%s: act-order of %lld columns", m->module, (long long)m->k);
  }
  for (int64_t c = 0; c < m->k; c++) {
    if (m->g_idx)
      start[m->g_idx[c] + 1]++;
    else
      order[c] = c;
  }
  if (m->g_idx) {
    for (int64_t g = 0; g < m->groups; g++) start[g + 1] += start[g];
    for (int64_t c = 0; c < m->k; c++) order[start[m->g_idx[c]]++] = c;
  }
  free(start);
  *out = order;
  return HM_OK;
}

static hm_status identity_order(int64_t count, int64_t **out) {
  *out = malloc((size_t)count * sizeof(**out));
  if (*out == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "order of %lld entries", (long long)count);
  for (int64_t i = 0; i < count; i++) (*out)[i] = i;
  return HM_OK;
}

static bool is_identity(const int64_t *order, int64_t count) {
  for (int64_t i = 0; i < count; i++)
    if (order[i] != i) return false;
  return true;
}

static hm_status same_g_idx(const hm_src_matrix *a, const hm_src_matrix *b) {
  bool same = (a->g_idx == NULL) == (b->g_idx == NULL);
  for (int64_t i = 0; same && a->g_idx && i < a->k; i++) same = a->g_idx[i] == b->g_idx[i];
  if (!same)
    HM_FAIL(HM_UNSUPPORTED,
            "%s and %s have different act-orders (g_idx); fused gate_up needs one input order", a->module,
            b->module);
  return HM_OK;
}

static hm_status open_expert(const struct layer_job *job, int64_t e, struct expert_src *s) {
  const hm_ckpt_ffn *f = job->ffn;
  int64_t h = f->hidden, inter = f->intermediate;
  if (job->proj == HM_PROJ_DOWN || !f->fused)
    HM_CHECK(open_one(job, f->fused ? "down_proj" : f->down, e, h, inter, &s->down));
  if (job->proj == HM_PROJ_GATE_UP && f->fused) {
    HM_CHECK(open_one(job, "gate_up_proj", e, 2 * inter, h, &s->gate));
  } else if (job->proj == HM_PROJ_GATE_UP) {
    HM_CHECK(open_one(job, f->gate, e, inter, h, &s->gate));
    HM_CHECK(open_one(job, f->up, e, inter, h, &s->up));
    HM_CHECK(same_g_idx(&s->gate, &s->up));
  }
  if (s->down.codes)
    HM_CHECK(act_order(&s->down, &s->inter));
  else
    HM_CHECK(identity_order(inter, &s->inter)); /* fused gate_up: no act-order */
  if (job->proj == HM_PROJ_GATE_UP) HM_CHECK(act_order(&s->gate, &s->hidden));
  return HM_OK;
}

/* Which source rows and columns land where, for one expert. */
static hm_status plan_parts(const struct layer_job *job, struct expert_src *s, hm_asm_part *parts,
                            int *n_parts) {
  const int64_t *slice = s->inter + (int64_t)job->tp_rank * job->slice;
  int64_t rows = job->proj == HM_PROJ_GATE_UP ? job->slice : job->n;
  s->rows_a = malloc((size_t)rows * sizeof(int64_t));
  s->rows_b = malloc((size_t)rows * sizeof(int64_t));
  if (s->rows_a == NULL || s->rows_b == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%s: row lists", job->name);
  if (job->proj == HM_PROJ_DOWN) {
    for (int64_t i = 0; i < rows; i++) s->rows_a[i] = i;
    parts[0] = (hm_asm_part){&s->down, s->rows_a, rows, slice, 0};
    *n_parts = 1;
    return HM_OK;
  }
  /* gpt-oss interleaves gate and up rows: gate i is row 2i, up i is row 2i+1. */
  bool fused = job->ffn->fused;
  for (int64_t i = 0; i < rows; i++) {
    s->rows_a[i] = fused ? 2 * slice[i] : slice[i];
    s->rows_b[i] = fused ? 2 * slice[i] + 1 : slice[i];
  }
  parts[0] = (hm_asm_part){&s->gate, s->rows_a, rows, s->hidden, 0};
  parts[1] = (hm_asm_part){fused ? &s->gate : &s->up, s->rows_b, rows, s->hidden, rows};
  *n_parts = 2;
  return HM_OK;
}

static bool same_format(const hm_quant_format *a, const hm_quant_format *b) {
  return a->weight == b->weight && a->scale == b->scale && a->scale_kind == b->scale_kind &&
         a->group_k == b->group_k && a->group_n == b->group_n && a->zero_point == b->zero_point &&
         a->global_scale == b->global_scale;
}

static hm_status check_parts_format(const struct layer_job *job, const hm_asm_part *parts, int n_parts) {
  for (int i = 0; i < n_parts; i++) {
    if (!same_format(&parts[i].src->fmt, &job->out->fmt))
      HM_FAIL(HM_CORRUPT, "%s: %s is stored in another format than the rest of layer %s",
              hm_ckpt_dir(job->ck), parts[i].src->module, job->name);
  }
  return HM_OK;
}

static hm_status alloc_out(const struct layer_job *job, const hm_quant_format *fmt, int64_t experts) {
  int64_t gk = fmt->scale_kind == HM_SCALE_GROUP || fmt->scale_kind == HM_SCALE_BLOCK ? fmt->group_k : 1;
  if (job->k % gk != 0)
    HM_FAIL(HM_UNSUPPORTED, "%s: TP slice of %lld input columns is not a multiple of the scale group %lld",
            job->name, (long long)job->k, (long long)gk);
  return hm_host_weights_alloc(job->out, fmt, experts, job->n, job->k);
}

/* Bias rows of one part, from <module>.bias or, fused, <module>_bias (E, n). */
static hm_status read_bias(const struct layer_job *job, const hm_asm_part *p, int64_t e, int64_t expert) {
  char name[224];
  bool fused = job->ffn->fused;
  snprintf(name, sizeof(name), fused ? "%s_bias" : "%s.bias", p->src->module);
  if (!hm_ckpt_has(job->ck, name)) return HM_OK;
  hm_ckpt_tensor t;
  HM_CHECK(hm_ckpt_get(job->ck, name, &t));
  hm_st_dtype dt = t.st->dtype;
  int64_t shape[2] = {job->ffn->experts, p->src->n};
  if (dt != HM_ST_F32 && dt != HM_ST_BF16 && dt != HM_ST_F16)
    dt = HM_ST_F32; /* expect() names the mismatch */
  HM_CHECK(hm_ckpt_expect(job->ck, name, dt, fused ? 2 : 1, fused ? shape : shape + 1, &t));
  if (job->extras == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: layer %s has a bias; pass extras to receive it", t.file, job->name);
  if (job->extras->bias == NULL) {
    job->extras->bias = calloc((size_t)(job->out->experts * job->n), sizeof(float));
    if (job->extras->bias == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%s: bias", job->name);
  }
  float *bias = job->extras->bias;
  for (int64_t i = 0; i < p->n_rows; i++) {
    int64_t at = (fused ? expert * p->src->n : 0) + p->rows[i];
    float v = dt == HM_ST_F32    ? hm_st_load_f32(t.st->data, at)
              : dt == HM_ST_BF16 ? hm_bf16_to_f32(hm_st_load_u16(t.st->data, at))
                                 : hm_f16_to_f32(hm_st_load_u16(t.st->data, at));
    bias[e * job->n + p->dst_row + i] = v;
  }
  return HM_OK;
}

/* act-order on gate_up: the layer gathers activation columns through k_perm. */
static hm_status store_k_perm(const struct layer_job *job, const struct expert_src *s, int64_t e) {
  if (job->proj != HM_PROJ_GATE_UP || is_identity(s->hidden, job->k)) return HM_OK;
  if (job->extras == NULL)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: %s uses act-order (g_idx); pass extras to receive k_perm", job->name,
            s->gate.module);
  if (job->extras->k_perm == NULL) {
    job->extras->k_perm = malloc((size_t)(job->out->experts * job->k) * sizeof(int32_t));
    if (job->extras->k_perm == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "%s: k_perm", job->name);
    for (int64_t x = 0; x < job->out->experts; x++)
      for (int64_t j = 0; j < job->k; j++) job->extras->k_perm[x * job->k + j] = (int32_t)j;
  }
  for (int64_t j = 0; j < job->k; j++) job->extras->k_perm[e * job->k + j] = (int32_t)s->hidden[j];
  return HM_OK;
}

static int64_t zero_groups(const hm_quant_format *fmt, int64_t k) {
  return fmt->scale_kind == HM_SCALE_GROUP ? k / fmt->group_k : 1;
}

static hm_status load_expert(const struct layer_job *job, hm_expert_range range, int64_t e,
                             uint8_t **zero_codes) {
  struct expert_src s;
  memset(&s, 0, sizeof(s));
  hm_asm_part parts[2];
  int n_parts = 0;
  hm_status ret = HM_OK;
  int64_t expert = range.first + e;
  HM_CHECK_GOTO(open_expert(job, expert, &s), done);
  HM_CHECK_GOTO(plan_parts(job, &s, parts, &n_parts), done);
  if (e == 0) {
    HM_CHECK_GOTO(alloc_out(job, &parts[0].src->fmt, range.count), done);
    *zero_codes = calloc((size_t)(zero_groups(&job->out->fmt, job->k) * job->n), 1);
    if (*zero_codes == NULL) HM_FAIL_GOTO(HM_OUT_OF_MEMORY, done, "%s: zero point scratch", job->name);
  }
  HM_CHECK_GOTO(check_parts_format(job, parts, n_parts), done);
  HM_CHECK_GOTO(hm_assemble_expert(parts, n_parts, e, job->out, *zero_codes), done);
  for (int i = 0; i < n_parts; i++) HM_CHECK_GOTO(read_bias(job, &parts[i], e, expert), done);
  HM_CHECK_GOTO(store_k_perm(job, &s, e), done);
  if (job->out->fmt.zero_point) {
    const hm_quant_format *fmt = &job->out->fmt;
    int64_t groups = zero_groups(fmt, job->k);
    uint32_t *dst = job->out->zeros + e * hm_quant_zero_words(fmt, job->n, job->k);
    HM_CHECK_GOTO(hm_pack_along_n(*zero_codes, groups, job->n, hm_dtype_bits(fmt->weight), dst), done);
  }
done:
  expert_src_free(&s);
  return ret;
}

static hm_status check_request(const hm_ckpt *ck, const char *layer, const hm_ckpt_ffn *f, hm_expert_range r,
                               int tp_rank, int tp_size) {
  if (r.first < 0 || r.count < 1 || r.first + r.count > f->experts)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: layer %s: experts %lld..+%lld outside 0..%lld", hm_ckpt_dir(ck), layer,
            (long long)r.first, (long long)r.count, (long long)f->experts);
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size || f->intermediate % tp_size != 0)
    HM_FAIL(HM_INVALID_ARGUMENT,
            "%s: layer %s: TP rank %d of %d does not split intermediate size %lld evenly", hm_ckpt_dir(ck),
            layer, tp_rank, tp_size, (long long)f->intermediate);
  return HM_OK;
}

hm_status hm_ckpt_load_layer(hm_ckpt *ck, const char *layer, hm_expert_range experts, int tp_rank,
                             int tp_size, hm_host_weights *out, hm_ckpt_extras *extras) {
  HM_CHECK_NOT_NULL(ck);
  HM_CHECK_NOT_NULL(out);
  memset(out, 0, sizeof(*out));
  if (extras) memset(extras, 0, sizeof(*extras));
  struct layer_job job = {ck, layer, NULL, HM_PROJ_GATE_UP, tp_rank, tp_size, 0, 0, 0, out, extras};
  HM_CHECK(hm_ckpt_layer_find(ck, layer, &job.ffn, &job.proj));
  HM_CHECK(check_request(ck, layer, job.ffn, experts, tp_rank, tp_size));
  job.slice = job.ffn->intermediate / tp_size;
  job.n = job.proj == HM_PROJ_GATE_UP ? 2 * job.slice : job.ffn->hidden;
  job.k = job.proj == HM_PROJ_GATE_UP ? job.ffn->hidden : job.slice;
  hm_status ret = HM_OK;
  uint8_t *zero_codes = NULL;
  for (int64_t e = 0; e < experts.count; e++) HM_CHECK_GOTO(load_expert(&job, experts, e, &zero_codes), fail);
  free(zero_codes);
  return HM_OK;
fail:
  free(zero_codes);
  hm_host_weights_free(out);
  hm_ckpt_extras_free(extras);
  return ret;
}

hm_status hm_checkpoint_load_layer(const char *dir, const char *layer, hm_expert_range experts, int tp_rank,
                                   int tp_size, hm_host_weights *out, hm_ckpt_extras *extras) {
  hm_ckpt *ck = NULL;
  HM_CHECK(hm_ckpt_open(dir, &ck));
  hm_status ret = hm_ckpt_load_layer(ck, layer, experts, tp_rank, tp_size, out, extras);
  hm_ckpt_close(ck);
  return ret;
}

hm_status hm_ckpt_layer_format(hm_ckpt *ck, const char *layer, hm_quant_format *fmt) {
  HM_CHECK_NOT_NULL(ck);
  HM_CHECK_NOT_NULL(fmt);
  struct layer_job job = {ck, layer, NULL, HM_PROJ_GATE_UP, 0, 1, 0, 0, 0, NULL, NULL};
  HM_CHECK(hm_ckpt_layer_find(ck, layer, &job.ffn, &job.proj));
  hm_src_matrix m;
  const hm_ckpt_ffn *f = job.ffn;
  bool down = job.proj == HM_PROJ_DOWN;
  const char *proj = f->fused ? (down ? "down_proj" : "gate_up_proj") : (down ? f->down : f->gate);
  int64_t n = down ? f->hidden : (f->fused ? 2 : 1) * f->intermediate;
  HM_CHECK(open_one(&job, proj, 0, n, down ? f->intermediate : f->hidden, &m));
  *fmt = m.fmt;
  hm_src_release(&m);
  return HM_OK;
}
