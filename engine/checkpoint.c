/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint directories: config files, the shard index, shards mapped on demand, tensor lookup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "check.h"
#include "checkpoint.h"

struct ckpt_file {
  char *name;
  hm_safetensors *st; /* NULL until first use */
};

struct ckpt_entry {
  const char *name; /* owned by the index JSON or the single shard */
  size_t file;
};

struct hm_ckpt {
  char *dir;
  json_t *config;
  json_t *quant; /* borrowed from config or quant_root */
  json_t *quant_root;
  const char *quant_file;
  json_t *index;
  hm_ckpt_model model;
  hm_ckpt_ffn *ffns;
  size_t ffn_count;
  struct ckpt_file *files;
  size_t file_count;
  struct ckpt_entry *entries; /* sorted by name */
  size_t entry_count;
};

static hm_status join(const hm_ckpt *ck, const char *name, char *buf, size_t len) {
  if ((size_t)snprintf(buf, len, "%s/%s", ck->dir, name) >= len)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s/%s: path too long", ck->dir, name);
  return HM_OK;
}

static hm_status load_json(const hm_ckpt *ck, const char *name, bool required, json_t **out) {
  char path[4096];
  *out = NULL;
  HM_CHECK(join(ck, name, path, sizeof(path)));
  if (access(path, F_OK) != 0) {
    if (required) HM_FAIL(HM_INVALID_ARGUMENT, "%s: no such file (not a checkpoint directory?)", path);
    return HM_OK;
  }
  json_error_t err;
  *out = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
  if (*out == NULL) HM_FAIL(HM_CORRUPT, "%s: line %d: %s", path, err.line, err.text);
  if (!json_is_object(*out)) HM_FAIL(HM_CORRUPT, "%s: not a JSON object", path);
  return HM_OK;
}

static const struct {
  const char *alias, *method;
} quant_methods[] = {
    {"gptq", "gptq"},
    {"awq", "awq"},
    {"auto-round", "auto-round"},
    {"autoround", "auto-round"},
    {"intel/auto-round", "auto-round"},
    {"fp8", "fp8"},
    {"mxfp4", "mxfp4"},
    {"compressed-tensors", "compressed-tensors"},
    {"modelopt", "modelopt"},
};

static hm_status set_method(hm_ckpt *ck, const char *method) {
  for (size_t i = 0; i < HM_ARRAY_SIZE(quant_methods); i++) {
    if (strcasecmp(method, quant_methods[i].alias) == 0) {
      snprintf(ck->model.quant_method, sizeof(ck->model.quant_method), "%s", quant_methods[i].method);
      return HM_OK;
    }
  }
  HM_FAIL(HM_UNSUPPORTED,
          "%s/%s: quant_method '%s' is not supported (gptq, awq, auto-round, fp8, mxfp4, compressed-tensors, "
          "modelopt)",
          ck->dir, ck->quant_file, method);
}

/* ModelOpt writes hf_quant_config.json beside config.json, or nests it under "quantization". */
static hm_status read_quant_config(hm_ckpt *ck) {
  ck->quant_file = "config.json";
  ck->quant = json_object_get(ck->config, "quantization_config");
  if (ck->quant == NULL) ck->quant = json_object_get(ck->config, "compression_config");
  if (ck->quant == NULL || json_is_null(ck->quant)) {
    ck->quant = NULL;
    HM_CHECK(load_json(ck, "hf_quant_config.json", false, &ck->quant_root));
    if (ck->quant_root == NULL) return HM_OK;
    ck->quant_file = "hf_quant_config.json";
    ck->quant = json_object_get(ck->quant_root, "quantization");
    if (!json_is_object(ck->quant))
      HM_FAIL(HM_CORRUPT, "%s/hf_quant_config.json: no 'quantization' object", ck->dir);
    return set_method(ck, "modelopt");
  }
  if (!json_is_object(ck->quant))
    HM_FAIL(HM_CORRUPT, "%s/config.json: quantization_config is not an object", ck->dir);
  const char *method = json_string_value(json_object_get(ck->quant, "quant_method"));
  if (method == NULL && json_object_get(ck->config, "compression_config") == ck->quant)
    method = "compressed-tensors";
  if (method == NULL)
    HM_FAIL(HM_CORRUPT, "%s/config.json: quantization_config has no 'quant_method'", ck->dir);
  return set_method(ck, method);
}

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const struct ckpt_entry *)a)->name, ((const struct ckpt_entry *)b)->name);
}

