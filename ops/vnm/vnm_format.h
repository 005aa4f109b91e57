/* vnm_format.h: the exact order of the compressed V:N:M arrays (shared by the host packer in
 * vnm_format.c, templates/vnm_spmm.lua, templates/vnm_compress.lua and the tests).
 *
 * Geometry: rows are padded to row_blocks * V (zero rows), each row has G = ceil(cols / M)
 * column groups, and the groups are padded to GP = k_tiles * 8 (k_tiles even). Every group of
 * a row keeps 2 values, at positions p0 < p1 of the block's 4 selected columns s0 < s1 < s2 < s3
 * (offsets inside the group). Fragment tile (mt, kt) is rows 16mt..16mt+15, groups 8kt..8kt+7,
 * i.e. one m16n8k32 mma.sp A operand over the gathered columns.
 *
 * values (16-bit): [mt][kt][lane 32][reg 4][half 2]; lane = 4 * (r % 8) + (c % 4),
 *   reg = (r / 8) + 2 * (c / 4), for row r = row % 16 and group c = group % 8; half 0 is the
 *   value at p0, half 1 at p1.
 * meta (32-bit): [mt][kt / 2][lane 32]; lane = 4 * (r % 8) + 2 * (kt % 2) + (c / 4); nibble
 *   p0 | p1 << 2 at bit 16 * (r / 8) + 4 * (c % 4). (Selector 0 reads lanes 4g, 4g+1 for the even
 *   k tile, selector 1 lanes 4g+2, 4g+3 for the odd one.)
 * index (int32): [row block][group GP][4]: the B row (A column) group * M + s_j, or -1 where
 *   that column is past cols (padding). */
#ifndef SJ_VNM_FORMAT_H
#define SJ_VNM_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include "sparsejit.h"

/* SJ_OK when l is what sj_vnm_layout_init makes for its own parameters (what: the caller). */
sj_status vnm_layout_check(const sj_vnm_layout *l, const char *what);

static inline int64_t vnm_rows_padded(const sj_vnm_layout *l) { return l->row_blocks * l->v; }
static inline int64_t vnm_groups_padded(const sj_vnm_layout *l) { return l->k_tiles * 8; }

/* Element offset in values of the kept value `half` of (row, group). */
static inline size_t vnm_value_at(const sj_vnm_layout *l, int64_t row, int64_t group, int half)
{
    int64_t mt = row / 16, r = row % 16, kt = group / 8, c = group % 8;
    int64_t lane = 4 * (r % 8) + c % 4, reg = r / 8 + 2 * (c / 4);
    return (size_t)((((mt * l->k_tiles + kt) * 32 + lane) * 4 + reg) * 2 + half);
}

/* Word offset in meta of (row, group), and the bit where its nibble starts. */
static inline size_t vnm_meta_at(const sj_vnm_layout *l, int64_t row, int64_t group, int *shift)
{
    int64_t mt = row / 16, r = row % 16, kt = group / 8, c = group % 8;
    int64_t lane = 4 * (r % 8) + 2 * (kt % 2) + c / 4;
    *shift = (int)(16 * (r / 8) + 4 * (c % 4));
    return (size_t)((mt * (l->k_tiles / 2) + kt / 2) * 32 + lane);
}

/* Offset in index of selected column j of (row block, group). */
static inline size_t vnm_index_at(const sj_vnm_layout *l, int64_t row_block, int64_t group, int j)
{
    return (size_t)((row_block * vnm_groups_padded(l) + group) * 4 + j);
}

/* The column of W that kept slot `half` of (row, group) holds: the block's selected column at
 * the slot's metadata position, or -1 for a padding column (the training references and GMP
 * walk the compressed form slot by slot with it). */
static inline int32_t vnm_slot_column(const sj_vnm_layout *l, const uint32_t *meta, const int32_t *index,
                                      int64_t row, int64_t group, int half)
{
    int shift;
    size_t w = vnm_meta_at(l, row, group, &shift);
    int pos = (int)((meta[w] >> (shift + 2 * half)) & 3u);
    return index[vnm_index_at(l, row / l->v, group, pos)];
}

#endif
