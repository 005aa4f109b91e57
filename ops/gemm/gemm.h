/* gemm.h: the dense GEMM family's parts that its descriptor (gemm_op.c) hangs together. */
#ifndef SJ_OPS_GEMM_H
#define SJ_OPS_GEMM_H

#include "tuner/harness.h"

extern const harness_ops harness_gemm; /* gemm_harness.c */

#endif
