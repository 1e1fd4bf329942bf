"""The golden frames: one fixed example of each message in docs/protocol.md, and its exact bytes.

For every :class:`Golden` in :data:`CATALOG`, ``tests/data/frames/<name>.hex`` holds the bytes
the product's own encoder makes of the entry's fixed message (hex under a ``#`` comment
header). ``tests/unit/ipc/test_golden_frames.py`` checks both ways: each encoder of the entry
makes exactly those bytes, and the product's decoder turns them back into the fixed message.
A digest over each family's files is recorded in that test beside the version that governs it.

Everything here is fixed: nonces, the token, times, pids. Where the product has a pure
builder for part of a message (the HMACs, ``trace_struct``, the history and chunk framing,
``TraceProgress.status``, the Kineto config text) the fixed message is made with it, so a
renamed key there changes the bytes too.

After an intentional format change, rewrite the files with ``tests/data/frames/regen.py``
(or ``python -m tests.unit.ipc.golden_frames`` from the repository root); it prints the new
digests. A change to any ``gpulens`` frame also needs ``PROTOCOL_VERSION`` bumped in
``ipc/stream.py`` and docs/protocol.md updated ("Golden frames").
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpulens.agent import request_kinds as kinds
from gpulens.core.model import (
    CacheSample,
    CpuSample,
    DiskIo,
    GpuProcess,
    GpuSample,
    HostSample,
    IbPort,
    JobInfo,
    MemorySample,
    NetInterface,
    NetworkSample,
    StorageSample,
    Workload,
)
from gpulens.ipc import auth, handover, stream
from gpulens.ipc.control import control_name
from gpulens.ipc.errors import VersionMismatch
from gpulens.ipc.kineto import codec, kconfig
from gpulens.ipc.kineto.endpoint import ABSTRACT_NAME
from gpulens.ipc.kineto.requests import TraceRequest
from gpulens.ipc.principal import peer
from gpulens.ipc.request_schema import (
    GpuMemAnswer,
    GpuMemParams,
    HistoryParams,
    answer_to_wire,
    decode_params,
    to_wire,
)
from gpulens.ipc.serialize import sample_to_dict, to_dict
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.stream_frames import history_frames, pack_sample, sample_frame
from gpulens.sources.tracing import trace_struct
from tests.fakes import kineto_client
from tests.paths import DATA

FRAMES = DATA / "frames"
GPULENS = "gpulens"
"""Family of the agent <-> viewer stream and control-socket bytes: versioned by ``stream.PROTOCOL_VERSION``."""
KINETO = "kineto"
"""Family of libkineto's on-demand datagrams: its format, never ours to change."""

# -- fixed values ------------------------------------------------------------------

TOKEN = b"golden-frames-token-0123456789abcdef"
SERVER_NONCE = bytes(range(32))
CLIENT_NONCE = bytes(range(32, 64))
T0 = 1_700_000_000.0
"""The first sample's time (2023-11-14 22:13:20 UTC)."""
PID = 4242
TAG = "a1b2c3d4e5f60718"
RECEIVER = handover.RECEIVER_PREFIX + "0123456789abcdef" * 2

WORKLOAD = Workload(
    runtime="containerd",
    container_id="3f2a9c1d0e8b",
    pod_uid="6b1f0c2e-7d4a-4e59-9a3b-1c2d3e4f5a6b",
    qos="guaranteed",
    namespace="ml",
    pod="train-0",
    container="trainer",
    slurm_job="777",
    slurm_step="0",
    slurm_task="0",
    slurm_gpus="0",
    visible_gpus="0",
    ns_pid=7,
    found_by="cgroup",
)