static hm_status add_file(hm_ckpt *ck, const char *name, size_t *index) {
  for (size_t i = 0; i < ck->file_count; i++) {
    if (strcmp(ck->files[i].name, name) == 0) {
      *index = i;
      return HM_OK;
    }
  }
  /* Shards sit beside the index: a path would let an index reach any file on the host. */
  if (name[0] == '\0' || strchr(name, '/') != NULL || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
    HM_FAIL(HM_CORRUPT, "%s/model.safetensors.index.json: shard name '%s' is not a plain file name", ck->dir,
            name);
  struct ckpt_file *files = realloc(ck->files, (ck->file_count + 1) * sizeof(*files));
  if (files == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "checkpoint file list");
  ck->files = files;
  files[ck->file_count].st = NULL;
  files[ck->file_count].name = strdup(name);
  if (files[ck->file_count].name == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "checkpoint file list");
  *index = ck->file_count++;
  return HM_OK;
}

static hm_status read_index(hm_ckpt *ck) {
  json_t *map = json_object_get(ck->index, "weight_map");
  if (!json_is_object(map))
    HM_FAIL(HM_CORRUPT, "%s/model.safetensors.index.json: no 'weight_map' object", ck->dir);
  ck->entries = calloc(json_object_size(map) + 1, sizeof(*ck->entries));
  if (ck->entries == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "checkpoint index");
  const char *name;
  json_t *file;
  json_object_foreach(map, name, file) {
    if (!json_is_string(file))
      HM_FAIL(HM_CORRUPT, "%s/model.safetensors.index.json: weight_map['%s'] is not a string", ck->dir, name);
    struct ckpt_entry *e = &ck->entries[ck->entry_count++];
    e->name = name;
    HM_CHECK(add_file(ck, json_string_value(file), &e->file));
  }
  return HM_OK;
}

static hm_status read_single(hm_ckpt *ck) {
  char path[4096];
  size_t file;
  HM_CHECK(join(ck, "model.safetensors", path, sizeof(path)));
  if (access(path, F_OK) != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "%s: neither model.safetensors.index.json nor model.safetensors", ck->dir);
  HM_CHECK(add_file(ck, "model.safetensors", &file));
  HM_CHECK(hm_safetensors_open(path, &ck->files[file].st));
  size_t count = hm_safetensors_count(ck->files[file].st);
  ck->entries = calloc(count + 1, sizeof(*ck->entries));
  if (ck->entries == NULL) HM_FAIL(HM_OUT_OF_MEMORY, "checkpoint index");
  for (size_t i = 0; i < count; i++) {
    ck->entries[i].name = hm_safetensors_at(ck->files[file].st, i)->name;
    ck->entries[i].file = file;
  }
  ck->entry_count = count;
  return HM_OK;
}

static hm_status read_all(hm_ckpt *ck) {
  char path[4096];
  HM_CHECK(join(ck, "config.json", path, sizeof(path)));
  HM_CHECK(load_json(ck, "config.json", true, &ck->config));
  HM_CHECK(hm_ckpt_parse_model(path, ck->config, &ck->model, &ck->ffns, &ck->ffn_count));
  HM_CHECK(read_quant_config(ck));
  HM_CHECK(load_json(ck, "model.safetensors.index.json", false, &ck->index));
  HM_CHECK(ck->index ? read_index(ck) : read_single(ck));
  qsort(ck->entries, ck->entry_count, sizeof(*ck->entries), entry_cmp);
  return HM_OK;
}

hm_status hm_ckpt_open(const char *dir, hm_ckpt **out) {
  HM_CHECK_NOT_NULL(out);
  *out = NULL;
  HM_CHECK_NOT_NULL(dir);
  hm_ckpt *ck = calloc(1, sizeof(*ck));
  if (ck == NULL || (ck->dir = strdup(dir)) == NULL) {
    free(ck);
    HM_FAIL(HM_OUT_OF_MEMORY, "checkpoint handle for %s", dir);
  }
  hm_status ret = read_all(ck);
  if (ret != HM_OK) {
    hm_ckpt_close(ck);
    return ret;
  }
  *out = ck;
  return HM_OK;
}

void hm_ckpt_close(hm_ckpt *ck) {
  if (ck == NULL) return;
  for (size_t i = 0; i < ck->file_count; i++) {
    hm_safetensors_close(ck->files[i].st);
    free(ck->files[i].name);
  }
  free(ck->files);
  free(ck->entries);
  free(ck->ffns);
  json_decref(ck->index);
  json_decref(ck->quant_root);
  json_decref(ck->config);
  free(ck->dir);
  free(ck);
}

const char *hm_ckpt_dir(const hm_ckpt *ck) {
  return ck->dir;
}
const hm_ckpt_model *hm_ckpt_model_info(const hm_ckpt *ck) {
  return &ck->model;
}
json_t *hm_ckpt_quant_config(const hm_ckpt *ck) {
  return ck->quant;
}
const char *hm_ckpt_quant_file(const hm_ckpt *ck) {
  return ck->quant_file;
}
size_t hm_ckpt_ffn_count(const hm_ckpt *ck) {
  return ck->ffn_count;
}

const hm_ckpt_ffn *hm_ckpt_ffn_at(const hm_ckpt *ck, size_t i) {
  return i < ck->ffn_count ? &ck->ffns[i] : NULL;
}

hm_status hm_ckpt_layer_find(const hm_ckpt *ck, const char *layer, const hm_ckpt_ffn **ffn,
                             hm_ckpt_proj *proj) {
  HM_CHECK_NOT_NULL(layer);
  const char *dot = strrchr(layer, '.');
  if (dot != NULL) {
    size_t len = (size_t)(dot - layer);
    for (size_t i = 0; i < ck->ffn_count; i++) {
      if (strlen(ck->ffns[i].prefix) != len || strncmp(ck->ffns[i].prefix, layer, len) != 0) continue;
      *ffn = &ck->ffns[i];
      if (strcmp(dot, ".gate_up") == 0)
        *proj = HM_PROJ_GATE_UP;
      else if (strcmp(dot, ".down") == 0)
        *proj = HM_PROJ_DOWN;
      else
        break;
      return HM_OK;
    }
  }
  HM_FAIL(HM_INVALID_ARGUMENT, "%s: no layer '%s' (names are <ffn prefix>.gate_up or .down, e.g. %s.gate_up)",
          ck->dir, layer, ck->ffn_count ? ck->ffns[0].prefix : "model.layers.0.mlp");
}

static const struct ckpt_entry *find_entry(const hm_ckpt *ck, const char *name) {
  struct ckpt_entry key = {.name = name};
  return bsearch(&key, ck->entries, ck->entry_count, sizeof(*ck->entries), entry_cmp);
}

bool hm_ckpt_has(const hm_ckpt *ck, const char *name) {
  return find_entry(ck, name) != NULL;
}

hm_status hm_ckpt_file_open(hm_ckpt *ck, size_t i, hm_safetensors **out) {
  if (i >= ck->file_count) HM_FAIL(HM_INVALID_ARGUMENT, "%s: no shard %zu", ck->dir, i);
  if (ck->files[i].st == NULL) {
    char path[4096];
    HM_CHECK(join(ck, ck->files[i].name, path, sizeof(path)));
    HM_CHECK(hm_safetensors_open(path, &ck->files[i].st));
  }
  *out = ck->files[i].st;
  return HM_OK;
}

hm_status hm_ckpt_get(hm_ckpt *ck, const char *name, hm_ckpt_tensor *out) {
  const struct ckpt_entry *e = find_entry(ck, name);
  if (e == NULL) HM_FAIL(HM_CORRUPT, "%s: tensor '%s' is missing from the checkpoint", ck->dir, name);
  hm_safetensors *st;
  HM_CHECK(hm_ckpt_file_open(ck, e->file, &st));
  out->st = hm_safetensors_find(st, name);
  out->file = ck->files[e->file].name;
  if (out->st == NULL)
    HM_FAIL(HM_CORRUPT, "%s: the index puts tensor '%s' in %s, which does not hold it", ck->dir, name,
            out->file);
  return HM_OK;
}

static void shape_text(int ndim, const int64_t *shape, char *buf, size_t len) {
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < ndim && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, i ? ", %lld" : "%lld", (long long)shape[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
}

hm_status hm_ckpt_expect(hm_ckpt *ck, const char *name, hm_st_dtype dtype, int ndim, const int64_t *shape,
                         hm_ckpt_tensor *out) {
  HM_CHECK(hm_ckpt_get(ck, name, out));
  const hm_st_tensor *t = out->st;
  if (t->dtype != dtype)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s' is %s, expected %s", out->file, name, hm_st_dtype_name(t->dtype),
            hm_st_dtype_name(dtype));
  bool same = t->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
  if (!same) {
    char found[160], expected[160];
    shape_text(t->ndim, t->shape, found, sizeof(found));
    shape_text(ndim, shape, expected, sizeof(expected));
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s' has shape %s, config.json implies %s", out->file, name, found,
            expected);
  }
  return HM_OK;
}

