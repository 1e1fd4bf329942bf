"""Issue 31 item 20: the flame screen's export name has one extension (``train.folded`` offered ``.folded.folded``)."""

from __future__ import annotations

import pytest

from gpulens.analysis.flame.exporters import default_name
from gpulens.analysis.flame.model import build_from_stacks
from gpulens.tui.screens.flame import _stem


@pytest.mark.parametrize(("title", "stem"), [
    ("train.folded", "flame-train"), ("run.bytes.folded: live", "flame-run"), ("trace.json.gz: memory", "flame-trace"),
    ("gpu.pb.gz", "flame-gpu"), ("py-spy on node7: 41,42", "flame-py-spy-on-node7"), ("model.py", "flame-model.py"),
    ("", "flame"),
])
def test_the_stem_drops_the_sources_own_extensions(title: str, stem: str) -> None:
    assert _stem(title) == stem


def test_the_offered_name_ends_in_one_format() -> None:
    profile = build_from_stacks([(["a", "b"], 3.0)], "bytes")
    assert default_name(profile, "folded", _stem("run.bytes.folded")) == "flame-run.bytes.folded"
    assert default_name(profile, "speedscope", _stem("train.folded")) == "flame-train.speedscope.json"
