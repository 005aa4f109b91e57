/* cuda_driver.h: the CUDA Driver API, loaded from libcuda with dlopen at run time so the library
 * links and reports clearly on a machine without a GPU. Call through cu.<name>. */
#ifndef SJ_CUDA_DRIVER_H
#define SJ_CUDA_DRIVER_H

#include <cuda.h>
#include "sparsejit.h"

#define CU_FUNCTIONS(X) \
    X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) \
    X(cuDeviceGetAttribute) X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) \
    X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent) X(cuCtxSynchronize) X(cuGetErrorString) \
    X(cuGetErrorName) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) \
    X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuFuncGetParamInfo) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) \
    X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD32Async) X(cuMemsetD16Async) \
    X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuMemGetInfo) X(cuTensorMapEncodeTiled)

typedef struct cuda_api {
#define CU_MEMBER(name) __typeof__(&name) name;
    CU_FUNCTIONS(CU_MEMBER)
#undef CU_MEMBER
} cuda_api;

extern cuda_api cu;

/* Loads libcuda and calls cuInit once (thread-safe). SJ_ERR_NO_GPU with reason otherwise. */
sj_status cuda_load(char *reason, size_t reason_len);

/* Turns a failed CUresult into SJ_ERR_CUDA with "what: CUDA_ERROR_X (text)". */
sj_status cuda_error(CUresult r, const char *what);

#define CU_CHECK(call, what) \
    do { CUresult cu_r_ = (call); if (cu_r_ != CUDA_SUCCESS) return cuda_error(cu_r_, (what)); } while (0)

#endif
