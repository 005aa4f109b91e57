/* vnm.h: the V:N:M family's parts that its descriptors (vnm_op.c) hang together. */
#ifndef SJ_OPS_VNM_H
#define SJ_OPS_VNM_H

#include "tuner/harness.h"

extern const harness_ops harness_vnm;    /* vnm_harness.c */
extern const harness_ops harness_vnm_dw; /* vnm_dw_harness.c */
extern const harness_ops harness_vnm_dx; /* vnm_dx_harness.c */

#endif
