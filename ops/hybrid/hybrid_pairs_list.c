/* hybrid_pairs_list.c: the listed pairs of hybrid-ffn-fwd's tensor-core variant (ALGO=2,
 * templates/lib/hybrid_pairs.lua): the workspace plan its two kernels and the op share, and the
 * host reference of the listing kernel (STAGE=0), which the GPU test compares it with; the same for
 * hybrid-ffn-dx's ALGO=2, whose pairs kernel keeps its slots twice. */
#include "core/error.h"
#include "ops/hybrid/hybrid.h"
#include "ops/hybrid/hybrid_format.h"
#include "ops/twell/twell.h"

#include <stdlib.h>
#include <string.h>

static size_t ceil64(size_t words) { return (words + 63) / 64 * 64; }

void hybrid_pairs_plan(int64_t rows, int64_t cols, int width, int64_t backup_rows, int halves, hybrid_pairs_ws *out)
{
    sj_problem twell = { 0 }; /* the pairs kernel's counters */
    twell.m = rows;
    const size_t m512 = (size_t)(rows + 511) / 512 * 512, f512 = (size_t)(cols + 511) / 512 * 512;
    const size_t tiles256 = (size_t)(cols + 255) / 256, per_tile = ceil64((size_t)rows * tiles256);
    /* the pairs kernel's own for any of its configs (twell_ffn_workspace's at halves = 1), then ours */
    const size_t pairs = twell_ffn_counter_words(&twell) + ceil64((size_t)halves * m512 / 8 * tiles256) +
                         (size_t)halves * m512 * f512;
    const size_t counts = ceil64(pairs);
    out->counts = 4 * counts;
    out->starts = 4 * (counts + per_tile);
    out->list = 4 * (counts + 2 * per_tile);
    out->positions = rows * width + backup_rows * cols;
    out->total = out->list + 8 * (size_t)out->positions;
}

/* The unit tiles of a row (one count and start each). */
static int64_t row_tiles(const sj_hybrid_layout *l, int unit_tile) { return (l->cols + unit_tile - 1) / unit_tile; }

sj_status hybrid_pairs_list_host(const sj_hybrid_host *h, int unit_tile, int32_t *counts, int32_t *starts,
                                 uint32_t *list)
{
    const sj_hybrid_layout *l = &h->layout;
    sj_status st = hybrid_layout_check(l, "hybrid_pairs_list_host");
    if (st != SJ_OK) return st;
    if (unit_tile != 256 && unit_tile != 512)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid_pairs_list_host: unit_tile = %d: expected 256 or 512", unit_tile);
    const int64_t F = l->cols, W = l->width, nut = row_tiles(l, unit_tile), mw = l->rows * W;
    /* per column of the row: its value and hybrid position, 0 / none where inactive */
    uint16_t *val = malloc(sizeof *val * (size_t)F);
    uint32_t *pos = malloc(sizeof *pos * (size_t)F);
    if (!val || !pos) {
        free(val), free(pos);
        return error_set(SJ_ERR_OUT_OF_MEMORY, "hybrid_pairs_list_host: out of memory (%lld columns)", (long long)F);
    }
    for (int64_t t = 0; t < l->rows; t++) {
        const int64_t n = h->nnz[t], e = n < W ? n : W, s = n > W ? h->slot[t] : -1;
        int32_t *cnt = counts + t * nut, *start = starts + t * nut;
        if (n > W && (s < 0 || s >= l->backup_rows)) { /* unplaced: one NaN pair of unit 0, no position */
            for (int64_t ut = 0; ut < nut; ut++) cnt[ut] = ut == 0, start[ut] = (int32_t)(t * W);
            list[2 * t * W] = l->dtype == SJ_DTYPE_BF16 ? 0x7fc0u : 0x7e00u;
            list[2 * t * W + 1] = HYBRID_PAIRS_NO_POSITION;
            continue;
        }
        memset(val, 0, sizeof *val * (size_t)F);
        for (int64_t i = 0; i < e; i++) {
            const int64_t at = t * W + i, col = h->columns[at];
            if (col >= F) {
                free(val), free(pos);
                return error_set(SJ_ERR_INVALID_ARGUMENT, "hybrid_pairs_list_host: row %lld slot %lld: column %lld >= cols",
                                 (long long)t, (long long)i, (long long)col);
            }
            val[col] = h->values[at], pos[col] = (uint32_t)at;
        }
        for (int64_t j = 0; s >= 0 && j < F; j++)
            if (hybrid_nonzero(h->backup[s * F + j])) val[j] = h->backup[s * F + j], pos[j] = (uint32_t)(mw + s * F + j);
        int64_t next = s >= 0 ? mw + s * F : t * W;
        for (int64_t ut = 0; ut < nut; ut++) {
            start[ut] = (int32_t)next;
            const int64_t end = (ut + 1) * unit_tile < F ? (ut + 1) * unit_tile : F;
            for (int64_t j = ut * unit_tile; j < end; j++)
                if (hybrid_nonzero(val[j])) {
                    list[2 * next] = ((uint32_t)(j - ut * unit_tile) << 16) | val[j];
                    list[2 * next + 1] = pos[j];
                    next++;
                }
            cnt[ut] = (int32_t)(next - start[ut]);
        }
    }
    free(val), free(pos);
    return SJ_OK;
}
