/* tensor_map.c: the TMA descriptors the runtime passes to Hopper kernels, in the two shapes
 * templates ask for (templates/README.md), both over a row-major rows x cols matrix of 16-bit
 * elements with out-of-range elements arriving as zeros, so ragged shapes need no masking:
 *   TMA_WGMMA: boxes of 64 rows x 64 columns (128 bytes), 128-byte swizzle, the layout
 *     wgmma's K-major descriptors read (the gate; a tile of BM rows is BM/64 loads), also
 *     the FFN pairs kernel's 64-column Wd stages;
 *   TMA_ROWS32: boxes of 256 rows x 32 columns (64 bytes), 64-byte swizzle, for kernels
 *     that gather single rows with ldmatrix (the FFN's pairs kernel): the swizzle puts 8
 *     consecutive rows' same 16 bytes in 8 different bank groups.
 * A fixed shape per kernel keeps its ABI the same for every config of a template.
 * A descriptor depends on nothing but (base, rows, cols, shape), so each thread keeps its last
 * few: a loaded kernel relaunched on the same buffers encodes nothing (the launch hot path). */
#include "core/error.h"
#include "runtime/runtime.h"

#include <string.h>

#define MEMO_SLOTS 8   /* the gate reads two matrices and the FFN three; room for both in turn */

typedef struct memo_entry {
    sj_devptr base;
    int64_t rows, cols;
    tma_shape shape;
    tensor_map map;
} memo_entry;

static _Thread_local memo_entry memo[MEMO_SLOTS];
static _Thread_local unsigned memo_next;

sj_status rt_tensor_map_rows(sj_context *ctx, tensor_map *map, sj_devptr base, int64_t rows, int64_t cols,
                             tma_shape shape, const char *what)
{
    memset(map, 0, sizeof *map);
    /* Only sm_90a kernels read the descriptor; others get zeros (and the encoder is not asked
     * about a device that has no TMA, nor called where libcuda is not loaded). */
    if (!ctx->has_gpu || strcmp(ctx->arch, "sm_90a") != 0) return SJ_OK;
    if (cols % 8 || base % 16)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "%s: TMA needs 16-byte aligned rows (cols = %lld, address %% 16 = %d)",
                       what, (long long)cols, (int)(base % 16));
    for (int i = 0; i < MEMO_SLOTS; i++)
        if (memo[i].base == base && memo[i].rows == rows && memo[i].cols == cols && memo[i].shape == shape) {
            *map = memo[i].map;
            return SJ_OK;
        }
    cuuint64_t dims[2] = { (cuuint64_t)cols, (cuuint64_t)rows };
    cuuint64_t strides[1] = { (cuuint64_t)cols * 2 };
    int wgmma = shape == TMA_WGMMA;
    cuuint32_t box[2] = { wgmma ? 64 : 32, wgmma ? 64 : 256 }, unit[2] = { 1, 1 };
    /* The swizzle and the zero fill are the same for f16 and bf16: the type only names 2 bytes. */
    CUresult r = cu.cuTensorMapEncodeTiled((CUtensorMap *)map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dims,
                                              strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                              wgmma ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B,
                                              CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return cuda_error(r, what);
    memo_entry *e = &memo[memo_next++ % MEMO_SLOTS];   /* base != 0 (callers check), so a zeroed slot never matches */
    e->base = base;
    e->rows = rows;
    e->cols = cols;
    e->shape = shape;
    e->map = *map;
    return SJ_OK;
}
