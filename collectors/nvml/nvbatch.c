/* gpulens: many NVML calls in one call from Python (gpulens.collectors.nvml.batch).
 *
 * Reading one GPU takes about twenty NVML calls a tick; through ctypes each
 * costs a Python-to-C crossing, an argument conversion and pynvml's wrapper.
 * Here Python hands over the list of calls once (function addresses that
 * pynvml resolved in the library it loaded, arguments, output buffers that
 * Python owns and keeps alive) and each tick asks for all of them in one
 * crossing; the return codes come back in an array, the answers in the
 * buffers. This file knows no NVML structure and loads no library: it only
 * calls the addresses it is given, in the shapes below, in order.
 *
 * Built at install time (setup.py) as a plain shared object and loaded with
 * ctypes; without a C compiler gpulens reads GPUs through pynvml alone.
 */
#include <stdint.h>

/* The argument shapes of the NVML calls a read makes (p: pointer, i: int, u: unsigned int,
 * q: unsigned long long); "out" and "out2" are the call's output pointers. */
enum {
    GL_P = 0,     /* f(a0)                           nvmlGpmMetricsGet(request) */
    GL_PO = 1,    /* f(a0, out)                      nvmlDeviceGetPowerUsage(dev, &mw) */
    GL_PIO = 2,   /* f(a0, (int)i1, out)             nvmlDeviceGetClockInfo(dev, type, &mhz) */
    GL_PIIO = 3,  /* f(a0, (int)i1, (int)i2, out)    nvmlDeviceGetTotalEccErrors(dev, t, c, &n) */
    GL_POO = 4,   /* f(a0, out, out2)                nvmlDeviceGetMigMode(dev, &cur, &pending) */
    GL_PCO = 5,   /* f(a0, out2 = &count, out)       process lists: *count set to cap first */
    GL_POU = 6,   /* f(a0, out, (unsigned)i1)        nvmlEventSetWait_v2(set, &data, timeout) */
    GL_POCQ = 7,  /* f(a0, out, out2 = &count, q1)   nvmlDeviceGetProcessUtilization: *count = cap */
};

#define GL_NOT_CALLED (-1)
#define GL_BAD_SHAPE (-2)
#define NVML_GPU_IS_LOST 15
#define GL_VERSION 2  /* raised with any change to gl_call or the shapes: Python refuses another */

typedef struct {
    void *fn;
    void *a0;
    void *out;
    void *out2;
    uint64_t i1;
    uint64_t i2;
    uint32_t shape;
    uint32_t cap;      /* GL_PCO, GL_POCQ: *out2 (an unsigned int count) is set to cap before the call */
    int32_t after;     /* >= 0: called only if that earlier call returned 0 (else GL_NOT_CALLED) */
    int32_t on;        /* 0: skipped (GL_NOT_CALLED) */
} gl_call;

typedef int (*f_p)(void *);
typedef int (*f_pp)(void *, void *);
typedef int (*f_pip)(void *, int, void *);
typedef int (*f_piip)(void *, int, int, void *);
typedef int (*f_ppp)(void *, void *, void *);
typedef int (*f_ppu)(void *, void *, unsigned int);
typedef int (*f_pppq)(void *, void *, void *, unsigned long long);

/* (GL_VERSION << 16) | sizeof(gl_call): what gpulens.collectors.nvml.batch checks before the first call,
 * so a library built from another version of this file is never called with the wrong layout. */
int gpulens_nvml_batch_abi(void) { return (GL_VERSION << 16) | (int)sizeof(gl_call); }

/* Make calls[0..n) in order; codes[k] is call k's return code, GL_NOT_CALLED if it was not made.
 * A call answering NVML_ERROR_GPU_IS_LOST ends the batch (the rest are not made). Returns the
 * number of calls made. */
int gpulens_nvml_batch(const gl_call *calls, int n, int32_t *codes) {
    int made = 0;
    int lost = 0;
    for (int k = 0; k < n; k++) {
        const gl_call *c = &calls[k];
        codes[k] = GL_NOT_CALLED;
        if (lost || !c->on || c->fn == 0) continue;
        if (c->after >= 0 && (c->after >= k || codes[c->after] != 0)) continue;
        int rc;
        switch (c->shape) {
        case GL_P: rc = ((f_p)c->fn)(c->a0); break;
        case GL_PO: rc = ((f_pp)c->fn)(c->a0, c->out); break;
        case GL_PIO: rc = ((f_pip)c->fn)(c->a0, (int)c->i1, c->out); break;
        case GL_PIIO: rc = ((f_piip)c->fn)(c->a0, (int)c->i1, (int)c->i2, c->out); break;
        case GL_POO: rc = ((f_ppp)c->fn)(c->a0, c->out, c->out2); break;
        case GL_PCO:
            if (c->out2 == 0) { codes[k] = GL_BAD_SHAPE; continue; }
            *(unsigned int *)c->out2 = c->cap;
            rc = ((f_ppp)c->fn)(c->a0, c->out2, c->out);
            break;
        case GL_POU: rc = ((f_ppu)c->fn)(c->a0, c->out, (unsigned int)c->i1); break;
        case GL_POCQ:
            if (c->out2 == 0) { codes[k] = GL_BAD_SHAPE; continue; }
            *(unsigned int *)c->out2 = c->cap;
            rc = ((f_pppq)c->fn)(c->a0, c->out, c->out2, (unsigned long long)c->i1);
            break;
        default: codes[k] = GL_BAD_SHAPE; continue;
        }
        codes[k] = rc;
        made++;
        if (rc == NVML_GPU_IS_LOST) lost = 1;
    }
    return made;
}

/* One batch of a list: its calls, their count and where their codes go. */
typedef struct {
    const gl_call *calls;
    int32_t *codes;
    int32_t n;
    int32_t pad;
} gl_list;

/* Every GPU's batch in one crossing: gpulens_nvml_batch on lists[0..k) in order (a lost GPU ends only
 * its own list). Returns the number of calls made. */
int gpulens_nvml_batches(const gl_list *lists, int k) {
    int made = 0;
    for (int i = 0; i < k; i++) made += gpulens_nvml_batch(lists[i].calls, lists[i].n, lists[i].codes);
    return made;
}
