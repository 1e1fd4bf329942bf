"""Package discovery for the one ``gpulens`` distribution (metadata lives in pyproject.toml).

Each top-level folder is a layer of the data path and installs as
``gpulens.<folder>`` (docs/architecture.md). Sub-packages are found by
``find_packages``, so a new one is never silently left out. The links
``gpulens/<layer> -> ../<layer>`` let tools run from the repository root see
the same ``gpulens.<layer>`` names (import-linter, mypy, pyright); the build
takes each layer from its own folder, not through its link.
"""

from setuptools import find_packages, setup

LAYERS = ("core", "collectors", "ipc", "agent", "sources", "store", "analysis", "tui")

packages = ["gpulens", *(f"gpulens.{p}" for p in find_packages("gpulens", exclude=[*LAYERS, *(f"{x}.*" for x in LAYERS)]))]
package_dir = {"gpulens": "gpulens"}
for layer in LAYERS:
    packages.append(f"gpulens.{layer}")
    packages += [f"gpulens.{layer}.{p}" for p in find_packages(layer)]
    package_dir[f"gpulens.{layer}"] = layer

setup(packages=packages, package_dir=package_dir)
