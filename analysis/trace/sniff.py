"""Say what a JSON file with nothing to analyse looks like, so the error can point somewhere.

Used when a file parses as a Chrome trace but has no CPU op and no GPU
activity: a py-spy ``chrometrace``, a memory-only trace, an empty one.
"""

from __future__ import annotations

from collections import Counter

from gpulens.analysis.trace.rank_reduce import RankFold
from gpulens.core.sanitize import clean_text

KINETO_HINT = "gpulens analyze reads PyTorch profiler / Kineto traces (cpu_op, kernel, gpu_memcpy events)"


def what_it_is(fold: RankFold, events: int, path: str = "FILE") -> str:
    """A phrase for an error line: "looks like a py-spy chrometrace (CPU samples); ..."."""
    path = clean_text(path)
    cats: Counter[str] = fold.cats
    if events == 0:
        return f"no CPU or GPU events in its 0 events; {KINETO_HINT}"
    if cats.get("py-spy"):
        return f"looks like a py-spy chrometrace (CPU samples), not a PyTorch profiler trace; use `gpulens flame {path}`"
    if cats.get("python_function") and not fold.gpu:
        return f"has only python_function events ({cats['python_function']}), no ops or kernels; {KINETO_HINT}"
    if (cats.get("cpu_instant_event") or cats.get("[memory]")) and len(cats) <= 3:
        return f"has only memory events; use `gpulens flame --metric memory {path}`"
    shown = ", ".join(f"{clean_text(c)[:40] or '(none)'} x{n}" for c, n in cats.most_common(4))
    return f"no CPU or GPU events in its {events} events (categories: {shown}); {KINETO_HINT}"
