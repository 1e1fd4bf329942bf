"""The GPU screen's link fields on an AMD GPU: XGMI, not NVLink, and n/a with the collector's reason."""

from __future__ import annotations

from gpulens.core.model import GpuSample, HostSample
from gpulens.tui.screens.gpu import extra_fields, link_name
from tests.fakes.tui_fakes import sync


def test_amd_link_is_xgmi_with_its_reason() -> None:
    why = "XGMI (AMD's GPU link) is counted only in gpu_metrics v1.4+"
    g = GpuSample(0, "AMD Instinct MI210", "AMD-1", vendor="amd",
                  unavailable={"nvlink_rx_bytes_per_s": why, "tensor_active_percent": "not on AMD GPUs"})
    assert link_name(g) == "XGMI"
    fields = dict(extra_fields(g, None, "needs two samples"))
    assert why in fields["XGMI total"] and "not on AMD GPUs" in fields["tensor"]
    busy = GpuSample(0, "AMD Instinct MI300X", "AMD-2", vendor="amd", nvlink_rx_bytes_per_s=2e9,
                     nvlink_tx_bytes_per_s=1e9)
    assert dict(extra_fields(busy, None, ""))["XGMI total"].startswith("3.")


def test_nvidia_keeps_nvlink() -> None:
    assert link_name(GpuSample(0, "H100", "GPU-1")) == "NVLink"
    assert "NVLink total" in dict(extra_fields(GpuSample(0, "H100", "GPU-1"), None, ""))


@sync
async def test_the_gpu_screen_names_an_amd_gpu_and_its_link() -> None:
    from dataclasses import replace

    from textual.app import App

    from gpulens.core.events import SampleEvent
    from gpulens.tui.screens.gpu import GpuScreen
    from tests.fakes.tui_fakes import FakeContext, StaticSource
    from tests.unit.store.test_store import T0, sample

    def amd(t: float) -> HostSample:
        s = sample(t, host="mi300-node")
        g = replace(s.gpus[0], index=2, name="AMD Instinct MI300X", uuid="AMD-d1a3f5c7e9b01234", vendor="amd",
                    unavailable={"sm_activity_percent": "not on AMD GPUs (no equivalent counter)"})
        return replace(s, gpus=(g,))

    events = [SampleEvent(amd(T0 + i)) for i in range(10)]
    ctx = FakeContext(StaticSource(events), events)
    app: App[None] = App()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = GpuScreen("mi300-node", 2, context=ctx)
        app.push_screen(screen)
        await pilot.pause()
        text = str(screen.query_one("#gpu-info").render())
    assert "vendor AMD" in text and "XGMI rx/tx" in text and "NVLink" not in text
    assert "not on AMD GPUs (no equivalent counter)" in text
