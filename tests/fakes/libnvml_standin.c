/* TEST DOUBLE of libnvidia-ml.so.1: a C stand-in for the NVIDIA driver's NVML library.
 *
 * Not NVML and no driver. It exports the C functions (names, argument and
 * structure layouts of nvml.h, as the real nvidia-ml-py binding calls them)
 * that gpulens's GPU collector reaches through pynvml, and answers them for
 * fake GPUs from memory, without a system call. The real binding (pynvml's
 * ctypes wrappers, its error classes, its structures) runs unchanged on top,
 * so tests check gpulens against the binding's own code, and a benchmark
 * measures the Python cost of a read with the library's own cost near zero
 * (a real driver adds its ioctl time, unmeasured here).
 *
 * Knobs, exported under the prefix gpulensStandin (no NVML name):
 *   gpulensStandinAddProcess(gpu, pid, bytes, sm, mem)   a compute process on a GPU
 *   gpulensStandinInjectXid(gpu, xid)        one XID event queued on a GPU
 *   gpulensStandinFail(name, gpu, code)      the named call returns code on that GPU (-1: all GPUs);
 *                                            again for the same call and GPU: the new code (0: answers again)
 *   gpulensStandinAnsweringLinks(gpu, n)     only links below n answer their counters (the rest:
 *                                            NVML_ERROR_NOT_SUPPORTED in the field's nvmlReturn)
 *   gpulensStandinSetMigMode(gpu, cur, pend)  the MIG mode (current, pending) a GPU answers (0, 0 at first)
 *   gpulensStandinCalls()                    calls answered since the library was loaded
 *   gpulensStandinSetTime(seconds)           counters follow this time from now on (< 0: CLOCK_MONOTONIC again)
 *
 * Figures: GPU i has utilization 10+i %, memory 20+i % busy, (i+1) GiB of
 * 80 GiB used, 100+i W of a 700 W limit, 40+i C, SM clock 1980 MHz, memory
 * clock 2619 MHz, PCIe RX 1000+i KB/s and TX 2000+i KB/s, no ECC errors, 18
 * NVLink links each moving 64 x (i+1) KiB/s per direction, energy growing at the
 * power, and GPM metric m worth m + i/10 % (DRAM bandwidth: the seconds between the two samples);
 * counters follow CLOCK_MONOTONIC.
 *
 * Build: cc -O2 -shared -fPIC -o libnvml-standin.so libnvml_standin.c, without the soname
 * libnvidia-ml.so.1 (tests/fakes/libnvml_standin.py builds it and hands it to pynvml).
 */
#define _POSIX_C_SOURCE 199309L  /* clock_gettime, CLOCK_MONOTONIC */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <time.h>

#define SUCCESS 0
#define ERROR_UNINITIALIZED 1
#define ERROR_INVALID_ARGUMENT 2
#define ERROR_NOT_SUPPORTED 3
#define ERROR_NOT_FOUND 6
#define ERROR_INSUFFICIENT_SIZE 7
#define ERROR_TIMEOUT 10
#define ERROR_GPU_IS_LOST 15

#define MAX_GPUS 64
#define MAX_PROCS 16
#define MAX_XIDS 16
#define MAX_FAILS 32
#define LINKS 18
#define GIB (1ULL << 30)

typedef struct { unsigned int pid; unsigned long long used; unsigned int sm, mem; } proc_t;

typedef struct gpu {
    int index;
    int silent_links;  /* links from LINKS - silent_links on answer NOT_SUPPORTED */
    int nprocs;
    proc_t procs[MAX_PROCS];
    int nxids;
    unsigned long long xids[MAX_XIDS];
    unsigned int mig_current, mig_pending;
} gpu_t;

typedef struct { char name[64]; int gpu; int code; } fail_t;

static gpu_t gpus[MAX_GPUS];
static const int ngpus = 8;
static int initialised = 0;  /* nvmlInit calls not yet shut down: NVML counts them, as here */
static fail_t fails[MAX_FAILS];
static int nfails = 0;
static unsigned long long calls = 0;