hm_status hm_ckpt_expect_scalar(hm_ckpt *ck, const char *name, hm_st_dtype dtype, hm_ckpt_tensor *out) {
  HM_CHECK(hm_ckpt_get(ck, name, out));
  const hm_st_tensor *t = out->st;
  if (t->dtype != dtype || t->elems != 1 || t->ndim > 2)
    HM_FAIL(HM_CORRUPT, "%s: tensor '%s' must be one %s element, found %s with %lld elements", out->file,
            name, hm_st_dtype_name(dtype), hm_st_dtype_name(t->dtype), (long long)t->elems);
  return HM_OK;
}

size_t hm_ckpt_open_files(const hm_ckpt *ck) {
  size_t n = 0;
  for (size_t i = 0; i < ck->file_count; i++) n += ck->files[i].st != NULL;
  return n;
}

size_t hm_ckpt_file_count(const hm_ckpt *ck) {
  return ck->file_count;
}

const char *hm_ckpt_file_at(const hm_ckpt *ck, size_t i) {
  return i < ck->file_count ? ck->files[i].name : NULL;
}

hm_status hm_expert_range_of_rank(int64_t experts, int ep_rank, int ep_size, hm_expert_range *out) {
  HM_CHECK_NOT_NULL(out);
  if (ep_size < 1 || ep_rank < 0 || ep_rank >= ep_size || experts % ep_size != 0)
    HM_FAIL(HM_INVALID_ARGUMENT, "EP rank %d of %d: %lld experts do not split evenly", ep_rank, ep_size,
            (long long)experts);
  out->count = experts / ep_size;
  out->first = (int64_t)ep_rank * out->count;
  return HM_OK;
}

void hm_ckpt_extras_free(hm_ckpt_extras *x) {
  if (x == NULL) return;
  free(x->k_perm);
  free(x->bias);
  x->k_perm = NULL;
  x->bias = NULL;
}
