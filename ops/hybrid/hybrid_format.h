/* hybrid_format.h: the exact arrays of the hybrid ELL + dense-backup format (see the hybrid
 * section of sparsejit.h), shared by the host conversions (hybrid_convert.c), the layout
 * (hybrid_layout.c), the host references, the entry points, the harness and the tests;
 * templates/hybrid_gate.lua writes the same bits on the device. */
#ifndef SJ_HYBRID_FORMAT_H
#define SJ_HYBRID_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "sparsejit.h"

#define HYBRID_MAX_COLS 65536 /* a column must fit the 16-bit index */

/* First ELL slot of row r. */
static inline size_t hybrid_ell_at(const sj_hybrid_layout *l, int64_t r) { return (size_t)r * (size_t)l->width; }
/* +0 and -0 are zeros; everything else (NaN too) is a non-zero. */
static inline int hybrid_nonzero(uint16_t bits) { return (bits & 0x7fffu) != 0; }

/* SJ_OK when l is what sj_hybrid_layout_init fills for its own parameters; else an error that
 * starts with what. */
sj_status hybrid_layout_check(const sj_hybrid_layout *l, const char *what);

/* Zeroed host arrays of l in out (calloc(0) may return NULL, so empty backups get one byte);
 * SJ_ERR_OUT_OF_MEMORY with nothing left allocated. */
sj_status hybrid_host_alloc(const sj_hybrid_layout *l, sj_hybrid_host *out);

#endif
