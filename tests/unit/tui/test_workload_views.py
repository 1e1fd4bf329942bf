"""Issue 29 in the TUI: ``:pods``, ``:ns NAME``, ``:slurm [JOBID]``, the Runs-in columns, the filter, the GPU's holder.

The demo's keyed jobs run as Slurm jobs and erin's servers in pods
(``sources._demo_sim.demo_workload``), so every view has rows to show.
"""

from __future__ import annotations

from gpulens.tui.screens.gpu import GpuScreen
from gpulens.tui.screens.jump import parse_jump
from gpulens.tui.screens.views import PodsView, SlurmView
from gpulens.tui.widgets.host_table import HostTable
from gpulens.tui.widgets.job_table import JobTable
from tests.fakes.tui_fakes import demo_app, settle, sync


def test_the_commands_parse() -> None:
    assert parse_jump(":pods") == ("pods", "")
    assert parse_jump("slurm") == ("slurm", "")
    assert parse_jump("slurm 4711") == ("slurm", "4711")
    assert parse_jump("ns llm-serving") == ("ns", "llm-serving")
    assert parse_jump("ns") == "':ns' needs an argument, e.g. ':ns NAMESPACE'"
    assert parse_jump("pods x") == "':pods' takes no argument"


@sync
async def test_pods_namespaces_and_slurm_jobs_each_have_their_view() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        jobs = app.store.jobs(app.window_s)
        in_pods = {j.key for j in jobs if j.workload is not None and j.workload.pod_uid is not None}
        in_slurm = {j.key for j in jobs if j.workload is not None and j.workload.slurm_job is not None}
        assert in_pods and in_slurm and not in_pods & in_slurm
        app.jump("pods")
        await settle(app, pilot)
        assert isinstance(app.screen, PodsView)
        table = app.screen.query_one(JobTable)
        assert set(table.order) == in_pods
        assert all(table._cells[k][1].startswith("pod vllm-") for k in table.order)
        assert set(app.screen.query_one(HostTable).order) == {h for j in jobs if j.key in in_pods for h in j.hosts}
        app.jump("ns llm-serving")
        await settle(app, pilot)
        assert isinstance(app.screen, PodsView) and set(app.screen.query_one(JobTable).order) == in_pods
        app.jump("ns kube-system")
        await settle(app, pilot)
        table = app.screen.query_one(JobTable)
        assert table.order == [] and "no job runs in namespace kube-system" in table.placeholder
        app.jump("slurm")
        await settle(app, pilot)
        assert isinstance(app.screen, SlurmView) and set(app.screen.query_one(JobTable).order) == in_slurm
        app.jump("slurm 4711")
        await settle(app, pilot)
        table = app.screen.query_one(JobTable)
        assert table.order == ["4711"] and table._cells["4711"][1] == "slurm 4711"
        assert set(app.screen.query_one(HostTable).order) == {"gpu-node01", "gpu-node02", "gpu-node03", "gpu-node04"}


@sync
async def test_the_filter_matches_where_a_job_runs_and_the_gpu_names_its_pod() -> None:
    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        app.jump("jobs")
        await settle(app, pilot)
        await pilot.press("slash", *"vllm-1", "enter")
        await settle(app, pilot)
        table = app.screen.query_one(JobTable)
        assert table.order and all("vllm-1" in table._cells[k][1] for k in table.order)
        host = next(h for j in app.store.jobs(app.window_s) if j.key in table.order for h in j.hosts)
        sample = app.store.latest(host)
        assert sample is not None
        gpu = next(j for j in sample.jobs if j.workload is not None).gpu_mem_bytes
        app.push_screen(GpuScreen(host, int(next(iter(gpu))), context=app))
        await settle(app, pilot)
        info = str(app.screen.query_one("#gpu-info").render())
        assert "held by pod llm-serving/vllm-1 container vllm" in info


@sync
async def test_the_heatmap_row_names_who_holds_the_gpu() -> None:
    from gpulens.tui.widgets.heat_holder import holders
    from gpulens.tui.widgets.heatmap import GpuHeatmap

    app = demo_app(backfill_s=60)
    async with app.run_test(size=(160, 45)) as pilot:
        await settle(app, pilot)
        heat = app.screen.query_one(GpuHeatmap)
        held = {(host, gpu): name for host in app.store.hosts() for gpu, name in holders(app.store.latest(host)).items()}
        assert any(name.startswith("vllm-") for name in held.values())  # a pod's GPU
        assert any(name.startswith("slurm ") for name in held.values())  # a Slurm job's GPU
        assert heat.label_cells > 11  # the labels make room for it
        shown = 0
        for y, key in enumerate(heat.rows[: heat.size.height - 2], start=heat.header_lines):
            line = "".join(seg.text for seg in heat.render_line(y))[1: heat.label_cells]
            if key in held:
                name = held[key]
                assert (name if len(name) <= 10 else name[:9] + "…") in line, (key, line)
                shown += 1
            else:
                assert line[10:].strip() == "", (key, line)  # held by nothing known: blank, not invented
        assert shown > 0