/* An event set: the GPUs registered into it (a GPU's events go to the sets it was registered with). */
typedef struct { unsigned long long registered; } event_set_t;

static double fixed_now = -1.0;

static double now_s(void) {
    if (fixed_now >= 0.0) return fixed_now;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int failing(const char *name, const gpu_t *g) {
    for (int i = 0; i < nfails; i++)
        if (strcmp(fails[i].name, name) == 0 && (fails[i].gpu < 0 || (g && fails[i].gpu == g->index)))
            return fails[i].code;
    return SUCCESS;
}

/* Every device call starts here: counted, checked for a handle and for a planted failure. */
#define ENTER(name, dev)                                                   \
    do {                                                                   \
        calls++;                                                           \
        if (!initialised) return ERROR_UNINITIALIZED;                      \
        if ((dev) == NULL) return ERROR_INVALID_ARGUMENT;                  \
        int planted_ = failing(name, (dev));                               \
        if (planted_) return planted_;                                     \
    } while (0)

/* ---- knobs (not NVML) ---- */

int gpulensStandinAddProcess(int gpu, unsigned int pid, unsigned long long bytes, unsigned int sm, unsigned int mem) {
    if (gpu < 0 || gpu >= MAX_GPUS || gpus[gpu].nprocs >= MAX_PROCS) return ERROR_INVALID_ARGUMENT;
    proc_t *p = &gpus[gpu].procs[gpus[gpu].nprocs++];
    p->pid = pid; p->used = bytes; p->sm = sm; p->mem = mem;
    return SUCCESS;
}

int gpulensStandinSetMigMode(int gpu, unsigned int current, unsigned int pending) {
    if (gpu < 0 || gpu >= MAX_GPUS || current > 1 || pending > 1) return ERROR_INVALID_ARGUMENT;
    gpus[gpu].mig_current = current;
    gpus[gpu].mig_pending = pending;
    return SUCCESS;
}

int gpulensStandinAnsweringLinks(int gpu, int n) {
    if (gpu < 0 || gpu >= MAX_GPUS || n < 0 || n > LINKS) return ERROR_INVALID_ARGUMENT;
    gpus[gpu].silent_links = LINKS - n;
    return SUCCESS;
}

int gpulensStandinInjectXid(int gpu, unsigned long long xid) {
    if (gpu < 0 || gpu >= MAX_GPUS || gpus[gpu].nxids >= MAX_XIDS) return ERROR_INVALID_ARGUMENT;
    gpus[gpu].xids[gpus[gpu].nxids++] = xid;
    return SUCCESS;
}

int gpulensStandinFail(const char *name, int gpu, int code) {
    for (int i = 0; i < nfails; i++)  /* planted before for the same call and GPU: the new code (0: answers) */
        if (strcmp(fails[i].name, name) == 0 && fails[i].gpu == gpu) { fails[i].code = code; return SUCCESS; }
    if (nfails >= MAX_FAILS || strlen(name) >= sizeof fails[0].name) return ERROR_INVALID_ARGUMENT;
    strcpy(fails[nfails].name, name);
    fails[nfails].gpu = gpu;
    fails[nfails].code = code;
    nfails++;
    return SUCCESS;
}

unsigned long long gpulensStandinCalls(void) { return calls; }

void gpulensStandinSetTime(double seconds) { fixed_now = seconds; }

/* ---- library ---- */

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    calls++;
    for (int i = 0; i < MAX_GPUS; i++) gpus[i].index = i;
    initialised++;
    return SUCCESS;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

int nvmlShutdown(void) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    initialised--;
    return SUCCESS;
}

const char *nvmlErrorString(int result) {
    switch (result) {
    case SUCCESS: return "Success";
    case ERROR_UNINITIALIZED: return "Uninitialized";
    case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case ERROR_NOT_SUPPORTED: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case ERROR_NOT_FOUND: return "Not Found";
    case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case ERROR_TIMEOUT: return "Timeout";
    case ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlDeviceGetCount_v2(unsigned int *count) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    *count = (unsigned int)ngpus;
    return SUCCESS;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, gpu_t **device) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    if (index >= (unsigned int)ngpus) return ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return SUCCESS;
}

