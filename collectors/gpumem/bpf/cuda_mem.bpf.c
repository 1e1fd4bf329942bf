// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * gpulens: GPU memory allocations of unmodified processes, with their Python stacks.
 *
 * Uprobes on the CUDA driver's and runtime's allocation calls (libcuda cuMem*, libcudart cuda*).
 * An allocation's entry saves where the pointer will be written and its size, per thread; its
 * return, when the call succeeded, reads the pointer and sends one event with the calling
 * thread's Python frames (code object and last instruction of each, innermost first), walked
 * in the interpreter's own structures: _PyRuntime -> interpreters.head -> threads.head -> the
 * PyThreadState whose native_thread_id is this thread (3.10: whose pthread_t's tid is) -> its
 * frames. Userspace puts the interpreter's addresses and layout (per CPython version) in `pyinfo` for each traced process;
 * a process without an entry gets events without Python frames. A free sends its address.
 *
 * Built by collectors/gpumem/bpf/build.sh: clang -target bpf -O2 -g; no kernel headers, no BTF
 * of the kernel needed (only user memory is read), so one object loads on any kernel with
 * uprobes and BPF ring buffers (5.8+).
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#define MAX_FRAMES 48
#define MAX_THREADS 64
#define MAX_NATIVE 32

enum op { OP_ALLOC = 1, OP_FREE = 2, OP_INIT = 3 };
/* which call: userspace names it; for the size and the pointer's place, what matters is the kind */
enum kind { K_PTR_SIZE = 1, K_PITCH = 2, K_HANDLE = 3, K_FREE = 4 };

struct pyinfo {
	__u64 runtime;          /* address of _PyRuntime in this process */
	__u32 interp_head;      /* _PyRuntimeState.interpreters.head */
	__u32 threads_head;     /* PyInterpreterState.threads.head */
	__u32 tstate_next;      /* PyThreadState.next */
	__u32 tstate_native_tid;/* PyThreadState.native_thread_id (3.10: thread_id, a pthread_t) */
	__u32 tstate_frame;     /* PyThreadState.cframe (3.11) or current_frame (3.13+) */
	__u32 cframe_frame;     /* _PyCFrame.current_frame; 0xffffffff: tstate_frame is the frame itself */
	__u32 frame_code;       /* _PyInterpreterFrame.f_code (f_executable) */
	__u32 frame_previous;   /* _PyInterpreterFrame.previous */
	__u32 frame_instr;      /* _PyInterpreterFrame.prev_instr (instr_ptr; 3.10: PyFrameObject.f_lasti) */
	__u32 pthread_tid;      /* 0xffffffff: tstate_native_tid is the thread id; else the tid's offset in
	                           glibc's struct pthread, which tstate_native_tid points to (3.10) */
};

struct pending {
	__u64 out;     /* where the callee writes the pointer (CUdeviceptr*, void**, handle*) */
	__u64 size;    /* bytes asked for (width for a pitched allocation) */
	__u64 height;  /* rows of a pitched allocation */
	__u64 pitch;   /* where the pitch is written */
	__u32 call;
	__u32 kind;
};

struct pending_key {
	__u64 pid_tgid;
	__u32 call;
	__u32 pad;
};

struct event {
	__u32 pid;
	__u32 tid;
	__u32 op;
	__u32 call;
	__u64 addr;
	__u64 size;
	__u64 time_ns;
	__s32 result;
	__u32 nframes;    /* Python frames found (0: none, or no pyinfo for this process) */
	__u32 py_status;  /* 0 ok, 1 no pyinfo, 2 thread state not found, 3 frames cut at MAX_FRAMES */
	__u32 pad;
	__u64 code[MAX_FRAMES];
	__u64 instr[MAX_FRAMES];
	__u32 nnative;    /* native return addresses in `native`, innermost first (frame pointers walked) */
	__u32 pad2;
	__u64 native[MAX_NATIVE];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct pyinfo);
} pyinfo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct pending_key);  /* a runtime call and the driver call inside it pend at once */
	__type(value, struct pending);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

