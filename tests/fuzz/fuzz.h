/* fuzz.h: what a fuzz target (tests/fuzz/fuzz_*.c) defines and may call. A target is a
 * libFuzzer-style function; tests/fuzz/fuzz_driver.c runs it over its seed corpus and mutations
 * of it (ctest label "fuzz"), or libFuzzer does (-DSPARSEJIT_LIBFUZZER=ON, clang). */
#ifndef SJ_TESTS_FUZZ_H
#define SJ_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* One input; returns 0. A crash, a sanitizer report or fuzz_fail is a finding. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Optional: hands each of the target's seeds (valid inputs, made with the library) to emit;
 * `fuzz_<target> --write-seeds DIR` writes them, which is how tests/fuzz/corpus/ was made. */
void fuzz_make_seeds(void (*emit)(const uint8_t *data, size_t size)) __attribute__((weak));

/* Optional: a line on what the run reached (e.g. how many inputs a check accepted), printed by
 * the driver at the end, so a pass that never got past the first check shows. */
void fuzz_report(char *line, size_t len) __attribute__((weak));

/* Reports a broken property (what, and detail when not NULL), keeps the input, aborts. */
void fuzz_fail(const char *what, const char *detail) __attribute__((noreturn));

#endif
