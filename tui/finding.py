"""``/`` finding, as in k9s: one regex over hosts, jobs, users and tree IDs, linked both ways.

Pure: no widgets. :func:`compile_filter` turns the typed text into a
:class:`Filter` once (``!`` in front inverts; an invalid regex raises
:class:`FilterError` so the caller keeps the old filter); :meth:`Filter.select`
says which hosts, jobs and GPUs every panel of a screen shows. A host that
matches brings its jobs (``/node01`` shows job 4711 that runs there); a job,
user or tree ID that matches brings the hosts and GPUs it runs on (``/alice``
shows alice's hosts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpulens.core.errors import GpulensError
from gpulens.store.views import JobView


class FilterError(GpulensError, ValueError):
    """The text is not a valid regular expression (the message says why, in one line)."""

    title = "filter error"


@dataclass(frozen=True, slots=True)
class Selection:
    """What a filter keeps: hosts in their given order, job keys, and (host, GPU index) rows."""

    hosts: tuple[str, ...]
    jobs: frozenset[str]
    gpus: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Filter:
    """A compiled ``/`` filter; ``text`` is what the user typed (``!`` included)."""

    text: str
    pattern: re.Pattern[str] | None
    inverted: bool

    @property
    def active(self) -> bool:
        """False for the empty filter (everything shown)."""
        return self.pattern is not None

    def job_matches(self, job: JobView) -> bool:
        """The job's key, tree ID, user or command line matches (before inversion)."""
        p = self.pattern
        return p is not None and any(p.search(x) for x in (job.key, job.tree_id, job.user, job.cmdline, job.where))

    def select(self, hosts: Sequence[str], jobs: Sequence[JobView],
               gpus: Sequence[tuple[str, int]]) -> Selection:
        """The hosts, jobs and GPU rows shown under this filter (all of them when inactive).

        Not inverted: hosts that match and the hosts of jobs that match; jobs
        that match and the jobs on hosts that match; every GPU of a host that
        matches, and the GPUs a matching job holds on the others (all of that
        host's GPUs if the job holds none). Inverted (``!``): the other hosts and their GPUs,
        and the jobs that do not match and run on one of those hosts (a job on node08 and node10
        stays under ``!node0``, beside node10).
        """
        p = self.pattern
        if p is None:
            return Selection(tuple(hosts), frozenset(j.key for j in jobs), tuple(gpus))
        direct_hosts = {h for h in hosts if p.search(h)}
        direct_jobs = [j for j in jobs if self.job_matches(j)]
        if self.inverted:
            return _select_inverted(hosts, jobs, gpus, direct_hosts, direct_jobs)
        return _select_plain(hosts, jobs, gpus, direct_hosts, direct_jobs)


def _select_plain(hosts: Sequence[str], jobs: Sequence[JobView], gpus: Sequence[tuple[str, int]],
                  direct_hosts: set[str], direct_jobs: list[JobView]) -> Selection:
    """What a plain filter shows, given the hosts and jobs that match it (see :meth:`Filter.select`)."""
    job_hosts = {h for j in direct_jobs for h in j.hosts}
    held = _held_gpus(direct_jobs)
    shown_hosts = direct_hosts | job_hosts
    shown_jobs = {j.key for j in direct_jobs} | {j.key for j in jobs if direct_hosts.intersection(j.hosts)}

    def gpu_shown(h: str, i: int) -> bool:
        if h in direct_hosts:
            return True
        return h in job_hosts and (i in held[h] if h in held else True)

    return Selection(tuple(h for h in hosts if h in shown_hosts), frozenset(shown_jobs),
                     tuple((h, i) for h, i in gpus if gpu_shown(h, i)))


def _held_gpus(jobs: list[JobView]) -> dict[str, set[int]]:
    """host -> the indexes of the GPUs ``jobs`` hold there (hosts where they hold none are absent)."""
    held: dict[str, set[int]] = {}
    for j in jobs:
        for h, i in j.gpus:
            if i.isdigit():
                held.setdefault(h, set()).add(int(i))
    return held


def _select_inverted(hosts: Sequence[str], jobs: Sequence[JobView], gpus: Sequence[tuple[str, int]],
                     direct_hosts: set[str], direct_jobs: list[JobView]) -> Selection:
    """What an inverted (``!``) filter shows, given the hosts and jobs that match it (see :meth:`Filter.select`)."""
    shown_hosts = direct_hosts | {h for j in direct_jobs for h in j.hosts}
    kept = [h for h in hosts if h not in shown_hosts]
    kept_set = set(kept)
    # Linked as the plain filter is: a host kept shows its jobs (but not those that match), and
    # a job is kept only beside one of its hosts (bob's job on a host /!alice hides goes with it).
    direct = {j.key for j in direct_jobs}
    return Selection(tuple(kept),
                     frozenset(j.key for j in jobs if j.key not in direct and kept_set.intersection(j.hosts)),
                     tuple((h, i) for h, i in gpus if h in kept_set))


NO_FILTER = Filter("", None, False)


def compile_filter(text: str) -> Filter:
    """The filter for ``text``: a case-insensitive regex, ``!regex`` inverted, empty for none.

    Raises:
        FilterError: ``text`` is not a valid regex (``/node0[1`` -> "bad regex 'node0[1': ...").
    """
    inverted = text.startswith("!")
    body = text[1:] if inverted else text
    if not body:
        return Filter(text, None, False)
    try:
        pattern = re.compile(body, re.IGNORECASE)
    except re.error as err:
        raise FilterError(f"bad regex {body!r}: {err.msg} at position {err.pos} (the old filter stays)") from None
    return Filter(text, pattern, inverted)