/* Counts the events the ring buffer had no room for (userspace reports them: never silent). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline __u64 rd(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

static __always_inline void walk_python(struct event *e, __u32 pid, __u32 tid)
{
	struct pyinfo *pi = bpf_map_lookup_elem(&pyinfo, &pid);
	e->nframes = 0;
	if (!pi) {
		e->py_status = 1;
		return;
	}
	__u64 interp = rd(pi->runtime + pi->interp_head);
	__u64 ts = interp ? rd(interp + pi->threads_head) : 0;
	__u64 found = 0;
	for (int i = 0; i < MAX_THREADS && ts; i++) {
		__u64 id = rd(ts + pi->tstate_native_tid);
		if (pi->pthread_tid != 0xffffffff)
			id = id ? (__u32)rd(id + pi->pthread_tid) : 0;
		if (id == tid) {
			found = ts;
			break;
		}
		ts = rd(ts + pi->tstate_next);
	}
	if (!found) {
		e->py_status = 2;
		return;
	}
	__u64 frame = rd(found + pi->tstate_frame);
	if (pi->cframe_frame != 0xffffffff)
		frame = frame ? rd(frame + pi->cframe_frame) : 0;
	__u32 n = 0;
	for (int i = 0; i < MAX_FRAMES; i++) {
		if (!frame)
			break;
		e->code[i] = rd(frame + pi->frame_code);
		e->instr[i] = rd(frame + pi->frame_instr);
		n = i + 1;
		frame = rd(frame + pi->frame_previous);
	}
	e->nframes = n;
	e->py_status = frame ? 3 : 0;
}

static __always_inline int send(void *ctx, struct event *e, __u32 op, __u32 call, __u64 addr, __u64 size,
				__s32 result)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32, tid = (__u32)pid_tgid;
	e->pid = pid;
	e->tid = tid;
	e->op = op;
	e->call = call;
	e->addr = addr;
	e->size = size;
	e->result = result;
	e->time_ns = bpf_ktime_get_ns();
	e->nnative = 0;
	if (op == OP_ALLOC) {
		walk_python(e, pid, tid);
		/* at the return probe the registers are the caller's: its address first, then frame pointers */
		long got = bpf_get_stack(ctx, e->native, sizeof(e->native), BPF_F_USER_STACK);
		e->nnative = got > 0 ? (__u32)((__u64)got >> 3) : 0;
	} else {
		e->nframes = 0;
		e->py_status = 0;
	}
	if (bpf_ringbuf_output(&events, e, sizeof(*e), 0)) {
		__u32 zero = 0;
		__u64 *n = bpf_map_lookup_elem(&lost, &zero);
		if (n)
			__sync_fetch_and_add(n, 1);
	}
	return 0;
}

static __always_inline int enter(__u32 call, __u32 kind, __u64 out, __u64 size, __u64 height, __u64 pitch)
{
	struct pending_key key = {.pid_tgid = bpf_get_current_pid_tgid(), .call = call};
	struct pending p = {.out = out, .size = size, .height = height, .pitch = pitch, .call = call, .kind = kind};
	bpf_map_update_elem(&pending, &key, &p, BPF_ANY);
	return 0;
}

static __always_inline int leave(struct pt_regs *ctx, __u32 call)
{
	struct pending_key key = {.pid_tgid = bpf_get_current_pid_tgid(), .call = call};
	struct pending *p = bpf_map_lookup_elem(&pending, &key);
	if (!p)
		return 0;
	struct pending got = *p;
	bpf_map_delete_elem(&pending, &key);
	__s32 result = (__s32)PT_REGS_RC(ctx);
	if (result != 0)
		return 0; /* CUDA_SUCCESS / cudaSuccess is 0: a failed call allocated nothing */
	__u32 zero = 0;
	struct event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	__u64 addr = rd(got.out);
	__u64 size = got.size;
	if (got.kind == K_PITCH)
		size = rd(got.pitch) * got.height;
	return send(ctx, e, OP_ALLOC, got.call, addr, size, result);
}

static __always_inline int free_(void *ctx, __u32 call, __u64 addr)
{
	__u32 zero = 0;
	struct event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e || !addr)
		return 0;
	return send(ctx, e, OP_FREE, call, addr, 0, 0);
}

/* Call numbers: gpulens.collectors.gpumem.calls.CALLS lists them in this order. */
#define PTR_SIZE_PROBE(name, n)                                                     \
	SEC("uprobe") int BPF_KPROBE(enter_##name, __u64 out, __u64 size)            \
	{ return enter(n, K_PTR_SIZE, out, size, 0, 0); }                            \
	SEC("uretprobe") int leave_##name(struct pt_regs *ctx) { return leave(ctx, n); }

PTR_SIZE_PROBE(cuMemAlloc_v2, 1)
PTR_SIZE_PROBE(cuMemAllocManaged, 2)
PTR_SIZE_PROBE(cuMemAllocHost_v2, 3)
PTR_SIZE_PROBE(cuMemAllocAsync, 4)
PTR_SIZE_PROBE(cuMemAllocFromPoolAsync, 5)
PTR_SIZE_PROBE(cuMemCreate, 6)
PTR_SIZE_PROBE(cudaMalloc, 7)
PTR_SIZE_PROBE(cudaMallocAsync, 8)

/* cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem) */
SEC("uprobe") int BPF_KPROBE(enter_cuMemAllocPitch_v2, __u64 out, __u64 pitch, __u64 width, __u64 height)
{
	return enter(9, K_PITCH, out, width, height, pitch);
}
SEC("uretprobe") int leave_cuMemAllocPitch_v2(struct pt_regs *ctx) { return leave(ctx, 9); }

#define FREE_PROBE(name, n) \
	SEC("uprobe") int BPF_KPROBE(free_##name, __u64 addr) { return free_(ctx, n, addr); }

FREE_PROBE(cuMemFree_v2, 10)
FREE_PROBE(cuMemFreeAsync, 11)
FREE_PROBE(cuMemRelease, 12)
FREE_PROBE(cudaFree, 13)
FREE_PROBE(cudaFreeAsync, 14)
FREE_PROBE(cuMemFreeHost, 15)

/* cuInit: a process starts using CUDA. Userspace learns where its Python frames are before its first
 * allocation (a CUDA context takes far longer to create than that), for probes on every process. */
SEC("uprobe") int BPF_KPROBE(init_cuInit, __u32 flags)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&pyinfo, &pid))
		return 0;
	__u32 zero = 0;
	struct event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	return send(ctx, e, OP_INIT, 16, 0, flags, 0);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
