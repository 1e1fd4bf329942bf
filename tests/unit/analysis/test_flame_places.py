"""Issue 33 item 3: a malformed profile's error names the line or field at fault as a value (``at``), one per
format, and the sentence names the same place right after the file's name."""

from __future__ import annotations

import json
import pickle

import pytest

from gpulens.analysis.flame.errors import FlameFormatError, FlameProblem, Where
from gpulens.analysis.flame.importers import group_from_bytes

_SNAP = {"segments": [], "device_traces": [[{"action": "alloc", "size": 8, "frames": [{"line": 1}]}]]}
_GECKO = {"meta": {"preprocessedProfileVersion": 47, "interval": 1}, "threads": [{
    "name": "T", "samples": {"stack": [0]}, "stackTable": {"prefix": [None], "frame": [0]}, "frameTable": {"func": [0]},
    "funcTable": {"name": [0]}, "stringArray": ["f"]}]}


@pytest.mark.parametrize(("data", "at"), [
    (b"a;b 1\n" + b"x" * (1 << 20) + b" 1\nc d\nc e\n", "line 2"),  # longer than a line may be (and mostly bad)
    (json.dumps({"shared": {"frames": []}, "profiles": [{"type": "sampled", "unit": "parsecs"}]}).encode(),
     "profiles[0].unit"),
    (json.dumps({"nodes": [{"id": 1, "callFrame": {}}, 7], "samples": [], "timeDeltas": [], "startTime": 0,
                 "endTime": 1}).encode(), "nodes[1]"),
    (json.dumps({"head": {"id": 4, "callFrame": {}, "selfSize": -2, "children": []}, "samples": []}).encode(), "node 4"),
    (pickle.dumps(_SNAP, protocol=4), "device_traces[0][0].frames[0]"),
    (json.dumps(_GECKO).encode(), "T: samples"),  # thread T has no sample times
], ids=["folded", "speedscope", "cpuprofile", "heapprofile", "snapshot", "gecko"])
def test_each_format_names_the_place(data: bytes, at: str) -> None:
    with pytest.raises(FlameFormatError) as info:
        group_from_bytes(data, "f").pick()
    assert (info.value.problem, info.value.at) == (FlameProblem.MALFORMED, at)
    assert str(info.value).startswith(f"f: {at}: ")  # the sentence names the same place


def test_a_place_renders_as_the_sentences_name_it() -> None:
    where = Where("p.json", "profiles[0]").then(".samples[3]")
    err = where.error("frame index 9 out of range 0..2", FlameProblem.BAD_REFERENCE)
    assert (str(where), err.at, err.problem) == ("p.json: profiles[0].samples[3]", "profiles[0].samples[3]",
                                                 FlameProblem.BAD_REFERENCE)
    assert str(err) == "p.json: profiles[0].samples[3]: frame index 9 out of range 0..2"
