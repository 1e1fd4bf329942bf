"""Ingest: one viewer fed by simulated agents (default 1,000 hosts x 8 GPUs at 1 Hz).

A separate simulator process (asyncio, one TCP port per host) speaks the real
agent protocol and sends one SIMULATED sample per host per second, spread
over the second. This process is the viewer: a real StreamSource (one link
thread per host: socket, framing, msgpack, validation) feeding the real
Store (store/store.py). Its CPU time over a measured window, divided by
wall time, is the viewer's CPU % of one core.

The viewer decodes each sample frame with the one sample decoder: msgspec
straight into the frozen HostSample dataclasses, then core.sanitize's
check_sample (ipc.stream_decode.FrameDecoder -> ipc.serialize.sample_from_msgpack).

Peer figures measured in the same run:
- the same pipeline without the store;
- a bare receive of the same bytes (one selector thread, no decoding);
- bytes per host-sample on the wire, msgpack frame vs JSON text;
- cost per sample: the decoder (decode + validate + check) vs merely parsing
  the frame to plain maps with msgpack or the JSON text with json.loads, and
  the plain-data door (serialize.sample_from_dict, msgspec.convert) that
  recordings and --json input use.

Each pipeline is measured ``--rounds`` times (default 3), in turns; printed:
the median and the min-max of the rounds.

Usage: python benchmarks/ingest.py [--hosts 1000] [--gpus 8] [--seconds 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import timeit
from typing import Any

import msgpack

from gpulens.collectors.synthetic import SyntheticSampler
from gpulens.ipc import stream
from gpulens.ipc.serialize import sample_from_dict, sample_to_dict
from gpulens.ipc.stream_decode import FrameDecoder
from gpulens.ipc.stream_frames import sample_frame


def _raise_nofile() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


# -- simulator (child process) ------------------------------------------------


async def _serve(hosts: int, gpus: int, port_file: str) -> None:
    samplers = [SyntheticSampler(hostname=f"node{i:04d}", gpus=gpus, interval_s=1.0) for i in range(hosts)]
    writers: dict[int, asyncio.StreamWriter] = {}

    def handler(i: int) -> Any:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            hello = stream.Hello(proto=1, role="agent", host=f"node{i:04d}", caps=("history",), interval_s=1.0)
            writer.write(stream.encode(hello))
            await reader.read(4096)  # the viewer's hello
            writers[i] = writer
            try:
                with contextlib.suppress(ConnectionError):  # the bare-receive peer closes with data unread
                    while await reader.read(4096):
                        pass
            finally:
                writers.pop(i, None)

        return handle

    servers = [await asyncio.start_server(handler(i), "127.0.0.1", 0) for i in range(hosts)]
    ports = [s.sockets[0].getsockname()[1] for s in servers]
    with open(port_file + ".tmp", "w") as f:
        f.write(",".join(map(str, ports)))
    os.replace(port_file + ".tmp", port_file)
    packer = msgpack.Packer(use_bin_type=True)
    tick = 0
    start = time.monotonic()
    while True:
        # One sample per host per second, spread over the second like independent agents.
        for i in range(hosts):
            target = start + tick + i / hosts
            delay = target - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            w = writers.get(i)
            if w is not None:
                w.write(sample_frame(packer.pack(sample_to_dict(samplers[i].sample()))))
        tick += 1


def simulate(hosts: int, gpus: int, port_file: str) -> None:
    _raise_nofile()
    asyncio.run(_serve(hosts, gpus, port_file))


# -- viewer (this process) ----------------------------------------------------


def measure_viewer(ports: list[str], seconds: float, use_store: bool = True) -> dict[str, float]:
    from gpulens.core.events import SampleEvent
    from gpulens.sources.stream.source import LinkOptions, StreamSource, tcp_target
    from gpulens.store.store import Store

    store = Store(resolution_s=1.0)
    lock = threading.Lock()
    counts = {"samples": 0}
    seen: set[str] = set()

    def emit(ev: Any) -> None:
        with lock:
            if use_store or not isinstance(ev, SampleEvent):
                store.apply(ev)
            if isinstance(ev, SampleEvent):
                seen.add(ev.sample.host)
                counts["samples"] += 1

    src = StreamSource([tcp_target(f"127.0.0.1:{p}") for p in ports], LinkOptions(connect_timeout_s=30))
    src.start(emit)
    deadline = time.monotonic() + 120
    while len(seen) < len(ports) and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # settle
    c0, t0, n0 = time.process_time(), time.monotonic(), counts["samples"]
    time.sleep(seconds)
    c1, t1, n1 = time.process_time(), time.monotonic(), counts["samples"]
    src.stop()
    return {
        "cpu_percent": 100.0 * (c1 - c0) / (t1 - t0),
        "samples_per_s": (n1 - n0) / (t1 - t0),
        "hosts": float(len(seen)),
    }


def measure_floor(ports: list[str], seconds: float) -> dict[str, float]:
    """CPU to merely receive the same bytes: one selector thread, no decoding."""
    import selectors
    import socket

    socks = []
    for p in ports:
        s = socket.create_connection(("127.0.0.1", int(p)), timeout=30)
        s.recv(65536)  # the agent's hello
        s.sendall(stream.encode(stream.Hello(proto=1, role="viewer")))
        s.setblocking(False)
        socks.append(s)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    got = [0]
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            for key, _ in sel.select(0.2):
                with contextlib.suppress(BlockingIOError):
                    got[0] += len(key.fileobj.recv(262144))  # type: ignore[union-attr]

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    time.sleep(3)
    c0, t0, b0 = time.process_time(), time.monotonic(), got[0]
    time.sleep(seconds)
    c1, t1, b1 = time.process_time(), time.monotonic(), got[0]
    stop.set()
    t.join()
    for s in socks:
        s.close()
    return {"cpu_percent": 100.0 * (c1 - c0) / (t1 - t0), "bytes_per_s": (b1 - b0) / (t1 - t0)}


def wire_figures(gpus: int) -> dict[str, float]:
    d = sample_to_dict(SyntheticSampler(hostname="node0001", gpus=gpus).sample())
    frame = sample_frame(msgpack.packb(d, use_bin_type=True))
    body = frame[stream.HEADER.size :]
    text = json.dumps({"t": "sample", "sample": d}, separators=(",", ":")).encode()
    n = 2000

    def best(fn: Any) -> float:
        return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6

    decoder = FrameDecoder()
    return {
        "msgpack_bytes": len(frame),
        "json_bytes": len(text),
        "decoder_us": best(lambda: decoder.feed(frame)),
        "msgpack_us": best(lambda: msgpack.unpackb(body, raw=False)),
        "json_us": best(lambda: json.loads(text)),
        "dict_door_us": best(lambda: sample_from_dict(d)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3, help="measurements of each pipeline, in turns (default 3)")
    ap.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        simulate(args.hosts, args.gpus, args.serve)
        return 0
    _raise_nofile()
    port_file = f"/tmp/gpulens-ingest-{os.getpid()}.ports"
    sim = subprocess.Popen([sys.executable, __file__, "--hosts", str(args.hosts), "--gpus", str(args.gpus), "--serve", port_file])
    try:
        while not os.path.exists(port_file):
            if sim.poll() is not None:
                raise SystemExit("simulator died")
            time.sleep(0.2)
        with open(port_file) as f:
            ports = f.read().split(",")
        wire = wire_figures(args.gpus)
        fasts, nostores, floors = [], [], []
        for _ in range(args.rounds):  # in turns, so load bursts hit all three
            fasts.append(measure_viewer(ports, args.seconds))
            nostores.append(measure_viewer(ports, args.seconds, use_store=False))
            floors.append(measure_floor(ports, args.seconds))
    finally:
        sim.terminate()
        sim.wait()
        if os.path.exists(port_file):
            os.unlink(port_file)
    fast, nostore, floor = ({k: statistics.median(r[k] for r in runs) for k in runs[0]}
                            for runs in (fasts, nostores, floors))

    def spread(runs: list[dict[str, float]]) -> str:
        return f"{min(r['cpu_percent'] for r in runs):.1f}-{max(r['cpu_percent'] for r in runs):.1f}%"

    print(f"ingest: {args.hosts} hosts x {args.gpus} GPUs at 1 Hz, {os.cpu_count()} CPUs shared with other work; "
          f"{args.rounds} rounds of {args.seconds:g} s per pipeline, in turns: median (min-max)")
    print(f"viewer CPU, full pipeline (receive + decode + validate + store): {fast['cpu_percent']:.1f}% "
          f"({spread(fasts)}) of one core at {fast['samples_per_s']:.0f} samples/s from {fast['hosts']:.0f} hosts "
          f"({fast['cpu_percent'] / 10.0:.2f}x the 10% target)")
    print(f"  without the store: {nostore['cpu_percent']:.1f}% ({spread(nostores)})  -> store.apply share "
          f"{fast['cpu_percent'] - nostore['cpu_percent']:.1f}%")
    print(f"  peer, bare receive of the same bytes (one selector thread, no decoding): {floor['cpu_percent']:.1f}% "
          f"({spread(floors)}) at {floor['bytes_per_s'] / 1e6:.1f} MB/s  -> decode + validate + link threads "
          f"{nostore['cpu_percent'] - floor['cpu_percent']:.1f}%")
    print(f"wire bytes per host-sample: msgpack {wire['msgpack_bytes']:.0f}, JSON {wire['json_bytes']:.0f}  "
          f"(msgpack/JSON = {wire['msgpack_bytes'] / wire['json_bytes']:.2f})")
    print(f"per sample frame (best of 5): the decoder (msgspec typed + check_sample) {wire['decoder_us']:.1f} us; "
          f"peers, parse only: msgpack.unpackb {wire['msgpack_us']:.1f} us, json.loads {wire['json_us']:.1f} us; "
          f"plain-data door sample_from_dict {wire['dict_door_us']:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
