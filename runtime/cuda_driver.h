/* cuda_driver.h: the CUDA Driver API, loaded from libcuda with dlopen at run time so the library
 * links and reports clearly on a machine without a GPU. Call through sj_cu.<name>. */
#ifndef SJ_CUDA_DRIVER_H
#define SJ_CUDA_DRIVER_H

#include <cuda.h>
#include "sparsejit.h"

#define SJ_CU_FUNCTIONS(X) \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) \
    X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuGetErrorString) \
    X(cuGetErrorName) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) \
    X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD32) \
    X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemGetInfo) X(cuTensorMapEncodeTiled)

typedef struct sj_cuda_api {
#define SJ_CU_MEMBER(name) __typeof__(&name) name;
    SJ_CU_FUNCTIONS(SJ_CU_MEMBER)
#undef SJ_CU_MEMBER
} sj_cuda_api;

extern sj_cuda_api sj_cu;

/* Loads libcuda and calls cuInit once (thread-safe). SJ_ERR_NO_GPU with reason otherwise. */
sj_status sj_cuda_load(char *reason, size_t reason_len);

/* Turns a failed CUresult into SJ_ERR_CUDA with "what: CUDA_ERROR_X (text)". */
sj_status sj_cuda_fail(CUresult r, const char *what);

#define SJ_CU_CHECK(call, what) \
    do { CUresult sj_r_ = (call); if (sj_r_ != CUDA_SUCCESS) return sj_cuda_fail(sj_r_, (what)); } while (0)

#endif