int nvmlDeviceGetName(gpu_t *g, char *name, unsigned int length) {
    ENTER("nvmlDeviceGetName", g);
    snprintf(name, length, "TEST DOUBLE H100 (libnvml stand-in)");
    return SUCCESS;
}

int nvmlDeviceGetUUID(gpu_t *g, char *uuid, unsigned int length) {
    ENTER("nvmlDeviceGetUUID", g);
    snprintf(uuid, length, "GPU-5a11d000-0000-4000-8000-%012d", g->index);
    return SUCCESS;
}

typedef struct { unsigned int gpu, memory; } utilization_t;

int nvmlDeviceGetUtilizationRates(gpu_t *g, utilization_t *u) {
    ENTER("nvmlDeviceGetUtilizationRates", g);
    u->gpu = 10 + g->index;
    u->memory = 20 + g->index;
    return SUCCESS;
}

typedef struct { unsigned long long total, free, used; } memory_t;

int nvmlDeviceGetMemoryInfo(gpu_t *g, memory_t *m) {
    ENTER("nvmlDeviceGetMemoryInfo", g);
    m->total = 80 * GIB;
    m->used = (unsigned long long)(g->index + 1) * GIB;
    m->free = m->total - m->used;
    return SUCCESS;
}

int nvmlDeviceGetPowerUsage(gpu_t *g, unsigned int *mw) {
    ENTER("nvmlDeviceGetPowerUsage", g);
    *mw = 100000 + 1000 * g->index;
    return SUCCESS;
}

int nvmlDeviceGetEnforcedPowerLimit(gpu_t *g, unsigned int *mw) {
    ENTER("nvmlDeviceGetEnforcedPowerLimit", g);
    *mw = 700000;
    return SUCCESS;
}

int nvmlDeviceGetTotalEnergyConsumption(gpu_t *g, unsigned long long *mj) {
    ENTER("nvmlDeviceGetTotalEnergyConsumption", g);
    *mj = (unsigned long long)(now_s() * (100000 + 1000 * g->index));  /* mW x s = mJ */
    return SUCCESS;
}

int nvmlDeviceGetTemperature(gpu_t *g, int sensor, unsigned int *c) {
    ENTER("nvmlDeviceGetTemperature", g);
    if (sensor != 0) return ERROR_INVALID_ARGUMENT;
    *c = 40 + g->index;
    return SUCCESS;
}

int nvmlDeviceGetClockInfo(gpu_t *g, int type, unsigned int *mhz) {
    ENTER("nvmlDeviceGetClockInfo", g);
    if (type == 1) *mhz = 1980;          /* NVML_CLOCK_SM */
    else if (type == 2) *mhz = 2619;     /* NVML_CLOCK_MEM */
    else if (type == 0) *mhz = 1755;     /* NVML_CLOCK_GRAPHICS */
    else return ERROR_INVALID_ARGUMENT;
    return SUCCESS;
}

int nvmlDeviceGetPcieThroughput(gpu_t *g, int counter, unsigned int *kb) {
    ENTER("nvmlDeviceGetPcieThroughput", g);
    if (counter == 0) *kb = 2000 + g->index;       /* TX */
    else if (counter == 1) *kb = 1000 + g->index;  /* RX */
    else return ERROR_INVALID_ARGUMENT;
    return SUCCESS;
}

int nvmlDeviceGetTotalEccErrors(gpu_t *g, int error_type, int counter_type, unsigned long long *count) {
    ENTER("nvmlDeviceGetTotalEccErrors", g);
    (void)error_type; (void)counter_type;
    *count = 0;
    return SUCCESS;
}

int nvmlDeviceGetCurrentClocksEventReasons(gpu_t *g, unsigned long long *mask) {
    ENTER("nvmlDeviceGetCurrentClocksEventReasons", g);
    *mask = 0;
    return SUCCESS;
}

