"""The demo (SIMULATED) fills every GPU field the screens show, with an energy counter that only grows."""

from __future__ import annotations

from gpulens.sources.demo import DemoSource

T0 = 1_700_000_000.0


def test_demo_energy_is_a_counter_and_tensor_activity_stays_under_sm_activity() -> None:
    demo = DemoSource(seed=1, clock=lambda: T0, live=False)
    for h in range(16):
        prev = None
        for k in range(60):
            s = demo.sample(h, T0 + k)
            assert s.simulated
            for g in s.gpus:
                if g.utilization_percent is None:  # the lost GPU: every field n/a with its reason
                    assert "utilization_percent" in g.unavailable
                    continue
                assert g.energy_joules is not None and g.tensor_active_percent is not None
                assert g.tensor_active_percent <= (g.sm_activity_percent or 0.0)
                assert g.nvlink_total_bytes_per_s is not None and g.nvlink_total_bytes_per_s >= 0
            energies = [g.energy_joules for g in s.gpus if g.energy_joules is not None]
            if prev is not None:
                assert all(e >= p for e, p in zip(energies, prev, strict=True))
            prev = energies
        # The rate the GPU screen shows (J per s between samples) is a plausible draw for an H100.
        first = demo.sample(h, T0).gpus[0].energy_joules
        last = demo.sample(h, T0 + 59).gpus[0].energy_joules
        assert first is not None and last is not None and 50 <= (last - first) / 59 <= 700


def test_each_gpus_energy_counter_grows_by_its_mean_power_draw() -> None:
    """Over a few of the roles' cycles, the counter's J/s matches the sampled power (SIMULATED, but consistent)."""
    demo = DemoSource(seed=3, clock=lambda: T0, live=False)
    span = 900  # 20 cycles of the longest role (45 s)
    for h in range(16):
        first, last = demo.sample(h, T0), demo.sample(h, T0 + span)
        for k, g in enumerate(first.gpus):
            if g.power_w is None:
                continue
            powers = [p for t in range(0, span, 3) if (p := demo.sample(h, T0 + t).gpus[k].power_w) is not None]
            j0, j1 = g.energy_joules, last.gpus[k].energy_joules
            assert j0 is not None and j1 is not None
            mean_power = sum(powers) / len(powers)
            assert abs((j1 - j0) / span - mean_power) < 0.1 * mean_power, (h, k)


def test_the_energy_counter_follows_the_power_through_a_dip_not_only_on_average() -> None:
    """Over 4 s the counter's J/s is the power drawn then (the noise's mean), in a dip as out of one
    (the roles whose noise four samples average well: llama's 3 % and the LoRA's 8 %)."""
    demo = DemoSource(seed=5, clock=lambda: T0, live=False)
    checked = 0
    rates: list[float] = []
    for h in (0, 3, 4, 5):
        for t in range(0, 120, 4):
            a, b = demo.sample(h, T0 + t), demo.sample(h, T0 + t + 4)
            g0, g1 = a.gpus[0], b.gpus[0]
            assert g0.energy_joules is not None and g1.energy_joules is not None
            powers = [demo.sample(h, T0 + t + s).gpus[0].power_w for s in (0.5, 1.5, 2.5, 3.5)]
            drawn = sum(p for p in powers if p is not None) / 4
            rate = (g1.energy_joules - g0.energy_joules) / 4
            assert abs(rate - drawn) < 0.2 * drawn + 20, (h, t, rate, drawn)
            checked += 1
            if h == 0:
                rates.append(rate)
    assert checked == 120
    assert min(rates) < 0.5 * max(rates)  # the checkpoint dips show in the counter, as in the power
