"""Rewrite the golden frames in this folder from tests/unit/ipc/golden_frames.py.

Run from anywhere (the repository root is found from this file):

    .venv/bin/python tests/data/frames/regen.py          # rewrite, list what changed, print the digests
    .venv/bin/python tests/data/frames/regen.py --check  # only compare; exit 1 when a file differs

The tests never run this. After it changed a gpulens frame: bump PROTOCOL_VERSION in
ipc/stream.py, record the printed digest in GOLDEN_DIGESTS (tests/unit/ipc/test_golden_frames.py)
under the new version, and update docs/protocol.md (README.md here says why).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.unit.ipc.golden_frames import main

if __name__ == "__main__":
    raise SystemExit(main())
