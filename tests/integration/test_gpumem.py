"""Issue 28 for real: eBPF uprobes on a CUDA driver and runtime, Python stacks walked in the kernel.

No GPU here: the driver and runtime are test doubles with the real signatures
(tests/data/fake_cuda, built with the system C compiler), called through
ctypes by a Python program with known call shapes
(tests/fakes/gpumem_workload.py). The flame graph must equal the known bytes
per Python stack exactly, live and total, each frame at the line that made
the call. The BPF object is the one shipped in the package, loaded by root
through libbpf; a second test rebuilds it from its source and loads that.
Skipped with the reason where eBPF cannot load (not root, no libbpf, no
uprobes) or no C compiler builds the doubles.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpulens.collectors.gpumem.python_stack import TRAMPOLINE
from gpulens.collectors.gpumem.tracer import (
    GpuMemTracer,
    NoPythonFrames,
    NoPythonFramesKind,
    why_not,
)
from gpulens.core.reasons import rendered
from tests.fakes.pythons import MINORS, cpython, skip_reason

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "data" / "fake_cuda"
WORKLOAD = ROOT / "tests" / "fakes" / "gpumem_workload.py"
MIB = 1 << 20
SKIP = rendered(why_not()) or (None if shutil.which("cc") else "needs a C compiler (cc) to build the fake CUDA libraries")

pytestmark = [pytest.mark.timeout(120), pytest.mark.skipif(SKIP is not None, reason=SKIP or "")]


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out / "libcuda.so.1"), str(FAKE / "fake_cuda.c"),
                    "-lpthread"], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out / "libcudart.so.12"), str(FAKE / "fake_cudart.c"),
                    f"-L{out}", "-l:libcuda.so.1", "-Wl,-rpath,$ORIGIN"], check=True)
    return out


@pytest.fixture
def workload(libdir: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(libdir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _run(proc: subprocess.Popen[str], tracer: GpuMemTracer) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "DONE"
    while tracer.poll(50):
        pass


def _traced(argv: list[str], native: bool = False) -> tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int],
                                                             NoPythonFrames | None]:
    """Run ``argv`` (it prints READY, waits for a line, allocates, prints DONE, waits), traced from READY on:
    (live, total, why its Python frames cannot be read, as the tracer said at attach)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        tracer = GpuMemTracer([proc.pid], native=native)
        try:
            assert set(tracer.python) == {proc.pid}
            why = tracer.python[proc.pid]
            _run(proc, tracer)
            live, total = tracer.snapshot()
        finally:
            tracer.close()
    finally:
        proc.kill()
        proc.wait()
    return live, total, why


