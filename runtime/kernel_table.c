/* kernel_table.c: open-addressing hash table from (problem, config) to loaded kernels; the
 * in-process lookup that makes a warm launch cost no SQLite, Lua or NVRTC work. */
#include "runtime/kernel_table.h"
#include "core/error.h"
#include "core/op.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a(const void *data, size_t n, uint64_t h)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static uint64_t slot_hash(const sj_problem *norm, const char *config)
{
    uint64_t h = fnv1a(norm, sizeof *norm, 14695981039346656037ull);
    return fnv1a(config, strlen(config), h);
}

void kernel_table_init(kernel_table *t) { memset(t, 0, sizeof *t); }

void kernel_table_free(kernel_table *t)
{
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static kernel_table_slot *find(const kernel_table *t, const sj_problem *norm, const char *config)
{
    if (!t->cap) return NULL;
    size_t mask = t->cap - 1;
    for (size_t i = slot_hash(norm, config) & mask;; i = (i + 1) & mask) {
        kernel_table_slot *s = &t->slots[i];
        if (!s->kernel) return s;
        if (!memcmp(&s->problem, norm, sizeof *norm) && !strcmp(s->config, config)) return s;
    }
}

loaded_kernel *kernel_table_get(const kernel_table *t, const sj_problem *p, const char *config)
{
    sj_problem norm;
    op_normalize(p, &norm);
    kernel_table_slot *s = find(t, &norm, config ? config : "");
    return s ? s->kernel : NULL;
}

static sj_status grow(kernel_table *t)
{
    size_t cap = t->cap ? t->cap * 2 : 64;
    kernel_table_slot *slots = calloc(cap, sizeof *slots);
    if (!slots) return error_set(SJ_ERR_OUT_OF_MEMORY, "kernel table: cannot grow to %zu slots", cap);
    kernel_table old = *t;
    t->slots = slots;
    t->cap = cap;
    t->count = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].kernel) continue;
        kernel_table_slot *s = find(t, &old.slots[i].problem, old.slots[i].config);
        *s = old.slots[i];
        t->count++;
    }
    free(old.slots);
    return SJ_OK;
}

sj_status kernel_table_put(kernel_table *t, const sj_problem *p, const char *config, loaded_kernel *k)
{
    if (!config) config = "";
    if (strlen(config) >= sizeof t->slots[0].config)
        return error_set(SJ_ERR_INVALID_ARGUMENT, "config '%s' is longer than %zu characters", config,
                       sizeof t->slots[0].config - 1);
    if ((t->count + 1) * 4 > t->cap * 3) {
        sj_status st = grow(t);
        if (st != SJ_OK) return st;
    }
    sj_problem norm;
    op_normalize(p, &norm);
    kernel_table_slot *s = find(t, &norm, config);
    if (!s->kernel) t->count++;
    s->problem = norm;
    snprintf(s->config, sizeof s->config, "%s", config);
    s->kernel = k;
    return SJ_OK;
}

void kernel_table_forget(kernel_table *t, const sj_problem *p)
{
    sj_problem norm;
    op_normalize(p, &norm);
    kernel_table_slot *s = find(t, &norm, "");
    if (!s || !s->kernel) return;
    /* Backward-shift deletion keeps every probe chain intact. */
    size_t mask = t->cap - 1, i = (size_t)(s - t->slots);
    s->kernel = NULL;
    t->count--;
    for (size_t j = (i + 1) & mask; t->slots[j].kernel; j = (j + 1) & mask) {
        size_t home = slot_hash(&t->slots[j].problem, t->slots[j].config) & mask;
        /* move j back to i if its home is not in (i, j] cyclically */
        int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            t->slots[i] = t->slots[j];
            t->slots[j].kernel = NULL;
            i = j;
        }
    }
}