GPU = GpuSample(
    index=0,
    name="NVIDIA H100 80GB HBM3",
    uuid="GPU-5f1c3a2b-0d4e-4f6a-8b7c-9d0e1f2a3b4c",
    utilization_percent=87.5,
    memory_utilization_percent=42.0,
    mem_used_bytes=40 * 1024**3,
    mem_total_bytes=80 * 1024**3,
    power_w=512.25,
    power_limit_w=700.0,
    temperature_c=61.0,
    sm_clock_mhz=1980,
    mem_clock_mhz=2619,
    pcie_rx_bytes_per_s=1.5e9,
    pcie_tx_bytes_per_s=0.75e9,
    nvlink_rx_bytes_per_s=None,
    nvlink_tx_bytes_per_s=None,
    ecc_corrected=3,
    ecc_uncorrected=0,
    xid_events=(79,),
    throttle_reasons=("sw_power_cap",),
    sm_activity_percent=80.0,
    sm_occupancy_percent=50.0,
    dram_bw_util_percent=35.5,
    processes=(GpuProcess(pid=PID, used_memory_bytes=38 * 1024**3, sm_util_percent=85.0, mem_util_percent=40.0),),
    unavailable={"nvlink_rx_bytes_per_s": "NVML: not supported", "nvlink_tx_bytes_per_s": "NVML: not supported"},
    tensor_active_percent=60.5,
    nvlink_total_bytes_per_s=2.5e10,
    energy_joules=123456.5,
    vendor="nvidia",
    allocated=Workload(namespace="ml", pod="train-0", container="trainer", found_by="cgroup"),
)

JOB = JobInfo(
    pid=PID,
    tree_id="777",
    cmdline="python train.py --epochs 3",
    user="alice",
    start_time=T0 - 3600.0,
    cpu_percent=101.5,
    rss_bytes=6 * 1024**3,
    gpu_mem_bytes={"0": 38 * 1024**3},
    job_key="777",
    ancestors=(4200, 1),
    kineto_polling=True,
    workload=WORKLOAD,
)

SAMPLE = HostSample(
    host="node-a",
    time=T0,
    cpu=CpuSample(total_percent=12.5, per_core_percent=(10.0, 15.0), load_avg_1m=0.75, count=2),
    memory=MemorySample(
        total_bytes=256 * 1024**3, used_bytes=64 * 1024**3, available_bytes=190 * 1024**3, swap_used_bytes=0
    ),
    network=NetworkSample(
        rx_bytes_per_s=1250.0,
        tx_bytes_per_s=2500.0,
        interfaces=(NetInterface("eth0", 1250.0, 2500.0, rx_bytes=10_000_000, tx_bytes=20_000_000),),
    ),
    storage=StorageSample(
        read_bytes_per_s=4096.0,
        write_bytes_per_s=8192.0,
        disks=(DiskIo("nvme0n1", 4096.0, 8192.0, read_bytes=1 << 30, write_bytes=1 << 31),),
    ),
    cache=CacheSample(l2_hit_ratio=0.5, l3_hit_ratio=None, mem_bandwidth_bytes_per_s=1.5e9),
    infiniband=(
        IbPort("mlx5_0", 1, 3.0e9, 2.5e9, state="ACTIVE", rate="200 Gb/sec (4X HDR)", symbol_errors=0, link_downed=0),
    ),
    gpus=(GPU,),
    jobs=(JOB,),
    unavailable={"cache.l3_hit_ratio": "perf_event_open: ENOENT (no hardware counters)"},
    simulated=False,
)
"""A small but complete sample: every model type, most fields set, two reasons for n/a."""

LATER = HostSample(
    host="node-a",
    time=T0 + 1.0,
    cpu=CpuSample(total_percent=None),
    memory=MemorySample(total_bytes=None, used_bytes=None),
    network=NetworkSample(rx_bytes_per_s=None, tx_bytes_per_s=None),
    storage=StorageSample(read_bytes_per_s=None, write_bytes_per_s=None),
)
"""The next sample, as small as a sample gets (every optional part at its default)."""

TRACE = TraceRequest(pids=(PID,), duration_ms=500, record_shapes=True, with_stack=True, warmup_s=1.0, timeout_s=60.0)
JOB_TRACE = TraceRequest(pids=(), job_id=None, duration_ms=None, iterations=3, timeout_s=120.0)
TRACE_LOG = Path("/tmp/gpulens-traces/trace.json")
TRACE_FILE = f"{PID}-trace_{PID}.json"
TRACE_JSON = b'{"schemaVersion": 1, "traceEvents": []}'
FOLDED_NAME = f"profile-node-a-{int(T0)}.folded"
FOLDED = b"main;train;step 42\nmain;train;load 7\n"
GPUMEM_NAME = f"gpumem-node-a-{int(T0)}.bytes.folded"
GPUMEM_FOLDED = (b"<module> (train.py:12);Trainer > step (train.py:40);cudaMalloc;cuMemAlloc_v2 1073741824\n"
                 b"<before attach: allocated before the probes attached (not attributed)> 536870912\n")