def _line(text: str) -> int:
    lines = WORKLOAD.read_text().splitlines()
    hits = [n for n, line in enumerate(lines, 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


def _f(label: str, text: str) -> str:
    return f"{label} ({WORKLOAD}:{_line(text)})"


def _expected() -> tuple[dict[tuple[str, ...], int], dict[tuple[str, ...], int]]:
    top = (_f("<module>", "    main()"),)
    alloc = f"alloc ({WORKLOAD}:{_line('assert cuda.cuMemAlloc_v2(')})"
    init = (*top, _f("main", "model = Model()"))
    weights = (*init, _f("Model > __init__", "self.weights = ["), _f("Model > __init__ > <listcomp>", "self.weights = ["),
               _f("Model > weight", "# ALLOC weight"), alloc, "cuMemAlloc_v2")
    temp = (*init, _f("Model > __init__", "# ALLOC temp"), alloc, "cuMemAlloc_v2")
    kv = (*top, _f("main", "    allocate_kv_cache()"), _f("allocate_kv_cache", "# ALLOC kv"), "cudaMalloc",
          "cuMemAlloc_v2")
    scratch = (*top, _f("main", "    scratch()"), _f("scratch", "# ALLOC scratch"), alloc, "cuMemAlloc_v2")
    stream = (*top, _f("main", "    stream_alloc()"), _f("stream_alloc", "# ALLOC async"), "cuMemAllocAsync")
    create = (*top, _f("main", "    grow_segment()"), _f("grow_segment", "# ALLOC create"), "cuMemCreate")
    pitch = (*top, _f("main", "    pitched()"), _f("pitched", "# ALLOC pitch"), "cuMemAllocPitch_v2")
    live = {weights: 3 * MIB, kv: 64 * MIB, create: 2 * MIB, pitch: 1024 * 100}
    total = {**live, temp: 1 * MIB, scratch: 4 * MIB, stream: 8 * MIB}
    return live, total


def _without_thread(stacks: dict[tuple[str, ...], int]) -> tuple[dict[tuple[str, ...], int], list[tuple[str, ...]]]:
    kept = {s: n for s, n in stacks.items() if not any(f.startswith(("Thread > _bootstrap (", "_bootstrap (")) for f in s)}
    return kept, [s for s in stacks if s not in kept]


def _as_in(minor: int, stack: tuple[str, ...]) -> tuple[str, ...]:
    """A 3.11 stack as CPython 3.``minor`` shows it.

    3.10 has no qualified names (``Model > weight`` reads ``weight``). From 3.12 a
    comprehension runs inside its function (PEP 709: no ``<listcomp>`` frame), and
    each entry into the interpreter from C leaves CPython's own frame: one below
    ``<module>``, one where ``type.__call__`` runs ``Model.__init__``.
    """
    if minor == 10:
        return tuple(re.sub(r"^(?:\S+ > )+", "", f) if "(" in f else f for f in stack)
    if minor < 12:
        return stack
    out = [TRAMPOLINE]
    for f in stack:
        if "<listcomp>" in f:
            continue
        if f.startswith("Model > __init__ ("):
            out.append(TRAMPOLINE)
        out.append(f)
    return tuple(out)


def test_bytes_per_python_stack_are_exact_live_and_total(workload: subprocess.Popen[str]) -> None:
    tracer = GpuMemTracer([workload.pid])
    try:
        assert tracer.python == {workload.pid: None}
        assert {"cuMemAlloc_v2", "cuMemFree_v2", "cudaMalloc", "cudaFree", "cuMemCreate", "cuMemRelease"} <= set(
            tracer.attached[workload.pid])
        _run(workload, tracer)
        live, total = tracer.snapshot()
        assert tracer.lost == 0 and tracer.malformed == 0 and tracer.allocations.unknown_frees == 0
    finally:
        tracer.close()
    want_live, want_total = _expected()
    for got, want in ((live, want_live), (total, want_total)):
        main, threads = _without_thread(got)
        assert main == want
        # The second thread's allocation: Python's own bootstrap frames below it (lines vary by version).
        (stack,) = threads
        assert stack[-3:] == (_f("worker", "# ALLOC worker"), f"alloc ({WORKLOAD}:{_line('assert cuda.cuMemAlloc_v2(')})",
                              "cuMemAlloc_v2")
        assert got[stack] == 2 * MIB


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_every_cpython_from_3_10_to_3_13_gives_each_allocation_its_stack(libdir: Path, minor: int) -> None:
    """The same program under each interpreter: exact bytes, every frame at its line, the other thread's too."""
    exe = cpython(minor)
    if exe is None:
        pytest.skip(skip_reason(minor))
    live, total, why = _traced([exe, str(WORKLOAD), str(libdir)])
    assert why is None
    for got, want in zip((live, total), _expected(), strict=True):
        main, (thread,) = _without_thread(got)
        assert main == {_as_in(minor, s): n for s, n in want.items()}
        worker = _as_in(minor, (_f("worker", "# ALLOC worker"), _f("alloc", "assert cuda.cuMemAlloc_v2("),
                                "cuMemAlloc_v2"))[-3:]
        assert thread[-3:] == worker and got[thread] == 2 * MIB


def test_a_process_whose_python_is_unknown_still_shows_its_bytes(libdir: Path, tmp_path: Path) -> None:
    """A C program (no interpreter) calling the driver: its bytes show, under the reason."""
    src = tmp_path / "native.c"
    src.write_text('#include <stdio.h>\n#include <stddef.h>\nint cuMemAlloc_v2(unsigned long long*, size_t);\n'
                   'int main(void){unsigned long long p; char b[8]; puts("READY"); fflush(stdout);\n'
                   'if(!fgets(b,8,stdin))return 1; cuMemAlloc_v2(&p, 12345); puts("DONE"); fflush(stdout);\n'
                   'fgets(b,8,stdin); return 0;}\n')
    exe = tmp_path / "native"
    subprocess.run(["cc", "-o", str(exe), str(src), f"-L{libdir}", "-l:libcuda.so.1", f"-Wl,-rpath,{libdir}"],
                   check=True)
    live, _, why = _traced([str(exe)])
    assert why is not None and why.kind is NoPythonFramesKind.NOT_READABLE and "not a CPython process" in why.detail
    assert live == {("<python frames not read: not a CPython process>", "cuMemAlloc_v2"): 12345}


NATIVE_PROGRAM = """
import ctypes, sys
cuda = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")
pool = ctypes.CDLL(sys.argv[1] + "/libfakealloc.so")
cuda.cuInit(0)

def reserve():
    p = ctypes.c_uint64(0)
    pool.caching_malloc(ctypes.byref(p), ctypes.c_size_t(3 << 20))  # ALLOC native

print("READY", flush=True)
sys.stdin.readline()
reserve()
print("DONE", flush=True)
sys.stdin.readline()
"""


def test_native_frames_sit_between_python_and_the_cuda_call(libdir: Path, tmp_path: Path) -> None:
    """``native=True``: the allocator's own C functions, symbolised from its ELF file, under the Python caller."""
    lib = tmp_path / "libfakealloc.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-o",
                    str(lib), str(FAKE / "fake_allocator.c"), f"-L{libdir}", "-l:libcuda.so.1",
                    f"-Wl,-rpath,{libdir}"], check=True)
    (tmp_path / "libcuda.so.1").symlink_to(libdir / "libcuda.so.1")
    script = tmp_path / "native_alloc.py"
    script.write_text(NATIVE_PROGRAM)
    live, _, _ = _traced([sys.executable, str(script), str(tmp_path)], native=True)
    ((stack, size),) = live.items()
    lines = NATIVE_PROGRAM.splitlines()
    call = next(n for n, text in enumerate(lines, 1) if "# ALLOC native" in text)
    assert size == 3 << 20
    assert stack[-3:] == ("libfakealloc.so: caching_malloc", "libfakealloc.so: grow_pool", "cuMemAlloc_v2")
    first_native = next(i for i, f in enumerate(stack) if not f.endswith(")"))
    assert stack[first_native - 1] == f"reserve ({script}:{call})"
    # between them only native frames (ctypes' and libffi's), each read `lib: symbol` or `lib+0x…`, none Python's
    middle = stack[first_native:-3]
    assert all(re.fullmatch(r"[\w.+-]+(: \S.*|\+0x[0-9a-f]+)", f) for f in middle), middle
    assert not any("python3" in f for f in middle)


