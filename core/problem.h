/* problem.h: the kernel request (sj_problem) beyond the public header: the canonical text of
 * its sparsity parameters, which the cache key and sj_problem_describe carry. */
#ifndef SJ_CORE_PROBLEM_H
#define SJ_CORE_PROBLEM_H

#include <stddef.h>
#include "sparsejit.h"

/* Dimensions are kernel int arguments, and products like m*k index 64-bit, so each is capped. */
#define PROBLEM_MAX_DIM ((int64_t)1 << 30)

/* "V=64,NS=2,MS=8", "T=128,C=16,S=0.99", ... ("" for dense ops). */
void problem_key_text(const sj_problem *p, char *buf, size_t len);

#endif