"""Live bytes by Python stack, as ``agent.gpumem.gpumem`` folds them (one ``before attach`` frame)."""


# -- builders: the product's code where it has a pure one ----------------------------


class _Collect:
    """A request connection that keeps what the request kind sends (``kinds.RequestConn``)."""

    principal = peer(1000)

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def put(self, frame: bytes, timeout_s: float | None = None) -> bool:
        self.frames.append(frame)
        return True


def _history_reply() -> tuple[list[bytes], dict[str, Any]]:
    """What the agent's ``history`` kind sends for request 1 (since T0): frames and result."""
    conn = _Collect()
    req = stream.Request(id=1, kind="history", params={"since": T0, "until": T0 + 60.0})
    kept = {T0: SAMPLE, T0 + 1.0: LATER}

    def history_fn(since: float | None, until: float | None) -> list[bytes]:
        return [pack_sample(sample_to_dict(s)) for t, s in kept.items() if since is not None and since < t]

    params = decode_params(req.kind, req.params)
    assert isinstance(params, HistoryParams)
    result = answer_to_wire(kinds.history(conn, req.id, params, history_fn))
    return conn.frames, result


def _chunks(rid: int, name: str, data: bytes) -> list[bytes]:
    """The agent's ``chunk`` frames for one file (``kinds.send_bytes``)."""
    conn = _Collect()
    kinds.send_bytes(conn, rid, name, data)
    return conn.frames


def _only(frames: list[bytes]) -> bytes:
    if len(frames) != 1:
        raise AssertionError(f"expected one frame, got {len(frames)}")
    return frames[0]


def _trace_status() -> dict[str, Any]:
    """The agent's ``trace_status`` answer after three state changes (``TraceProgress.status``)."""
    progress = kinds.TraceProgress()
    key = (1, TAG)
    progress.set(key, "requested", "request received by the agent")
    progress.set(key, "waiting for poll", f"waiting for process {PID} to poll (every 1 s)")
    progress.set(key, "tracing", "tracing 500 ms")
    return answer_to_wire(progress.status(key))


def _version_error() -> str:
    try:
        stream.check_version(stream.PROTOCOL_VERSION + 1)
    except VersionMismatch as err:
        return str(err)
    raise AssertionError("check_version accepted the next protocol version")


def _config_text() -> str:
    """The Kineto config the endpoint hands over for TRACE (a common start: nothing to stamp)."""
    req = TraceRequest(pids=(PID,), duration_ms=500, record_shapes=True, warmup_s=1.0, start_time_ms=int(T0 * 1000) + 5000)
    return kconfig.config_text(req, TRACE_LOG, "gpulens-1-4242")


def decode_frame(data: bytes) -> stream.Message:
    """The one message of one stream frame (``FrameDecoder``), nothing left over."""
    dec = FrameDecoder()
    msgs = dec.feed(data)
    if len(msgs) != 1 or dec.buffered:
        raise AssertionError(f"expected one whole frame, got {len(msgs)} messages and {dec.buffered} bytes left")
    return msgs[0]


def decode_context_reply(data: bytes) -> int:
    """The count in a daemon ``ctxt`` reply (codec.decode_header and codec.CTXT_REPLY; libkineto reads it)."""
    kind, size = codec.decode_header(data)
    if kind != codec.TYPE_CTXT or size != codec.CTXT_REPLY.size:
        raise AssertionError(f"not a ctxt reply: type {kind!r}, {size} body bytes")
    (count,) = codec.CTXT_REPLY.unpack_from(data, codec.HEADER_BYTES)
    return int(count)


# -- the catalog ---------------------------------------------------------------------


Encoder = tuple[str, Callable[[], bytes]]


@dataclass(frozen=True)
class Golden:
    """One message: its file, what it is, its fixed value and how the product makes and reads it."""

    name: str
    """File stem under tests/data/frames (``<name>.hex``)."""
    family: str
    """:data:`GPULENS` or :data:`KINETO`: which digest (and which version) governs it."""
    what: str
    """The message and its direction, for the file's header."""
    message: Any
    """The fixed message: what the decoder must make of the golden bytes."""
    encoders: tuple[Encoder, ...]
    """(description, function): each must make exactly the golden bytes; the first writes the file."""
    decoder: tuple[str, Callable[[bytes], Any]] | None
    """(description, function) that reads the bytes back; None where the product has no reader."""

    def encode(self) -> bytes:
        """The bytes the first encoder makes: what the golden file holds."""
        return self.encoders[0][1]()


