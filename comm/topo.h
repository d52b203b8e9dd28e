/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where a rank should run: the cores and NUMA node nearest its GPU, found with hwloc
 * from the GPU's PCI bus id. The topology is this machine, or for tests an XML file or
 * a synthetic description, so the choice can be checked anywhere.
 */
#ifndef HM_COMM_TOPO_H
#define HM_COMM_TOPO_H

#include "humming.h"

typedef struct hm_binding {
  bool gpu_found; /* the bus id is a PCI device of the topology */
  bool bound;     /* threads and memory were bound */
  char bus_id[32];
  char numa[64];    /* NUMA nodes near the GPU, as a list ("0", "2-3") */
  char cpus[128];   /* cores near the GPU, as a list of PUs ("0-15,64-79") */
  char reason[192]; /* why nothing or only part was bound; "" otherwise */
} hm_binding;

/*
 * [IN] source: NULL (this machine), "xml:<path>" or "synthetic:<description>";
 * bus_id: "0000:17:00.0", or "" for no GPU; apply: bind this process when the topology
 * is this machine's. Fails only when an explicit source cannot be loaded.
 */
hm_status hm_topo_bind(const char *source, const char *bus_id, bool apply, hm_binding *out);
/* "rank 0 GPU 0 0000:17:00.0 NUMA 0 cores 0-15" and why not bound, if not. */
void hm_topo_describe(const hm_binding *b, int rank, int device, char *buf, size_t len);

#endif
