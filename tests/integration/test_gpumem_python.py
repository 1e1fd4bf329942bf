"""Issue 28: the CPython layouts gpulens walks, checked against the real interpreters; a real PyTorch program's stacks.

The offsets in ``gpulens.collectors.gpumem.layouts`` are what the BPF program
reads in another process's memory; a wrong one gives wrong frames or none.
For each of CPython 3.10 to 3.13 found on the machine (tests/fakes/pythons.py:
pyenv's versions or ``python3.X`` on PATH; a version absent is skipped with the
reason) this compiles ``offsetof`` of each field from that interpreter's own
internal headers (``Py_BUILD_CORE``) and compares it with the table (3.10 to
3.12) or with what a running 3.13 publishes in ``_Py_DebugOffsets``; and reads
real line tables as that interpreter does. Then a
real PyTorch CPU program whose ``nn.Module.forward`` calls the fake driver
is traced: its stack must hold torch's own Python frames (``Module >
_call_impl``) between the caller and the forward.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpulens.collectors.gpumem.layouts import DIRECT
from gpulens.collectors.gpumem.python_stack import LAYOUTS, find_python, line_of, line_of_310
from tests.fakes.pythons import MINORS, cpython, skip_reason

ROOT = Path(__file__).resolve().parents[2]

FIELDS = {
    "interp_head": "offsetof(_PyRuntimeState, interpreters.head)",
    "threads_head": "offsetof(PyInterpreterState, threads.head)",
    "tstate_next": "offsetof(PyThreadState, next)",
    "tstate_native_tid": "offsetof(PyThreadState, native_thread_id)",
    "tstate_frame": "offsetof(PyThreadState, cframe)",
    "cframe_frame": "offsetof(_PyCFrame, current_frame)",
    "frame_code": "offsetof(_PyInterpreterFrame, f_code)",
    "frame_previous": "offsetof(_PyInterpreterFrame, previous)",
    "frame_instr": "offsetof(_PyInterpreterFrame, prev_instr)",
    "code_filename": "offsetof(PyCodeObject, co_filename)",
    "code_name": "offsetof(PyCodeObject, co_name)",
    "code_qualname": "offsetof(PyCodeObject, co_qualname)",
    "code_firstlineno": "offsetof(PyCodeObject, co_firstlineno)",
    "code_linetable": "offsetof(PyCodeObject, co_linetable)",
    "code_adaptive": "offsetof(PyCodeObject, co_code_adaptive)",
    "ascii_data": "sizeof(PyASCIIObject)",
    "compact_data": "sizeof(PyCompactUnicodeObject)",
    "bytes_data": "offsetof(PyBytesObject, ob_sval)",
}
"""The fields of each layout, as ``offsetof`` in that version's internal headers (3.11's names)."""
FIELDS_BY_MINOR = {
    10: {**{k: v for k, v in FIELDS.items() if k not in ("cframe_frame", "code_qualname", "code_adaptive")},
         "threads_head": "offsetof(PyInterpreterState, tstate_head)",
         "tstate_native_tid": "offsetof(PyThreadState, thread_id)", "tstate_frame": "offsetof(PyThreadState, frame)",
         "frame_code": "offsetof(PyFrameObject, f_code)", "frame_previous": "offsetof(PyFrameObject, f_back)",
         "frame_instr": "offsetof(PyFrameObject, f_lasti)"},
    11: FIELDS,
    12: FIELDS,
    13: {**{k: v for k, v in FIELDS.items() if k != "cframe_frame"},
         "tstate_frame": "offsetof(PyThreadState, current_frame)",
         "frame_code": "offsetof(_PyInterpreterFrame, f_executable)",
         "frame_instr": "offsetof(_PyInterpreterFrame, instr_ptr)"},
}


def _interpreter(minor: int) -> str:
    exe = cpython(minor)
    if exe is None:
        pytest.skip(skip_reason(minor))
    return exe


def _offsets(exe: str, minor: int, tmp_path: Path) -> dict[str, int]:
    """``offsetof`` of each field, compiled against ``exe``'s own internal headers."""
    include = Path(subprocess.run([exe, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    frame_h = "frameobject.h" if minor == 10 else "internal/pycore_frame.h"
    if not (include / "internal" / "pycore_runtime.h").exists() or shutil.which("cc") is None:
        pytest.skip(f"needs CPython 3.{minor}'s internal headers ({include}/internal) and a C compiler")
    src = tmp_path / "off.c"
    body = "".join(f'  printf("{k} %zu\\n", (size_t)({v}));\n' for k, v in FIELDS_BY_MINOR[minor].items())
    src.write_text("#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <stddef.h>\n#include <stdio.h>\n"
                   '#include "internal/pycore_runtime.h"\n#include "internal/pycore_interp.h"\n'
                   f'#include "{frame_h}"\n' f"int main(void) {{\n{body}  return 0;\n}}\n")
    exe_off = tmp_path / "off"
    subprocess.run(["cc", f"-I{include}", "-o", str(exe_off), str(src)], check=True)
    out = subprocess.run([str(exe_off)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def _running(exe: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([exe, "-c", "import sys; print('READY', flush=True); sys.stdin.readline()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "READY"
    return proc


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_each_layout_equals_offsetof_in_that_interpreters_headers(minor: int, tmp_path: Path) -> None:
    """Up to 3.12 the table; from 3.13 what a running interpreter publishes in its ``_Py_DebugOffsets``."""
    exe = _interpreter(minor)
    want = _offsets(exe, minor, tmp_path)
    proc = _running(exe)
    try:
        target = find_python(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    assert target.version == (3, minor)
    if minor <= 12:
        assert target.layout == LAYOUTS[(3, minor)]
    assert {k: getattr(target.layout, k) for k in want} == want
    if minor == 10:  # no qualified names, f_lasti, and the thread found through its pthread_t
        assert target.layout.code_qualname == 0 and target.layout.lasti and target.layout.tid_via_pthread
        assert target.pthread_tid == 720  # glibc x86_64's struct pthread, found in the process
    else:
        assert target.pthread_tid == DIRECT and not target.layout.lasti
    assert target.code_type != 0
    assert (target.layout.cframe_frame == DIRECT) == (minor in (10, 13))


LINES_PROGRAM = r"""
import dis, json, sys, threading, json.decoder
def nested(x):
    y = [i * 2
         for i in range(x)
         if i % 3]
    try:
        return sum(y) // (x - 5)
    except ZeroDivisionError:
        return -1
out = []
for code in (nested.__code__, threading.Thread.run.__code__, threading.Thread._bootstrap_inner.__code__,
             json.decoder.JSONDecoder.raw_decode.__code__, dis.dis.__code__):
    if sys.version_info >= (3, 11):
        lines = [[i, p[0]] for i, p in enumerate(code.co_positions())]
    else:
        lines = [[off, line] for start, end, line in code.co_lines() for off in range(start, end, 2)]
    out.append([code.co_linetable.hex(), code.co_firstlineno, lines])
print(json.dumps(out))
"""


@pytest.mark.parametrize("minor", MINORS, ids=[f"3.{m}" for m in MINORS])
def test_line_tables_read_as_that_interpreter_reads_them(minor: int) -> None:
    """3.10's byte pairs (by byte offset) and 3.11+'s location table (by code unit) against the real ``co_lines``."""
    exe = _interpreter(minor)
    codes = json.loads(subprocess.run([exe, "-c", LINES_PROGRAM], capture_output=True, text=True,
                                      check=True).stdout)
    checked = 0
    for table_hex, first, lines in codes:
        table = bytes.fromhex(table_hex)
        for where, line in lines:
            if line is None:
                continue
            got = line_of_310(table, first, where) if minor == 10 else line_of(table, first, where)
            assert got == line, (minor, where)
            checked += 1
    assert checked > 100


TORCH_PROGRAM = """
import ctypes, sys
import torch
cuda = ctypes.CDLL(sys.argv[1] + "/libcuda.so.1")

class KVCache(torch.nn.Module):
    def forward(self, x):
        p = ctypes.c_uint64(0)
        cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(x.numel() * 4))  # ALLOC forward
        return x * 2

model = KVCache()
print("READY", flush=True)
sys.stdin.readline()
with torch.no_grad():
    model(torch.ones(1000))
print("DONE", flush=True)
sys.stdin.readline()
"""


@pytest.mark.torch
@pytest.mark.timeout(120)
def test_a_real_pytorch_programs_frames(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason="needs the PyTorch CPU build")
    from gpulens.collectors.gpumem.tracer import GpuMemTracer, why_not
    from gpulens.core.reasons import rendered

    why = rendered(why_not()) or (None if shutil.which("cc") else "needs a C compiler")
    if why:
        pytest.skip(why)
    fake = ROOT / "tests" / "data" / "fake_cuda"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(tmp_path / "libcuda.so.1"), str(fake / "fake_cuda.c"),
                    "-lpthread"], check=True)
    script = tmp_path / "kv.py"
    script.write_text(TORCH_PROGRAM)
    proc = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "READY"
        tracer = GpuMemTracer([proc.pid])
        try:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "DONE"
            while tracer.poll(50):
                pass
            live, _ = tracer.snapshot()
        finally:
            tracer.close()
    finally:
        proc.kill()
        proc.wait()
    ((stack, size),) = live.items()
    assert size == 4000
    lines = TORCH_PROGRAM.splitlines()
    line = next(n for n, text in enumerate(lines, 1) if "# ALLOC forward" in text)
    call = next(n for n, text in enumerate(lines, 1) if "model(torch.ones(1000))" in text)
    assert stack[0] == f"<module> ({script}:{call})"
    assert stack[-2:] == (f"KVCache > forward ({script}:{line})", "cuMemAlloc_v2")
    assert any(f.startswith("Module > _call_impl (") and "torch/nn/modules/module.py" in f for f in stack)
