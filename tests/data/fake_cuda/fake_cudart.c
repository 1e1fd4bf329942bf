/* A test double of the CUDA runtime (libcudart.so.12): cudaMalloc/cudaFree call the driver's
 * cuMemAlloc_v2/cuMemFree_v2 (as the real runtime does, through libcuda), so one allocation is seen by
 * two probes and must be counted once. */
#include <stddef.h>
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
extern CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize);
extern CUresult cuMemFree_v2(CUdeviceptr dptr);
extern CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, void *s);
extern CUresult cuMemFreeAsync(CUdeviceptr dptr, void *s);
#define NOINLINE __attribute__((noinline, visibility("default")))
NOINLINE int cudaMalloc(void **devPtr, size_t size) { return cuMemAlloc_v2((CUdeviceptr *)devPtr, size) ? 2 : 0; }
NOINLINE int cudaFree(void *devPtr) { return cuMemFree_v2((CUdeviceptr)devPtr); }
NOINLINE int cudaMallocAsync(void **devPtr, size_t size, void *s) { return cuMemAllocAsync((CUdeviceptr *)devPtr, size, s) ? 2 : 0; }
NOINLINE int cudaFreeAsync(void *devPtr, void *s) { return cuMemFreeAsync((CUdeviceptr)devPtr, s); }