def test_a_process_without_cuda_is_refused_with_the_reason() -> None:
    from gpulens.collectors.gpumem.libbpf import BpfError

    with pytest.raises(BpfError, match="maps no CUDA driver or runtime"):
        GpuMemTracer([os.getpid()])


@pytest.mark.skipif(shutil.which("clang") is None or shutil.which("llvm-strip") is None,
                    reason="needs clang and llvm-strip (Debian clang, llvm) to rebuild the BPF object")
def test_the_object_rebuilt_from_its_source_loads_and_works(workload: subprocess.Popen[str], tmp_path: Path) -> None:
    out = tmp_path / "rebuilt.bpf.o"
    subprocess.run([str(ROOT / "collectors" / "gpumem" / "bpf" / "build.sh"), str(out)], check=True)
    tracer = GpuMemTracer([workload.pid], bpf_object=out)
    try:
        _run(workload, tracer)
        live, _ = tracer.snapshot()
    finally:
        tracer.close()
    assert _without_thread(live)[0] == _expected()[0]


def test_probes_on_the_library_file_see_a_process_started_later(libdir: Path) -> None:
    """The agent's way: probes on the library for every process; one started after them is known from cuInit on."""
    tracer = GpuMemTracer(libraries=[str(libdir / "libcuda.so.1"), str(libdir / "libcudart.so.12")])
    try:
        assert "cuInit" not in tracer.attached[-1] and "cuMemAlloc_v2" in tracer.attached[-1]
        proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(libdir)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
            deadline = time.monotonic() + 10
            while proc.pid not in tracer.python and time.monotonic() < deadline:
                tracer.poll(50)
            assert tracer.python.get(proc.pid, "unseen") is None  # its cuInit made it known
            _run(proc, tracer)
            live, total = tracer.snapshot([proc.pid])
            others, _ = tracer.snapshot([proc.pid + 1_000_000])
        finally:
            proc.kill()
            proc.wait()
    finally:
        tracer.close()
    want_live, want_total = _expected()
    assert _without_thread(live)[0] == want_live and _without_thread(total)[0] == want_total
    assert others == {}