def _msg(name: str, what: str, msg: stream.Message, *more: Encoder) -> Golden:
    """A stream frame made by ``stream.encode`` (and any other product encoder of the same bytes)."""
    return Golden(name, GPULENS, what, msg, (("ipc.stream.encode", lambda: stream.encode(msg)), *more),
                  ("ipc.stream_decode.FrameDecoder", decode_frame))


def _built(name: str, what: str, msg: stream.Message, made_by: str, frame: Callable[[], bytes]) -> Golden:
    """A stream frame that the agent makes without ``stream.encode`` (pre-packed samples)."""
    return Golden(name, GPULENS, what, msg, ((made_by, frame),), ("ipc.stream_decode.FrameDecoder", decode_frame))


def _catalog() -> tuple[Golden, ...]:
    hist_frames, hist_result = _history_reply()
    trace_id = "gpulens-1-4242"
    agent_caps = ("history", "profile", "trace", "trace_status", "trace_diagnose", "trace_processes")
    diag = f"process {PID + 1} does not poll: start it with KINETO_USE_DAEMON=1"
    entries = [
        # handshake
        _msg("stream-challenge", "challenge, agent -> viewer (only with --token-file)",
             stream.Challenge(proto=stream.PROTOCOL_VERSION, nonce=SERVER_NONCE)),
        _msg("stream-auth", "auth, viewer -> agent: cnonce C, mac = auth.viewer_proof(token, S, C)",
             stream.AuthResponse(cnonce=CLIENT_NONCE, mac=auth.viewer_proof(TOKEN, SERVER_NONCE, CLIENT_NONCE))),
        _msg("stream-auth_ok", "auth_ok, agent -> viewer: mac = auth.agent_proof(token, S, C)",
             stream.AuthOk(mac=auth.agent_proof(TOKEN, SERVER_NONCE, CLIENT_NONCE))),
        _msg("stream-hello-agent", "hello, agent -> viewer (host, caps, version, interval)",
             stream.Hello(proto=stream.PROTOCOL_VERSION, role="agent", host="node-a", caps=agent_caps,
                          version="1.2.3", interval_s=1.0)),
        _msg("stream-hello-viewer", "hello, viewer -> agent (since: the newest sample it has)",
             stream.Hello(proto=stream.PROTOCOL_VERSION, role="viewer", since=T0 - 1.0)),
        # samples
        _msg("stream-sample", "sample, agent -> viewer (a GPU, a process, a job, a workload)",
             stream.SampleMsg(sample=SAMPLE),
             ("ipc.stream_frames.sample_frame(pack_sample(sample_to_dict))",
              lambda: sample_frame(pack_sample(sample_to_dict(SAMPLE))))),
        _built("stream-history-backfill", "history id 0, agent -> viewer: the backfill after a viewer's hello",
               stream.History(id=0, samples=(SAMPLE, LATER), last=True),
               "ipc.stream_frames.history_frames(0, packed samples)",
               lambda: _only(history_frames(0, [pack_sample(sample_to_dict(s)) for s in (SAMPLE, LATER)]))),
        # request kind: history
        _msg("stream-request-history", "request kind history, viewer -> agent",
             stream.Request(id=1, kind="history", params={"since": T0, "until": T0 + 60.0})),
        _built("stream-history-reply", "history id 1, agent -> viewer: the samples a history request asked for",
               stream.History(id=1, samples=(LATER,), last=True),
               "agent.request_kinds.history (ipc.stream_frames.history_frames)", lambda: _only(hist_frames)),
        _msg("stream-response-history", "response to history, agent -> viewer",
             stream.Response(id=1, ok=True, result=hist_result)),
        # request kind: profile
        _msg("stream-request-profile", "request kind profile, viewer -> agent",
             stream.Request(id=2, kind="profile", params={"pids": [PID], "duration_s": 5.0, "rate_hz": 100})),
        _msg("stream-chunk-profile", "chunk of the profile's folded stacks, agent -> viewer",
             stream.FileChunk(id=2, name=FOLDED_NAME, offset=0, data=FOLDED, last=True),
             ("agent.request_kinds.send_bytes", lambda: _only(_chunks(2, FOLDED_NAME, FOLDED)))),
        _msg("stream-response-profile", "response to profile, agent -> viewer",
             stream.Response(id=2, ok=True, result={"files": [FOLDED_NAME], "pids": [PID], "duration_s": 5.0})),
        # request kind: gpumem (issue 28; on the wire in version 1 before it had a golden frame)
        _msg("stream-request-gpumem", "request kind gpumem, viewer -> agent "
             "(params: ipc.request_schema.to_wire(GpuMemParams), as tui/gpumem_flame.py asks)",
             stream.Request(id=9, kind="gpumem", params=to_wire(GpuMemParams(pids=(PID,), mode="live",
                                                                             duration_s=5.0)))),
        _msg("stream-chunk-gpumem", "chunk of the gpumem answer's folded live bytes, agent -> viewer",
             stream.FileChunk(id=9, name=GPUMEM_NAME, offset=0, data=GPUMEM_FOLDED, last=True),
             ("agent.request_kinds.send_bytes", lambda: _only(_chunks(9, GPUMEM_NAME, GPUMEM_FOLDED)))),
        _msg("stream-response-gpumem", "response to gpumem, agent -> viewer "
             "(result: ipc.request_schema.answer_to_wire(GpuMemAnswer))",
             stream.Response(id=9, ok=True, result=answer_to_wire(GpuMemAnswer(
                 files=(GPUMEM_NAME,), pids=(PID,), mode="live", since=T0 - 600.0, lost=0,
                 python={str(PID): None})))),
        _msg("stream-request-trace", "request kind trace by pids and duration, viewer -> agent "
             "(params: sources.tracing.trace_struct(...).wire(), as sources/stream/requests.py sends it)",
             stream.Request(id=3, kind="trace", params=trace_struct(TRACE, TAG).wire())),
        _msg("stream-request-trace-job", "request kind trace by job key, iterations, viewer -> agent "
             "(params: sources.tracing.trace_struct(...).wire(), as sources/stream/requests.py sends it)",
             stream.Request(id=4, kind="trace", params=trace_struct(JOB_TRACE, "job-tag-1", job_key="777").wire())),
        _msg("stream-chunk-trace", "chunk of a trace file, agent -> viewer",
             stream.FileChunk(id=3, name=TRACE_FILE, offset=0, data=TRACE_JSON, last=True),
             ("agent.request_kinds.send_bytes", lambda: _only(_chunks(3, TRACE_FILE, TRACE_JSON)))),
        _msg("stream-response-trace", "response to trace, agent -> viewer",
             stream.Response(id=3, ok=True, result={
                 "request_id": trace_id,
                 "files": {str(PID): TRACE_FILE},
                 "missing": {str(PID + 1): f"process {PID + 1} exited before it picked up the trace request"},
                 "notes": {str(PID): "Kineto traced 500 ms"},
                 "elapsed_s": 3.5,
             })),
        # request kind: trace_status
        _msg("stream-request-trace_status", "request kind trace_status, viewer -> agent",
             stream.Request(id=5, kind="trace_status", params={"tag": TAG})),
        _msg("stream-response-trace_status", "response to trace_status, agent -> viewer "
             "(result: agent.request_kinds.TraceProgress.status)",
             stream.Response(id=5, ok=True, result=_trace_status())),
        # request kind: trace_diagnose
        _msg("stream-request-trace_diagnose", "request kind trace_diagnose, viewer -> agent",
             stream.Request(id=6, kind="trace_diagnose", params={"pids": [PID, PID + 1]})),
        _msg("stream-response-trace_diagnose", "response to trace_diagnose, agent -> viewer",
             stream.Response(id=6, ok=True, result={"reasons": {str(PID): None, str(PID + 1): diag}})),
        # request kind: trace_processes
        _msg("stream-request-trace_processes", "request kind trace_processes, viewer -> agent",
             stream.Request(id=7, kind="trace_processes", params={})),
        _msg("stream-response-trace_processes", "response to trace_processes, agent -> viewer",
             stream.Response(id=7, ok=True, result={"processes": [{
                 "pid": PID, "ancestors": [4200, 1], "job_id": 777, "job_keys": ["777"], "rank": 0,
                 "interval_s": 1.0, "busy": False,
             }]})),
        # request kind: processes (added in version 1: an older agent answers "unsupported request kind")
        _msg("stream-request-processes", "request kind processes, viewer -> agent",
             stream.Request(id=8, kind="processes", params={"limit": 500})),
        _msg("stream-response-processes", "response to processes, agent -> viewer "
             "(rows: JobInfo as in samples; agent.process_kind)",
             stream.Response(id=8, ok=True, result={"processes": [to_dict(JOB)], "total": 312, "hidden": 0})),
        # request kind: endpoint_pass (control socket only)
        _msg("stream-request-endpoint_pass", "request kind endpoint_pass, asking agent -> endpoint owner "
             "(control socket)",
             stream.Request(id=1, kind=handover.KIND, params={"receiver": RECEIVER})),
        _msg("stream-response-endpoint_pass", "response to endpoint_pass, endpoint owner -> asking agent",
             stream.Response(id=1, ok=True, result={"released": True})),
        # failures
        _msg("stream-response-unsupported", "response ok=false (an unknown request kind), agent -> viewer",
             stream.Response(id=8, ok=False,
                             error="unsupported request kind 'x'; this agent serves: " + ", ".join(agent_caps))),
        _msg("stream-error-version", "error code=version (check_version's message), agent -> viewer, then close",
             stream.ErrorMsg(code="version", message=_version_error())),
        # control socket: its name and the descriptor pass
        Golden("control-socket-name", GPULENS,
               "the control socket's abstract address for uid 1000 and the abstract Kineto name",
               control_name("", uid=1000), (("ipc.control.control_name('', uid=1000)",
                                               lambda: control_name("", uid=1000)),), None),
        Golden("control-pass-tag", GPULENS,
               "the bytes that carry the Kineto socket in endpoint_pass (SCM_RIGHTS), owner -> receiver",
               handover.PASS_TAG, (("ipc.handover.PASS_TAG", lambda: handover.PASS_TAG),), None),
        # Kineto on-demand datagrams (libkineto <-> the endpoint)
        Golden("kineto-req-client", KINETO, "req, libkineto -> endpoint: a poll (config_type 3, pid and ancestors)",
               codec.ConfigRequest(config_type=3, job_id=777, pids=(PID, 4200, 1)),
               (("tests.fakes.kineto_client.encode_request (libkineto's side)",
                 lambda: kineto_client.encode_request(codec.ConfigRequest(config_type=3, job_id=777, pids=(PID, 4200, 1)))),),
               ("ipc.kineto.codec.decode", codec.decode)),
        Golden("kineto-req-reply-config", KINETO, "req reply, endpoint -> libkineto: a trace config "
               "(text: ipc.kineto.kconfig.config_text)",
               _config_text(), (("ipc.kineto.codec.encode_config_reply(kconfig.config_text(...))",
                                 lambda: codec.encode_config_reply(_config_text())),),
               ("tests.fakes.kineto_client.decode_config_reply (libkineto's side)", kineto_client.decode_config_reply)),
        Golden("kineto-req-reply-empty", KINETO, "req reply, endpoint -> libkineto: nothing to do",
               "", (("ipc.kineto.codec.encode_config_reply('')", lambda: codec.encode_config_reply("")),),
               ("tests.fakes.kineto_client.decode_config_reply (libkineto's side)", kineto_client.decode_config_reply)),
        Golden("kineto-ctxt-client", KINETO, "ctxt, libkineto -> endpoint: a registration at GPU init",
               codec.ContextRegistration(gpu=0, pid=PID, job_id=777),
               (("tests.fakes.kineto_client.encode_context (libkineto's side)",
                 lambda: kineto_client.encode_context(codec.ContextRegistration(gpu=0, pid=PID, job_id=777))),),
               ("ipc.kineto.codec.decode", codec.decode)),
        Golden("kineto-ctxt-reply", KINETO, "ctxt reply, endpoint -> libkineto: processes registered",
               2, (("ipc.kineto.codec.encode_context_reply(2)", lambda: codec.encode_context_reply(2)),),
               ("codec.decode_header + codec.CTXT_REPLY", decode_context_reply)),
        Golden("kineto-daemon-address", KINETO, "the endpoint's abstract address (trailing NUL included)",
               ABSTRACT_NAME, (("ipc.kineto.endpoint.ABSTRACT_NAME", lambda: ABSTRACT_NAME),), None),
    ]
    return tuple(entries)


