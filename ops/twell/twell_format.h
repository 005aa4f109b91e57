/* twell_format.h: the exact TwELL arrays (see the TwELL section of sparsejit.h), shared by the
 * host converter (twell_format.c), the entry points (twell_api.c), the tuner's harness and the
 * tests; templates/lib/twell_common.lua writes the same bits on the device.
 *
 * entry (uint32): (local column << 16) | 16-bit value bits. A tile's slots start at
 * (row * n_tiles + tile) * C. counts (int32) hold the true count, which may exceed C; then the
 * tile is read from spill[row * cols + tile * T + c], c < min(T, cols - tile * T). */
#ifndef SJ_TWELL_FORMAT_H
#define SJ_TWELL_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "sparsejit.h"

static inline size_t twell_count_at(const sj_twell_layout *l, int64_t row, int64_t tile)
{
    return (size_t)(row * l->n_tiles + tile);
}

static inline size_t twell_slot_at(const sj_twell_layout *l, int64_t row, int64_t tile)
{
    return twell_count_at(l, row, tile) * (size_t)l->capacity;
}

/* Columns of tile `tile` (the last one may be narrower than T). */
static inline int twell_tile_width(const sj_twell_layout *l, int64_t tile)
{
    int64_t left = l->cols - tile * l->tile;
    return (int)(left < l->tile ? left : l->tile);
}

static inline uint32_t twell_entry(int local_col, uint16_t bits) { return ((uint32_t)local_col << 16) | bits; }
static inline int twell_entry_col(uint32_t e) { return (int)(e >> 16); }
static inline uint16_t twell_entry_bits(uint32_t e) { return (uint16_t)(e & 0xffffu); }
/* +0 and -0 are zeros; everything else (NaN too) is a non-zero. */
static inline int twell_nonzero(uint16_t bits) { return (bits & 0x7fffu) != 0; }

/* SJ_OK when the device matrix has the layout the problem describes (rows = m; cols = n for
 * the gate, d_ff for the FFN; T, C, dtype) and its arrays are allocated and aligned. */
sj_status twell_check_device(const sj_twell_device *H, const sj_problem *p, const char *what);

#endif
