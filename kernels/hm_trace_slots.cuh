/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The row a traced GEMM CTA writes (kernels/gemm_trace.cuh), shared by the kernel and
 * the host that reads it back. Plain C as well as CUDA. Event slots hold SM clocks since
 * the CTA's entry plus one (0: did not happen); sum slots add clocks over segments.
 */
#ifndef HM_TRACE_SLOTS_CUH
#define HM_TRACE_SLOTS_CUH

#define HM_TRACE_GT_ENTRY 0       /* global timer (ns) at entry */
#define HM_TRACE_WAITED 1         /* past griddepcontrol.wait: the previous grid is done */
#define HM_TRACE_COUNTED 2        /* tiles counted (grouped: the experts' rows read) */
#define HM_TRACE_MAPS 3           /* the first segment's row maps loaded */
#define HM_TRACE_FIRST_STAGE 4    /* the first segment's first stage arrived */
#define HM_TRACE_FIRST_LOOP_END 5 /* the first segment's mainloop done */
#define HM_TRACE_FIRST_END 6      /* the first segment stored or published */
#define HM_TRACE_EXIT 7           /* the CTA leaves */
#define HM_TRACE_GT_EXIT 8        /* global timer (ns) at exit */
#define HM_TRACE_SEGMENTS 9       /* segments run */
#define HM_TRACE_ITERS 10         /* k-iterations run */
#define HM_TRACE_FILL 11          /* sum: segment start (or the overlapped tail's end) to its first stage */
#define HM_TRACE_LOOP 12          /* sum: first stage to the end of the mainloop */
#define HM_TRACE_TAIL 13          /* sum: k-warp reduction, store or Stream-K fix-up */
#define HM_TRACE_SM 14            /* the SM the CTA ran on (%smid) */
#define HM_TRACE_SUMMED 15        /* split tiles this CTA summed and stored as the last contributor */
#define HM_TRACE_STALL 16         /* sum: thread 0 waiting for a stage after the first (copies and barrier) */
#define HM_TRACE_REDUCED 17       /* the first segment's sums reduced across warps_k, before its store */
#define HM_TRACE_SLOTS 18
#define HM_TRACE_CTAS 1024

#endif