CATALOG: tuple[Golden, ...] = _catalog()
BY_NAME: dict[str, Golden] = {g.name: g for g in CATALOG}


# -- the files -----------------------------------------------------------------------


def path_of(name: str) -> Path:
    """The golden file of entry ``name``."""
    return FRAMES / f"{name}.hex"


def render(entry: Golden, data: bytes) -> str:
    """The golden file's text: a comment header, then the bytes in hex, 32 a line."""
    family = (f"gpulens, stream protocol version {stream.PROTOCOL_VERSION}" if entry.family == GPULENS
              else "kineto, libkineto's datagram format")
    header = [
        f"golden frame {entry.name} ({family}): {len(data)} bytes",
        f"what: {entry.what}",
        f"made by: {entry.encoders[0][0]}",
        *(f"also made by: {desc}" for desc, _ in entry.encoders[1:]),
        f"read by: {entry.decoder[0] if entry.decoder else '(no reader in gpulens: checked one way)'}",
        f"fixed values: the entry {entry.name!r} of tests/unit/ipc/golden_frames.py",
    ]
    shown = repr(entry.message)
    if isinstance(entry.message, str) and entry.message:
        header += ["message (text):", *(f"  {line}" for line in entry.message.splitlines())]
    elif len(shown) <= 600:
        header += ["message (repr, cut every 96 characters):",
                   *(f"  {shown[i : i + 96]}" for i in range(0, len(shown), 96))]
    header.append("Written by tests/data/frames/regen.py; do not edit by hand (see README.md here).")
    lines = [f"# {h}" for h in header]
    lines += [data[i : i + 32].hex() for i in range(0, len(data), 32)]
    return "\n".join(lines) + "\n"


