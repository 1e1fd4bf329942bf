/* A test double of the CUDA driver (libcuda.so.1): the allocation calls gpulens probes, with their real
 * signatures (cuda.h, CUDA 12), handing out fake device addresses from a counter. No GPU, no memory:
 * only the call shapes matter to the uprobes. Built by the tests with the system C compiler. */
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef struct { int type; } CUmemAllocationProp;

static CUdeviceptr next_addr = 0x7f0000000000ULL;
static unsigned long long next_handle = 1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static CUdeviceptr take(size_t bytes)
{
	pthread_mutex_lock(&lock);
	CUdeviceptr a = next_addr;
	next_addr += (bytes + 0xfffff) & ~0xfffffULL;
	next_addr += 0x100000;
	pthread_mutex_unlock(&lock);
	return a;
}

#define NOINLINE __attribute__((noinline, visibility("default")))
NOINLINE CUresult cuInit(unsigned flags) { (void)flags; return 0; }
NOINLINE CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) { if (!bytesize) return 1; *dptr = take(bytesize); return 0; }
NOINLINE CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned flags) { (void)flags; *dptr = take(bytesize); return 0; }
NOINLINE CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { *pp = (void *)take(bytesize); return 0; }
NOINLINE CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{ (void)elem; size_t p = (width + 511) & ~(size_t)511; *pitch = p; *dptr = take(p * height); return 0; }
NOINLINE CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s) { (void)s; *dptr = take(bytesize); return 0; }
NOINLINE CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{ (void)pool; (void)s; *dptr = take(bytesize); return 0; }
NOINLINE CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                              unsigned long long flags)
{ (void)size; (void)prop; (void)flags; pthread_mutex_lock(&lock); *handle = next_handle++; pthread_mutex_unlock(&lock); return 0; }
NOINLINE CUresult cuMemFree_v2(CUdeviceptr dptr) { (void)dptr; return 0; }
NOINLINE CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { (void)dptr; (void)s; return 0; }
NOINLINE CUresult cuMemRelease(CUmemGenericAllocationHandle handle) { (void)handle; return 0; }
NOINLINE CUresult cuMemFreeHost(void *p) { (void)p; return 0; }
