"""Connect one-shot commands (``gpulens trace --host``, ``gpulens profile --host``) to one agent.

``HOST:PORT`` (or ``tls://HOST:PORT``) as for ``--connect``, or
``ssh:NODE`` to run ``gpulens agent --stdio`` there (``--ssh-command``
replaces ssh as for ``gpulens --ssh``). A one-shot command does not retry:
the first failure to reach the agent ends it with the link's reason.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from gpulens.core.errors import CollectorError, ConfigError, ConfigProblem

if TYPE_CHECKING:
    from gpulens.sources.stream.source import StreamSource

AGENT_WAIT_S = 30.0


def open_agent(
    host: str,
    *,
    token_file: str | None = None,
    ssh_command: str | None = None,
    download_dir: Path | None = None,
    wait_s: float = AGENT_WAIT_S,
    tls_ca: str | None = None,
) -> tuple[StreamSource, str]:
    """A started StreamSource connected to ``host``'s agent, and the address to send requests to.

    Raises:
        ConfigError: a malformed ``host`` or an unsafe token file.
        CollectorError: the agent did not answer within ``wait_s`` or refused (the reason is given).
    """
    from gpulens.core.events import HostStatusEvent, SampleEvent, SourceEvent
    from gpulens.sources.stream.source import (
        LinkOptions,
        StreamSource,
        ssh_target,
        tcp_target,
        token_from_file,
    )

    if host.startswith("ssh:"):
        if not host[4:]:
            raise ConfigError("--host ssh:NODE needs a node name", where="--host", expected="ssh:NODE", got=host,
                              problem=ConfigProblem.MISSING)
        target = ssh_target(host[4:], ssh_command)
    else:
        target = tcp_target(host)
    token = token_from_file(token_file)
    ssl_context = None
    if target.tls:
        import ssl

        try:  # --tls-ca: the CA that signed the agent's certificate (else the system's)
            ssl_context = ssl.create_default_context(cafile=tls_ca)
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(where=f"--tls-ca {tls_ca}", expected="a PEM CA file", got=tls_ca,
                              problem=ConfigProblem.UNREADABLE, detail=f"cannot load the CA file: {err}") from err
    settled = threading.Event()
    outcome: list[str] = []

    def emit(event: SourceEvent) -> None:
        if isinstance(event, SampleEvent) or (isinstance(event, HostStatusEvent) and event.up):
            settled.set()
        elif isinstance(event, HostStatusEvent) and not settled.is_set():
            outcome.append(event.reason)
            settled.set()

    src = StreamSource([target], LinkOptions(token=token, ssl_context=ssl_context, download_dir=download_dir))
    src.start(emit)
    if not settled.wait(wait_s) or outcome:
        src.stop()
        why = f": {outcome[0]}" if outcome else f" within {wait_s:.0f} s"
        raise CollectorError(f"no gpulens agent answered at {target.address}{why}")
    return src, target.address