def parse(text: str) -> bytes:
    """The bytes of a golden file's text: every line that is not a ``#`` comment, as hex."""
    return bytes.fromhex("".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))


def read(name: str) -> bytes:
    """The bytes stored for entry ``name``."""
    return parse(path_of(name).read_text(encoding="ascii"))


def stored() -> dict[str, Path]:
    """Every golden file in tests/data/frames, by name."""
    return {p.stem: p for p in sorted(FRAMES.glob("*.hex"))}


def digest(frames: Mapping[str, bytes]) -> str:
    """sha256 over the frames by name (names and bytes; comments do not count)."""
    h = hashlib.sha256()
    for name in sorted(frames):
        data = frames[name]
        h.update(f"{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def family_digest(family: str, frames: Mapping[str, bytes]) -> str:
    """The digest over the frames of one family."""
    return digest({n: d for n, d in frames.items() if BY_NAME[n].family == family})


def main(argv: list[str] | None = None) -> int:
    """Rewrite every golden file from the catalog; print what changed and the digests to record."""
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    FRAMES.mkdir(parents=True, exist_ok=True)
    made = {g.name: g.encode() for g in CATALOG}
    old = {n: parse(p.read_text(encoding="ascii")) for n, p in stored().items()}
    changed = sorted(n for n in made.keys() | old.keys() if made.get(n) != old.get(n))
    if not check:
        for n in old.keys() - made.keys():
            path_of(n).unlink()
        for g in CATALOG:
            text = render(g, made[g.name])
            p = path_of(g.name)
            if not p.exists() or p.read_text(encoding="ascii") != text:
                p.write_text(text, encoding="ascii")
    for n in changed:
        print(f"{'differs' if check else 'changed'}: {n}")
    print(f"GOLDEN_DIGESTS[{stream.PROTOCOL_VERSION}] = {family_digest(GPULENS, made)!r}")
    print(f"KINETO_DIGEST = {family_digest(KINETO, made)!r}")
    if changed and not check:
        print("The wire format changed. For gpulens frames: bump PROTOCOL_VERSION in ipc/stream.py, add the "
              "digest above to GOLDEN_DIGESTS in tests/unit/ipc/test_golden_frames.py under the new version, "
              "and update docs/protocol.md. Kineto frames are libkineto's format: change them only to follow it.")
    return 1 if check and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
