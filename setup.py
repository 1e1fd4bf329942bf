"""Package discovery for the one ``gpulens`` distribution (metadata lives in pyproject.toml).

Each top-level folder is a layer of the data path and installs as
``gpulens.<folder>`` (docs/architecture.md). Sub-packages are found by
``find_packages``, so a new one is never silently left out. The links
``gpulens/<layer> -> ../<layer>`` let tools run from the repository root see
the same ``gpulens.<layer>`` names (import-linter, mypy, pyright); the build
takes each layer from its own folder, not through its link.

One part is C: ``collectors/nvml/nvbatch.c`` makes a GPU's NVML calls in one
crossing from Python (``gpulens.collectors.nvml.batch``). It is built here
when a C compiler is at hand; without one the install still succeeds, says
so, and GPUs are read through pynvml's wrappers alone.
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
LAYERS = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui")

packages = ["gpulens", *(f"gpulens.{p}" for p in find_packages("gpulens", exclude=[*LAYERS, *(f"{x}.*" for x in LAYERS)]))]
package_dir = {"gpulens": "gpulens"}
for layer in LAYERS:
    packages.append(f"gpulens.{layer}")
    packages += [f"gpulens.{layer}.{p}" for p in find_packages(layer)]
    package_dir[f"gpulens.{layer}"] = layer


BATCH = "gpulens.collectors.nvml._nvbatch"
BATCH_FILE = "libgpulens-nvbatch.so.1"
"""The built library's name: a shared object's, not an extension module's (it is loaded with ctypes, never
imported, and a name ending in .so would make it look like a module to pkgutil and to import)."""


class OptionalBuildExt(build_ext):
    """Builds the NVML call batch if it can; a failure is said, not fatal (pynvml alone reads GPUs)."""

    def get_ext_filename(self, fullname: str) -> str:
        # Asked with the full name (copying into the source tree) and with the last part only (building).
        *package, name = fullname.split(".")
        if name == BATCH.rsplit(".", 1)[1]:
            return os.path.join(*package, BATCH_FILE)
        return str(super().get_ext_filename(fullname))

    def run(self) -> None:
        for stale in (HERE / "collectors" / "nvml").glob("*nvbatch*.so*"):  # an editable install's last build:
            stale.unlink()  # gone first, so a failed build leaves none behind to be loaded instead
        try:
            super().run()
        except Exception as err:  # no compiler at all: the pure-Python path serves
            print(f"gpulens: NVML call batch not built ({err}); GPUs will be read through pynvml alone",
                  file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as err:  # a compiler that fails: the same
            print(f"gpulens: {ext.name} not built ({err}); GPUs will be read through pynvml alone",
                  file=sys.stderr)


setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=[Extension(BATCH, sources=["collectors/nvml/nvbatch.c"],
                           extra_compile_args=["-O2", "-Wall", "-Wextra"])],
    cmdclass={"build_ext": OptionalBuildExt},
)
