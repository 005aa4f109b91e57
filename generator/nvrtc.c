/* nvrtc.c: NVRTC compilation of generated source straight to a cubin for a real arch
 * (-arch=sm_90a), so no PTX JIT happens at load time and the SASS can be inspected. */
#include "generator/nvrtc.h"
#include "core/error.h"

#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int nvrtc_version_number(void)
{
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return 0;
    return major * 1000 + minor * 10;
}

static int arch_ok(const char *arch)
{
    /* sm_XY or sm_XYZ with an optional a/f suffix */
    if (!arch || strncmp(arch, "sm_", 3) != 0) return 0;
    const char *p = arch + 3;
    int digits = 0;
    while (*p >= '0' && *p <= '9') { p++; digits++; }
    if (digits < 2 || digits > 3) return 0;
    return *p == 0 || ((*p == 'a' || *p == 'f') && p[1] == 0);
}

sj_status nvrtc_compile(const char *source, const char *name, const char *arch, void **cubin,
                        size_t *cubin_size, char **log, double *seconds)
{
    if (cubin) *cubin = NULL;
    if (log) *log = NULL;
    if (!source || !cubin || !cubin_size) return error_set(SJ_ERR_INVALID_ARGUMENT, "nvrtc_compile: source/cubin/cubin_size is NULL");
    if (!arch_ok(arch))
        return error_set(SJ_ERR_INVALID_ARGUMENT, "arch '%s': expected a real GPU arch such as sm_80 or sm_90a", arch ? arch : "(null)");
    double t0 = now_seconds();
    nvrtcProgram prog;
    nvrtcResult r = nvrtcCreateProgram(&prog, source, name ? name : "sparsejit.cu", 0, NULL, NULL);
    if (r != NVRTC_SUCCESS) return error_set(SJ_ERR_NVRTC, "nvrtcCreateProgram: %s", nvrtcGetErrorString(r));
    char arch_opt[32];
    snprintf(arch_opt, sizeof arch_opt, "-arch=%s", arch);
    const char *opts[] = { arch_opt, "-default-device", "-std=c++17", "-DNDEBUG", "--extra-device-vectorization" };
    r = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof *opts), opts);
    size_t log_size = 0;
    char *text = NULL;
    if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1 && (text = malloc(log_size))) {
        if (nvrtcGetProgramLog(prog, text) != NVRTC_SUCCESS) text[0] = 0;
    }
    if (r != NVRTC_SUCCESS) {
        sj_status st = error_set(SJ_ERR_NVRTC, "NVRTC failed to compile %s for %s: %s\n%s", name ? name : "kernel", arch,
                               nvrtcGetErrorString(r), text ? text : "");
        if (log) *log = text; else free(text);
        nvrtcDestroyProgram(&prog);
        return st;
    }
    size_t n = 0;
    r = nvrtcGetCUBINSize(prog, &n);
    void *bin = r == NVRTC_SUCCESS && n ? malloc(n) : NULL;
    if (!bin || nvrtcGetCUBIN(prog, bin) != NVRTC_SUCCESS) {
        free(bin);
        free(text);
        nvrtcDestroyProgram(&prog);
        return error_set(SJ_ERR_NVRTC, "NVRTC produced no cubin for %s (arch %s)", name ? name : "kernel", arch);
    }
    nvrtcDestroyProgram(&prog);
    *cubin = bin;
    *cubin_size = n;
    if (log) *log = text; else free(text);
    if (seconds) *seconds = now_seconds() - t0;
    return SJ_OK;
}
