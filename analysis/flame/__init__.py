"""Flame graphs: a call tree from weighted stacks, its importers and exporters.

Public names: :class:`~gpulens.analysis.flame.model.Profile` (frozen call
tree), :func:`~gpulens.analysis.flame.importers.load_profile` (any
supported file), and the folded/speedscope exporters. No module here imports textual or rich.
"""
