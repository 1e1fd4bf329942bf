"""Pushing the agent's GPU-memory profiles to Pyroscope (issue 32 item 14): the second seed's setup.

Every ``every_s`` seconds, for each process the ``--gpumem`` tracer has seen
allocate, the live bytes by Python stack go to Pyroscope's ingest API as
pprof (``POST /ingest?name=APP{labels}&from=&until=&format=pprof``, the
profile as the body), labelled ``host``, ``pid``, ``job`` and, where known,
``pod``, ``namespace``, ``container``, ``slurm_job``, so a fleet's flame
graphs land in the store that Grafana's flame-graph panel reads. A bearer
token (``--pyroscope-token-file``) goes in ``Authorization``.

Bounded: one push at a time from one thread, a 5 s deadline each, at most
:data:`MAX_PROCESSES` processes a round; a failing server is logged (the
log's rate limit counts repeats) and tried again next round, never queued.
No Pyroscope server installs here: the tests check each request against the
documented API with a local HTTP server (docs/gpumem.md says so).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpulens.analysis.flame.pprof import to_pprof
from gpulens.core.errors import ConfigError, ConfigProblem
from gpulens.core.model import HostSample, JobInfo
from gpulens.core.secrets import read_secret
from gpulens.core.workload import workload_key

log = logging.getLogger("gpulens.agent")

MAX_PROCESSES = 256
TIMEOUT_S = 5.0
_APP = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_UNSAFE_VALUE = re.compile(r"[{},=\"\s\\]")
Stacks = Mapping[tuple[str, ...], int]


@dataclass(frozen=True, slots=True)
class PyroscopeTarget:
    """Where to push: the server's base URL, the application name, an optional bearer token (kept out of repr)."""

    url: str
    app: str = "gpulens.gpu_memory"
    token: str = ""

    def __repr__(self) -> str:
        return f"PyroscopeTarget(url={self.url!r}, app={self.app!r}, token={'***' if self.token else ''!r})"


def target_from(url: str, app: str, token_file: str | None) -> PyroscopeTarget:
    """Check the flags; raises ConfigError in one line."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(where=f"--pyroscope {url!r}", expected="http(s)://HOST[:PORT]", got=url,
                          problem=ConfigProblem.BAD_FORMAT, detail="expected http(s)://HOST[:PORT]")
    if not _APP.match(app):
        raise ConfigError(where=f"--pyroscope-app {app!r}", expected="letters, digits, '.', '_' and '-' only",
                          got=app, problem=ConfigProblem.BAD_FORMAT, detail="letters, digits, '.', '_' and '-' only")
    token = read_secret(token_file, "token file", "--pyroscope") if token_file else ""
    return PyroscopeTarget(url.rstrip("/"), app, token)


def _value(text: str) -> str:
    """A label value Pyroscope's ``name`` parameter can carry (its delimiters become ``_``), at most 200 characters."""
    return _UNSAFE_VALUE.sub("_", text)[:200] or "_"


def ingest_url(target: PyroscopeTarget, labels: Mapping[str, str], start: float, end: float) -> str:
    """``/ingest?name=APP{k=v,…}&from=…&until=…&format=pprof&spyName=gpulens`` for one profile."""
    tags = ",".join(f"{k}={_value(v)}" for k, v in sorted(labels.items()) if _LABEL_NAME.match(k))
    query = urllib.parse.urlencode({"name": f"{target.app}{{{tags}}}", "from": int(start), "until": int(end),
                                    "format": "pprof", "spyName": "gpulens", "units": "bytes",
                                    "aggregationType": "average"})
    return f"{target.url}/ingest?{query}"


def push(target: PyroscopeTarget, labels: Mapping[str, str], stacks: Stacks, start: float, end: float) -> None:
    """One profile to Pyroscope. Raises OSError (urllib's errors) with the server's status and reason."""
    body = to_pprof(((list(s), float(n)) for s, n in stacks.items()), "bytes", labels=dict(labels))
    req = urllib.request.Request(ingest_url(target, labels, start, end), data=body, method="POST",
                                 headers={"Content-Type": "application/octet-stream"})
    if target.token:
        req.add_header("Authorization", f"Bearer {target.token}")
    with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
        resp.read(4096)


def labels_of(host: str, pid: int, job: JobInfo | None) -> dict[str, str]:
    """Pyroscope labels of one process: host, pid, job and where it runs."""
    out = {"host": host, "pid": str(pid)}
    if job is not None:
        out["job"] = job.job_key or workload_key(job.workload) or f"{host}:{pid}"
        w = job.workload
        if w is not None:
            for key in ("pod", "namespace", "container", "slurm_job"):
                value = getattr(w, key)
                if value:
                    out[key] = value
    return out


class GpuMemPusher:
    """Pushes each traced process's live GPU memory by stack every ``every_s`` seconds, from its own thread."""

    def __init__(self, target: PyroscopeTarget, snapshot: Callable[[int], Stacks], pids: Callable[[], list[int]],
                 latest: Callable[[], HostSample | None], hostname: str, every_s: float = 15.0) -> None:
        self.target, self.every_s, self.hostname = target, every_s, hostname
        self._snapshot, self._pids, self._latest = snapshot, pids, latest
        self._stop = threading.Event()
        self.pushed = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._run, name="gpulens-pyroscope", daemon=True)

    def start(self) -> None:
        """Start pushing."""
        self._thread.start()

    def push_once(self, start: float, end: float) -> int:
        """One round: every process with live GPU memory; how many profiles were accepted."""
        sample = self._latest()
        jobs = {j.pid: j for j in sample.jobs} if sample is not None else {}
        done = 0
        for pid in self._pids()[:MAX_PROCESSES]:
            stacks = self._snapshot(pid)
            if not stacks:
                continue
            try:
                push(self.target, labels_of(self.hostname, pid, jobs.get(pid)), stacks, start, end)
            except (OSError, ValueError) as err:
                self.failed += 1
                log.warning("pyroscope push to %s failed: %s", self.target.url, err)
                continue
            done += 1
        self.pushed += done
        return done

    def _run(self) -> None:
        start = time.time()
        while not self._stop.wait(self.every_s):
            end = time.time()
            self.push_once(start, end)
            start = end

    def close(self) -> None:
        """Stop (the push in progress ends within its deadline)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=TIMEOUT_S + 1)
