/* A native allocator between Python and the fake CUDA driver, for the native-frames test of issue 28.
 * Built with frame pointers and no sibling calls (as PyTorch's caching allocator sits between Python
 * and cudaMalloc): python -> ctypes -> caching_malloc -> grow_pool -> cuMemAlloc_v2. Built by the tests
 * with the system C compiler. */
#include <stddef.h>

int cuMemAlloc_v2(unsigned long long *dptr, size_t bytes);

__attribute__((noinline)) int grow_pool(unsigned long long *dptr, size_t bytes)
{
	int rc = cuMemAlloc_v2(dptr, bytes);
	__asm__ volatile("" ::: "memory");
	return rc;
}

__attribute__((noinline)) int caching_malloc(unsigned long long *dptr, size_t bytes)
{
	int rc = grow_pool(dptr, bytes);
	__asm__ volatile("" ::: "memory");
	return rc;
}
