"""TLS (--tls-cert/--tls-key) with a token, through the real agent and StreamSource."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpulens.core.events import HostStatusEvent
from gpulens.sources.stream.source import StreamFlags, stream_source_from_flags
from tests.fakes.agent_helpers import AgentProc, EventLog, count_samples, make_token_file

pytestmark = pytest.mark.slow


@pytest.fixture
def cert(tmp_path: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed (needed to make a test certificate)")
    crt, key = tmp_path / "agent.crt", tmp_path / "agent.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gpulens-test",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(crt)],
        check=True, capture_output=True, timeout=60,
    )
    return crt, key


def test_tls_with_token_streams_and_unknown_ca_is_refused(
    gpulens_exe: str, tmp_path: Path, cert: tuple[Path, Path]
) -> None:
    crt, key = cert
    token_file = make_token_file(tmp_path / "token")
    agent = AgentProc(
        gpulens_exe, tmp_path, "secure",
        extra=["--interval", "0.1", "--quiet", "--simulated-gpus", "1", "--tls-cert", str(crt), "--tls-key", str(key),
               "--token-file", str(token_file)],
    )
    try:
        flags = StreamFlags(connect=f"tls://127.0.0.1:{agent.port}", token_file=str(token_file), tls_ca=str(crt))
        src = stream_source_from_flags(flags)
        log = EventLog()
        src.start(log)
        try:
            log.wait_for(lambda evs: count_samples("secure")(evs) >= 3, what="samples over TLS")
        finally:
            src.stop()
        # Without the agent's CA the certificate does not verify: down, with the reason.
        bad = stream_source_from_flags(StreamFlags(connect=f"tls://127.0.0.1:{agent.port}"))
        log2 = EventLog()
        bad.start(log2)
        try:
            log2.wait_for(lambda evs: any(isinstance(e, HostStatusEvent) for e in evs), what="TLS failure")
            ev = log2.snapshot()[0]
            assert not ev.up and "CERTIFICATE_VERIFY_FAILED" in ev.reason.upper().replace(" ", "_")
        finally:
            bad.stop()
        assert agent.alive()
    finally:
        agent.stop()


def test_viewer_refuses_unsafe_token_file(tmp_path: Path) -> None:
    from gpulens.core.errors import ConfigError, ConfigProblem

    tok = make_token_file(tmp_path / "tok")
    tok.chmod(0o640)
    with pytest.raises(ConfigError) as err:
        stream_source_from_flags(StreamFlags(connect="127.0.0.1:9", token_file=str(tok)))
    assert (err.value.where, err.value.got, err.value.problem) == ("--token-file", str(tok), ConfigProblem.UNSAFE)