def _ask_agent(agent: object, principal: object, params: dict[str, object]) -> tuple[object, bytes]:
    import threading

    from gpulens.ipc import stream
    from tests.fakes.agent_helpers import MemTransport

    t = MemTransport()
    threading.Thread(target=agent.serve_connection, args=(t, "mem"),  # type: ignore[attr-defined]
                     kwargs={"principal": principal, "kind": "control"}, daemon=True).start()
    hello = t.until(stream.Hello)
    assert "gpumem" in hello.caps
    t.send(stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer"))
    t.send(stream.Request(id=1, kind="gpumem", params=params))
    data = b""
    while True:
        msg = t.next_msg()
        if isinstance(msg, stream.FileChunk) and msg.id == 1:
            data += msg.data
        if isinstance(msg, stream.Response) and msg.id == 1:
            t.end()
            return msg, data


def test_the_agent_answers_a_gpumem_request_at_once_and_only_for_the_owner(libdir: Path) -> None:
    from gpulens.agent.agent import Agent
    from gpulens.agent.gpumem import GpuMemService
    from gpulens.collectors.synthetic import SyntheticSampler
    from gpulens.ipc.principal import owner, peer

    agent = Agent(SyntheticSampler(hostname="gm", gpus=0, interval_s=0.1), hostname="gm", interval_s=0.1)
    service = GpuMemService([str(libdir / "libcuda.so.1"), str(libdir / "libcudart.so.12")])
    agent.requests.gpumem = service
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(libdir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "READY"
        deadline = time.monotonic() + 10  # a real CUDA context takes longer to make than this
        while proc.pid not in service.tracer.python and time.monotonic() < deadline:
            time.sleep(0.05)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "DONE"
        want = {";".join(s): str(n) for s, n in _expected()[0].items()}
        deadline = time.monotonic() + 10  # the service's thread reads the events: asked until it has them all
        while True:
            began = time.monotonic()
            resp, data = _ask_agent(agent, owner("token"), {"pids": [proc.pid], "mode": "live"})
            answered_s = time.monotonic() - began
            assert resp.ok, resp.error  # type: ignore[attr-defined]
            assert answered_s < 5  # no window traced: the service kept it all (the benchmark times it)
            lines = dict(line.rsplit(" ", 1) for line in data.decode().splitlines())
            got = {k: v for k, v in lines.items() if not k.startswith("Thread")}
            if got == want or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got == want
        refused, nothing = _ask_agent(agent, peer(os.geteuid() + 4242), {"pids": [proc.pid]})
        assert not refused.ok and "belongs to uid" in refused.error and nothing == b""  # type: ignore[attr-defined]
    finally:
        proc.kill()
        proc.wait()
        service.close()
        agent.stop()


def test_the_tui_run_as_root_reads_this_machines_gpu_memory_without_an_agent(libdir: Path) -> None:
    """``LocalSource`` handed ``LocalGpuMemory`` (as the command line does for a root TUI): the first ask attaches,
    the next ones read what was allocated since, by Python stack."""
    from gpulens.agent.gpumem import LocalGpuMemory
    from gpulens.collectors.synthetic import SyntheticSampler
    from gpulens.core.config import Config
    from gpulens.sources.gpumem import local_gpu_memory
    from gpulens.sources.local import LocalSource

    reader = LocalGpuMemory()
    source = LocalSource(Config(), lambda: SyntheticSampler(hostname="here", gpus=0), gpumem=reader)
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(libdir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
        first = local_gpu_memory(source, [proc.pid])
        assert first is not None
        text, note = first.result(timeout=30)
        assert text == "" and note["python"] == {str(proc.pid): None}  # attached: nothing allocated yet
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "DONE"
        deadline = time.monotonic() + 10  # the reader's own thread takes the events
        while time.monotonic() < deadline:
            later = local_gpu_memory(source, [proc.pid])
            assert later is not None
            text, note = later.result(timeout=30)
            if len(text.splitlines()) == len(_expected()[0]) + 1:  # and the worker thread's
                break
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
        reader.close()
    lines = dict(line.rsplit(" ", 1) for line in text.splitlines())
    want = {";".join(s): str(n) for s, n in _expected()[0].items()}
    assert {k: v for k, v in lines.items() if "_bootstrap" not in k} == want and note["lost"] == 0


HOSTILE = r"""
import ctypes, sys
cuda = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")
cuda.cuInit(0)
def f():
    p = ctypes.c_uint64(0)
    cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(4096))
f.__code__ = f.__code__.replace(co_qualname="\x1b]52;c;cm0K\x07evil", co_filename="/tmp/\x1b[2Jx.py")
print("READY", flush=True)
sys.stdin.readline()
f()
print("DONE", flush=True)
sys.stdin.readline()
"""


def test_names_a_program_gives_its_code_are_cleaned(libdir: Path, tmp_path: Path) -> None:
    """A traced program chooses its functions' and files' names: no escape sequence reaches a terminal."""
    script = tmp_path / "hostile.py"
    script.write_text(HOSTILE)
    live, _, _ = _traced([sys.executable, str(script), str(libdir)])
    ((stack, size),) = live.items()
    assert size == 4096 and any("evil" in f for f in stack)
    assert not any(ch in f for f in stack for ch in "\x1b\x07")
