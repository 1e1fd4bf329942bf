"""Issue 28: the CPython layouts gpulens walks, checked against the real interpreter; a real PyTorch program's stacks.

The offsets in ``gpulens.collectors.gpumem.python_stack.LAYOUTS`` are what
the BPF program reads in another process's memory; a wrong one gives wrong
frames or none. This compiles ``offsetof`` of each field from the running
interpreter's own internal headers (``Py_BUILD_CORE``) and compares. Then a
real PyTorch CPU program whose ``nn.Module.forward`` calls the fake driver
is traced: its stack must hold torch's own Python frames (``Module >
_call_impl``) between the caller and the forward.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gpulens.collectors.gpumem.python_stack import LAYOUTS

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = Path(sysconfig.get_paths()["include"])

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


@pytest.mark.skipif(sys.version_info[:2] not in LAYOUTS, reason=f"no layout for {sys.version_info[:2]} in the table")
@pytest.mark.skipif(not (INCLUDE / "internal" / "pycore_frame.h").exists() or shutil.which("cc") is None,
                    reason="needs the interpreter's internal headers and a C compiler")
def test_the_layout_equals_offsetof_in_this_interpreters_headers(tmp_path: Path) -> None:
    src = tmp_path / "off.c"
    body = "".join(f'  printf("{k} %zu\\n", (size_t)({v}));\n' for k, v in FIELDS.items())
    src.write_text("#define Py_BUILD_CORE 1\n#include <Python.h>\n#include <stddef.h>\n#include <stdio.h>\n"
                   '#include "internal/pycore_runtime.h"\n#include "internal/pycore_interp.h"\n'
                   '#include "internal/pycore_frame.h"\n' f"int main(void) {{\n{body}  return 0;\n}}\n")
    exe = tmp_path / "off"
    subprocess.run(["cc", f"-I{INCLUDE}", "-o", str(exe), str(src)], check=True)
    got = dict(line.split() for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                        check=True).stdout.splitlines())
    layout = LAYOUTS[sys.version_info[:2]]
    assert {k: getattr(layout, k) for k in FIELDS} == {k: int(v) for k, v in got.items()}


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

    why = why_not() or (None if shutil.which("cc") else "needs a C compiler")
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