int nvmlDeviceGetMigMode(gpu_t *g, unsigned int *current, unsigned int *pending) {
    ENTER("nvmlDeviceGetMigMode", g);
    *current = g->mig_current;
    *pending = g->mig_pending;
    return SUCCESS;
}

/* nvml.h nvmlFieldValue_t: 40 bytes, the value union at offset 32. */
typedef struct {
    unsigned int fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned int valueType;
    unsigned int nvmlReturn;
    union { double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal; long long sllVal; } value;
} field_value_t;

int nvmlDeviceGetFieldValues(gpu_t *g, int count, field_value_t *values) {
    ENTER("nvmlDeviceGetFieldValues", g);
    double t = now_s();
    for (int i = 0; i < count; i++) {
        field_value_t *v = &values[i];
        v->timestamp = (long long)(t * 1e6);
        v->latencyUsec = 0;
        v->nvmlReturn = SUCCESS;
        if (v->fieldId == 91) {                                   /* NVML_FI_DEV_NVLINK_LINK_COUNT */
            v->valueType = 1;
            v->value.uiVal = LINKS;
        } else if ((v->fieldId == 138 || v->fieldId == 139) && v->scopeId < (unsigned int)(LINKS - g->silent_links)) {
            /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX / _RX, KiB since the driver loaded */
            v->valueType = 3;
            v->value.ullVal = (unsigned long long)(t * 64.0 * (g->index + 1));
        } else {
            v->nvmlReturn = ERROR_NOT_SUPPORTED;
        }
    }
    return SUCCESS;
}

/* ---- events ---- */

typedef struct {
    gpu_t *device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} event_data_t;

int nvmlEventSetCreate(event_set_t **set) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    return *set ? SUCCESS : ERROR_INVALID_ARGUMENT;
}

int nvmlDeviceRegisterEvents(gpu_t *g, unsigned long long types, event_set_t *set) {
    ENTER("nvmlDeviceRegisterEvents", g);
    if (set == NULL || !(types & 0x8)) return ERROR_INVALID_ARGUMENT;
    set->registered |= 1ULL << g->index;
    return SUCCESS;
}

/* The first GPU registered into this set with a queued XID answers; none: NVML_ERROR_TIMEOUT. */
int nvmlEventSetWait_v2(event_set_t *set, event_data_t *data, unsigned int timeout_ms) {
    calls++;
    (void)timeout_ms;
    if (!initialised) return ERROR_UNINITIALIZED;
    if (set == NULL) return ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < ngpus; i++) {
        gpu_t *g = &gpus[i];
        if ((set->registered >> i & 1) && g->nxids > 0) {
            data->device = g;
            data->eventType = 0x8;  /* nvmlEventTypeXidCriticalError */
            data->eventData = g->xids[0];
            data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFF;
            memmove(&g->xids[0], &g->xids[1], sizeof g->xids[0] * (size_t)(--g->nxids));
            return SUCCESS;
        }
    }
    return ERROR_TIMEOUT;
}

int nvmlEventSetFree(event_set_t *set) {
    calls++;
    if (set == NULL) return ERROR_INVALID_ARGUMENT;
    free(set);
    return SUCCESS;
}

/* ---- processes ---- */

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId, computeInstanceId;
} process_info_t;

static int list_processes(gpu_t *g, unsigned int *count, process_info_t *infos, int graphics) {
    int n = graphics ? 0 : g->nprocs;
    if (infos == NULL || *count < (unsigned int)n) {
        *count = (unsigned int)n;
        return n == 0 ? SUCCESS : ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        infos[i].pid = g->procs[i].pid;
        infos[i].usedGpuMemory = g->procs[i].used;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = (unsigned int)n;
    return SUCCESS;
}

int nvmlDeviceGetComputeRunningProcesses_v3(gpu_t *g, unsigned int *count, process_info_t *infos) {
    ENTER("nvmlDeviceGetComputeRunningProcesses_v3", g);
    return list_processes(g, count, infos, 0);
}

int nvmlDeviceGetGraphicsRunningProcesses_v3(gpu_t *g, unsigned int *count, process_info_t *infos) {
    ENTER("nvmlDeviceGetGraphicsRunningProcesses_v3", g);
    return list_processes(g, count, infos, 1);
}

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil, memUtil, encUtil, decUtil;
} process_util_t;

