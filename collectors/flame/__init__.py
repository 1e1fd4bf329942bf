"""Flame graphs: a call tree from weighted stacks, its importers and exporters.

Public names: :class:`~gpulens.collectors.flame.model.Profile` (frozen call
tree), :func:`~gpulens.collectors.flame.importers.load_profile` (any
supported file), :func:`~gpulens.collectors.flame.pyspy.sample_pids`.
No module here imports textual or rich.
"""
