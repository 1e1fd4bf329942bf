from __future__ import annotations

from gpulens.cli import main

raise SystemExit(main())
