/* test_util.h: what the cmocka tests share: seeded random data, host fp16/bf16 conversion,
 * an fp64 reference GEMM, relative error, and the GPU context that skips with a reason. */
#ifndef SJ_TEST_UTIL_H
#define SJ_TEST_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>
#include "sparsejit.h"

/* Fails the test with sj_last_error() when a call does not return SJ_OK. */
#define SJ_ASSERT_OK(call) \
    do { sj_status st_ = (call); if (st_ != SJ_OK) \
        fail_msg("%s -> %s: %s", #call, sj_status_name(st_), sj_last_error()); } while (0)
/* Asserts a status and that the last error mentions `needle` (NULL: any message). */
#define SJ_ASSERT_STATUS(call, expected, needle)                                                       \
    do {                                                                                               \
        sj_status st_ = (call);                                                                        \
        const char *needle_ = (needle);                                                                \
        if (st_ != (expected))                                                                         \
            fail_msg("%s -> %s, expected %s (%s)", #call, sj_status_name(st_), sj_status_name(expected), \
                     sj_last_error());                                                                 \
        if (needle_ && !strstr(sj_last_error(), needle_))                                              \
            fail_msg("%s: error '%s' does not mention '%s'", #call, sj_last_error(), needle_);         \
    } while (0)

uint64_t tu_seed(void);                 /* fresh per run; printed so a failure can be replayed */
double tu_uniform(uint64_t *state);     /* [-1, 1) */
uint16_t tu_f32_to_f16(float f);
float tu_f16_to_f32(uint16_t h);
uint16_t tu_f32_to_bf16(float f);
float tu_bf16_to_f32(uint16_t h);
uint16_t tu_to16(sj_dtype dt, float f);
float tu_from16(sj_dtype dt, uint16_t h);
/* Fills n 16-bit values of dtype with uniform [-scale, scale). */
void tu_fill16(sj_dtype dt, uint16_t *x, size_t n, float scale, uint64_t *state);
/* A random W (rows x cols, uniform in [-1, 1)) pruned to V:2:M by magnitude into h on the host,
 * and uploaded into d when d is not NULL (ctx then a GPU context). */
void tu_random_vnm(sj_context *ctx, sj_dtype dt, int v, int m, int64_t rows, int64_t cols, uint64_t *rng, sj_vnm_host *h,
                   sj_vnm_device *d);
/* Reads element i of an output buffer of dtype (f16, bf16 or f32) as double. */
double tu_load(sj_dtype dt, const void *buf, size_t i);
/* C = A.B in fp64 from 16-bit inputs, row-major, A m x k (lda), B k x n (ldb). */
void tu_ref_gemm16(sj_dtype dt, const uint16_t *A, const uint16_t *B, double *C,
                   int64_t m, int64_t n, int64_t k);
/* ||out - ref|| / ||ref|| over n elements; +inf if out has a NaN/Inf. */
double tu_rel_error(sj_dtype out_dt, const void *out, const double *ref, size_t n);
/* The test program's one GPU context (shared by its tests: never destroy it), or NULL after
 * printing why GPU tests skip (call skip() then). */
sj_context *tu_gpu_context(void);
/* Skips the calling test with a visible reason when there is no GPU. */
#define TU_REQUIRE_GPU(ctx) \
    do { (ctx) = tu_gpu_context(); if (!(ctx)) { tu_note_skip(); skip(); return; } } while (0)
void tu_note_skip(void);
/* The test program's exit code: 1 when any test failed, else 77 (ctest: skipped) when any was
 * skipped for want of a GPU, else 0. Use as `return TU_RUN_TESTS(tests, setup, teardown);`. */
int tu_exit_code(int failed);
#define TU_RUN_TESTS(tests, setup, teardown) tu_exit_code(cmocka_run_group_tests(tests, setup, teardown))
/* A compile-only context for arch (no GPU needed), with the cache disabled. */
sj_context *tu_compile_context(const char *arch);
/* Path to the cuobjdump binary ($CUOBJDUMP, PATH, or pip's nvidia-cuda-cuobjdump), or NULL. */
const char *tu_cuobjdump(void);
/* The SASS of a cubin (malloc'ed text), or NULL after printing why (no cuobjdump, or no
 * nvdisasm behind it) and noting a skip. Fails the test if cuobjdump fails otherwise. */
char *tu_sass(const void *cubin, size_t size);
/* Lines of text (SASS) that contain needle. */
int tu_count_lines(const char *text, const char *needle);
/* Value of NAME in a config string "A=1,B=2" (parsed by the generator's parser); -1 if absent. */
int tu_config_value(const char *config, const char *name);
/* sj_generate(ctx, p, config) must refuse with SJ_ERR_INVALID_ARGUMENT, its error holding needle. */
void tu_expect_refused(sj_context *ctx, const sj_problem *p, const char *config, const char *needle);
/* The source tree: $SJ_SOURCE_DIR (a build moved to another machine), else where it was built. */
const char *tu_source_dir(void);
/* A fresh temporary directory path (created) for cache files. */
const char *tu_tempdir(void);

#endif
