/* hybrid_dw_busy.c: the arithmetic of hybrid-ffn-dw's busy units (BUSY > 0 configs,
 * templates/lib/hybrid_busy.lua): which units are busy (the least token count, and the host
 * reference of the device's selection, which the tests compare it with) and the plan of their
 * buffers, which the launch (hybrid_dw_launch.c) lays out and the GPU test reads back. */
#include "ops/hybrid/hybrid.h"

int64_t hybrid_dw_busy_threshold(int64_t tokens) { return (tokens + 63) / 64; }

void hybrid_dw_busy_select_host(const int64_t *counts, int64_t d_ff, int64_t tokens, int capacity, int32_t *slot_of,
                                int32_t *unit_of)
{
    const int64_t least = hybrid_dw_busy_threshold(tokens);
    int32_t rank = 0; /* busy units before j */
    for (int64_t j = 0; j < d_ff; j++) {
        const int busy = counts[j] >= least;
        slot_of[j] = busy && rank < capacity ? rank : -1;
        if (busy && rank < capacity) unit_of[rank] = (int32_t)j;
        rank += busy;
    }
    const int32_t count = rank < capacity ? rank : capacity;
    for (int32_t s = count; s < capacity; s++) unit_of[s] = -1;
    unit_of[capacity] = count;
}

void hybrid_dw_busy_plan(int64_t tokens, int64_t d_ff, int64_t d_model, int capacity, size_t in_size, size_t out_size,
                         hybrid_dw_busy_ws *out)
{
    out->slot_of = 0;
    out->unit_of = hybrid_align16((size_t)d_ff * 4);
    out->a = out->unit_of + hybrid_align16(((size_t)capacity + 1) * 4);
    out->a_bytes = 3 * (size_t)capacity * (size_t)tokens * in_size;
    out->c = out->a + hybrid_align16(out->a_bytes);
    out->total = out->c + hybrid_align16(3 * (size_t)capacity * (size_t)d_model * out_size);
}
