"""Issue 28: the agent's gpumem answer adds what NVML reports beyond what the probes saw, as one frame."""

from __future__ import annotations

from gpulens.agent.gpumem import BEFORE, before_attach, host_libraries

KV = ("<module> (serve.py:1)", "Runner > _allocate_kv_cache_tensors (runner.py:9)", "cuMemAlloc_v2")


def test_live_totals_add_up_to_what_the_gpu_reports() -> None:
    live: dict[tuple[str, ...], int] = {KV: 1000}
    used = {7: 1500, 8: 200, 9: None}
    got = before_attach(live, [7, 8, 9], {7: 1000, 8: 0}, used.get)
    assert got == {KV: 1000, (BEFORE,): 500 + 200}
    assert sum(got.values()) == 1500 + 200  # what NVML reports for the two processes it lists
    assert live == {KV: 1000}  # the caller's map is left as it was
    # NVML reporting less than the probes saw (a free not yet visible to NVML): nothing invented.
    assert before_attach(live, [7], {7: 1000}, {7: 900}.get) == {KV: 1000}


def test_the_cuda_libraries_ldconfig_lists() -> None:
    lines = [
        "1234 libs found in cache `/etc/ld.so.cache'",
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12",
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "\tlibcuda.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so",
        "\tlibcudnn.so.9 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudnn.so.9",
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1",
    ]
    assert host_libraries(lines) == ["/usr/local/cuda/lib64/libcudart.so.12", "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                     "/usr/lib/x86_64-linux-gnu/libcuda.so"]