int nvmlDeviceGetProcessUtilization(gpu_t *g, process_util_t *samples, unsigned int *count,
                                    unsigned long long last_seen) {
    ENTER("nvmlDeviceGetProcessUtilization", g);
    unsigned long long stamp = (unsigned long long)(now_s() * 1e6);
    int n = stamp > last_seen ? g->nprocs : 0;
    if (n == 0) return ERROR_NOT_FOUND;  /* no sample since last_seen */
    if (samples == NULL || *count < (unsigned int)n) {
        *count = (unsigned int)n;
        return ERROR_INSUFFICIENT_SIZE;
    }
    for (int i = 0; i < n; i++) {
        samples[i].pid = g->procs[i].pid;
        samples[i].timeStamp = stamp;
        samples[i].smUtil = g->procs[i].sm;
        samples[i].memUtil = g->procs[i].mem;
        samples[i].encUtil = samples[i].decUtil = 0;
    }
    *count = (unsigned int)n;
    return SUCCESS;
}

/* ---- GPM ---- */

typedef struct { unsigned int version, isSupportedDevice; } gpm_support_t;
typedef struct { gpu_t *device; double at; } gpm_sample_t;
typedef struct { char *shortName, *longName, *unit; } metric_info_t;
typedef struct { unsigned int metricId, nvmlReturn; double value; metric_info_t metricInfo; } gpm_metric_t;
typedef struct {
    unsigned int version, numMetrics;
    gpm_sample_t *sample1, *sample2;
    gpm_metric_t metrics[];
} gpm_metrics_get_t;

int nvmlGpmQueryDeviceSupport(gpu_t *g, gpm_support_t *support) {
    ENTER("nvmlGpmQueryDeviceSupport", g);
    if (support->version != 1) return ERROR_INVALID_ARGUMENT;
    support->isSupportedDevice = 1;
    return SUCCESS;
}

int nvmlGpmSampleAlloc(gpm_sample_t **sample) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    *sample = calloc(1, sizeof **sample);
    return *sample ? SUCCESS : 2;
}

int nvmlGpmSampleFree(gpm_sample_t *sample) { calls++; free(sample); return SUCCESS; }

int nvmlGpmSampleGet(gpu_t *g, gpm_sample_t *sample) {
    ENTER("nvmlGpmSampleGet", g);
    if (sample == NULL) return ERROR_INVALID_ARGUMENT;
    sample->device = g;
    sample->at = now_s();
    return SUCCESS;
}

int nvmlGpmMetricsGet(gpm_metrics_get_t *request) {
    calls++;
    if (!initialised) return ERROR_UNINITIALIZED;
    if (request->version != 1 || request->sample1 == NULL || request->sample2 == NULL) return ERROR_INVALID_ARGUMENT;
    gpu_t *g = request->sample2->device;
    if (g == NULL || request->sample1->device != g) return ERROR_INVALID_ARGUMENT;
    /* Two samples, the earlier first: one buffer twice, or the two swapped, is a caller's bug. */
    if (request->sample1 == request->sample2 || request->sample1->at > request->sample2->at)
        return ERROR_INVALID_ARGUMENT;
    { int planted = failing("nvmlGpmMetricsGet", g); if (planted) return planted; }
    double interval = request->sample2->at - request->sample1->at;
    for (unsigned int i = 0; i < request->numMetrics; i++) {
        gpm_metric_t *m = &request->metrics[i];
        m->nvmlReturn = SUCCESS;
        /* NVML_GPM_METRIC_DRAM_BW_UTIL (10): the seconds between the two samples, so a reader that pairs the
         * wrong samples (not the last two) is seen; every other metric m: m + i/10 */
        m->value = m->metricId == 10 ? interval : m->metricId + g->index / 10.0;
    }
    return SUCCESS;
}
