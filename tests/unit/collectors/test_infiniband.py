"""InfiniBand collector on a fake /sys/class/infiniband tree."""

from __future__ import annotations

import time
from pathlib import Path

from gpulens.collectors.infiniband import (
    ABSENT_RECHECK_S,
    WORD_BYTES,
    InfinibandCollector,
    parse_state,
)


def _port(root: Path, dev: str, port: int, rcv: int, xmit: int, state: str = "4: ACTIVE") -> Path:
    p = root / dev / "ports" / str(port)
    (p / "counters").mkdir(parents=True, exist_ok=True)
    (p / "counters" / "port_rcv_data").write_text(f"{rcv}\n")
    (p / "counters" / "port_xmit_data").write_text(f"{xmit}\n")
    (p / "counters" / "symbol_error").write_text("3\n")
    (p / "counters" / "link_downed").write_text("1\n")
    (p / "state").write_text(state + "\n")
    (p / "rate").write_text("200 Gb/sec (4X HDR)\n")
    return p


def test_rates_count_four_byte_words(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, rcv=1000, xmit=500)
    t0 = time.monotonic()
    ib = InfinibandCollector(tmp_path)
    _port(tmp_path, "mlx5_0", 1, rcv=1000 + 250_000, xmit=500)
    time.sleep(0.1)
    reading = ib.read()
    elapsed = time.monotonic() - t0
    (port,) = reading.ports
    assert (port.device, port.port, port.state, port.rate) == ("mlx5_0", 1, "ACTIVE", "200 Gb/sec (4X HDR)")
    assert (port.symbol_errors, port.link_downed) == (3, 1)
    assert port.rx_bytes_per_s is not None
    # 250,000 words = 1,000,000 bytes over an interval between 0.1 s and elapsed.
    assert 250_000 * WORD_BYTES / elapsed <= port.rx_bytes_per_s <= 250_000 * WORD_BYTES / 0.1
    assert port.tx_bytes_per_s == 0.0
    assert reading.unavailable == {}


def test_absent_root_is_empty_with_reason(tmp_path: Path) -> None:
    reading = InfinibandCollector(tmp_path / "nope").read()
    assert reading.ports == ()
    assert "absent" in reading.unavailable["infiniband"]


def test_new_port_reset_and_garbage_give_none_with_reason(tmp_path: Path) -> None:
    _port(tmp_path, "mlx5_0", 1, rcv=1000, xmit=1000)
    ib = InfinibandCollector(tmp_path)
    _port(tmp_path, "mlx5_0", 1, rcv=10, xmit=2000)  # rcv went backwards
    _port(tmp_path, "mlx5_1", 1, rcv=5, xmit=5)  # appeared after priming
    reading = ib.read()
    a, b = reading.ports
    assert a.rx_bytes_per_s is None and a.tx_bytes_per_s is not None and a.tx_bytes_per_s > 0
    assert reading.unavailable["infiniband.mlx5_0/1.rx_bytes_per_s"] == "counter was reset"
    assert b.rx_bytes_per_s is None
    assert "appeared" in reading.unavailable["infiniband.mlx5_1/1.rx_bytes_per_s"]
    (tmp_path / "mlx5_1" / "ports" / "1" / "counters" / "port_rcv_data").write_text("\x00garbage\n")
    reading = ib.read()
    assert reading.ports[1].rx_bytes_per_s is None
    assert reading.unavailable["infiniband.mlx5_1/1.rx_bytes_per_s"] == "counter file unreadable"


def test_device_without_ports_and_empty_root(tmp_path: Path) -> None:
    (tmp_path / "mlx5_0").mkdir()
    reading = InfinibandCollector(tmp_path).read()
    assert reading.ports == () and "no ports" in reading.unavailable["infiniband"]


def test_parse_state() -> None:
    assert parse_state("4: ACTIVE") == "ACTIVE"
    assert parse_state("1: DOWN\n") == "DOWN"
    assert parse_state("odd") == "odd"
    assert parse_state(None) == ""


def test_an_absent_root_is_looked_for_again_only_every_few_seconds(tmp_path: Path) -> None:
    now = [100.0]
    root = tmp_path / "infiniband"
    ib = InfinibandCollector(root, clock=lambda: now[0])
    assert "absent" in ib.read().unavailable["infiniband"]
    _port(root, "mlx5_0", 1, rcv=10, xmit=20)
    now[0] += ABSENT_RECHECK_S / 2
    assert "absent" in ib.read().unavailable["infiniband"]  # not looked for yet
    now[0] += ABSENT_RECHECK_S / 2
    ports = ib.read().ports
    assert [(p.device, p.port) for p in ports] == [("mlx5_0", 1)]
    assert ports[0].rx_bytes_per_s is None  # appeared this interval: a rate from the next read
