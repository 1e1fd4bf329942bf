"""Issue 29: a process's container, pod and Slurm job from the text the kernel gives (``core.workload``).

The path shapes are the runtimes' own, as ``/proc/PID/cgroup`` shows them
(kubelet's systemd and cgroupfs drivers, containerd's CRI plugin, CRI-O,
Docker, Podman, slurmstepd under cgroup v1 and v2); see
tests/integration/test_workload_cgroups.py for the same shapes made real.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpulens.core.model import Workload
from gpulens.core.workload import (
    describe,
    from_cgroup,
    from_environ,
    ns_pid,
    pod_log_dirs,
    with_pod_names,
    workload_key,
    workload_of,
)

UID = "1c3e5f2a-1234-4bcd-9ef0-0123456789ab"
UID_ = UID.replace("-", "_")
CID = "0f" * 32


def test_containerd_under_the_systemd_driver_v2() -> None:
    w = from_cgroup(f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice/"
                    f"cri-containerd-{CID}.scope\n".encode())
    assert (w.runtime, w.container_id, w.pod_uid, w.qos, w.found_by) == ("containerd", CID, UID, "burstable", "cgroup")


def test_guaranteed_pods_have_no_qos_slice_and_crio_names_itself() -> None:
    w = from_cgroup(f"0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope\n".encode())
    assert (w.runtime, w.pod_uid, w.qos) == ("cri-o", UID, "guaranteed")


def test_cgroup_v1_cgroupfs_driver() -> None:
    text = (f"12:pids:/kubepods/besteffort/pod{UID}/{CID}\n"
            f"11:memory:/kubepods/besteffort/pod{UID}/{CID}\n1:name=systemd:/kubepods/besteffort/pod{UID}/{CID}\n")
    w = from_cgroup(text.encode())
    assert (w.runtime, w.container_id, w.pod_uid, w.qos) == ("cri", CID, UID, "besteffort")


def test_docker_and_podman_outside_kubernetes() -> None:
    assert from_cgroup(f"0::/system.slice/docker-{CID}.scope\n".encode()).runtime == "docker"
    v1 = from_cgroup(f"4:memory:/docker/{CID}\n".encode())
    assert (v1.runtime, v1.container_id, v1.pod_uid) == ("docker", CID, None)
    podman = from_cgroup(f"0::/machine.slice/libpod-{CID}.scope/container\n".encode())
    assert (podman.runtime, podman.container_id) == ("podman", CID)


def test_slurm_v1_and_v2() -> None:
    v1 = from_cgroup(b"7:freezer:/slurm/uid_1000/job_4242/step_0/task_1\n")
    assert (v1.slurm_job, v1.slurm_step, v1.slurm_task) == ("4242", "0", "1")
    v2 = from_cgroup(b"0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n")
    assert (v2.slurm_job, v2.slurm_step, v2.slurm_task) == ("77", "batch", "0")
    # Debian's slurmd (multiple-slurmd build) roots v1 at /slurm_<node>; the freezer line stops at the step.
    debian = from_cgroup(b"6:freezer:/slurm_gpulens29475/uid_0/job_1/step_0\n"
                         b"5:devices:/slurm_gpulens29475/uid_0/job_1/step_0/task_0\n")
    assert (debian.slurm_job, debian.slurm_step, debian.slurm_task) == ("1", "0", "0")
    v2node = from_cgroup(b"0::/system.slice/node7_slurmstepd.scope/job_5/step_batch/user/task_0\n")
    assert (v2node.slurm_job, v2node.slurm_step, v2node.slurm_task) == ("5", "batch", "0")
    extern = from_cgroup(b"0::/system.slice/slurmstepd.scope/job_77/step_extern/slurm\n")
    assert (extern.slurm_job, extern.slurm_step, extern.slurm_task) == ("77", "extern", None)
    assert workload_key(v1) == "SLURM_JOB_ID=4242"


def test_the_unified_line_wins_and_plain_hosts_say_nothing() -> None:
    text = f"4:memory:/docker/{CID}\n0::/system.slice/docker-{'ab' * 32}.scope\n".encode()
    assert from_cgroup(text).container_id == "ab" * 32
    assert from_cgroup(b"0::/user.slice/user-1000.slice/session-3.scope\n") == Workload()
    assert from_cgroup(b"0::/\n") == Workload()
    # "pod…" outside kubepods is not a pod (a user's own cgroup named like one).
    assert from_cgroup(f"0::/user.slice/pod{UID}\n".encode()).pod_uid is None


def test_malformed_and_huge_input_is_skipped_not_fatal() -> None:
    assert from_cgroup(b"garbage\n::\n1:cpu\n9:x:relative/path\n\xff\xfe:\x00:/\n") == Workload()
    huge = b"0::/" + b"a/" * 100_000 + f"docker-{CID}.scope\n".encode()
    assert from_cgroup(huge) == Workload()  # past the bound: not read, not an error
    assert from_cgroup(b"0::/kubepods/pod" + b"1" * 36 + b"/x\n").pod_uid is None  # no UID shape


@given(st.binary(max_size=4096))
def test_any_bytes_give_a_workload(data: bytes) -> None:
    w = workload_of(data, data, data)
    assert isinstance(w, Workload)
    assert describe(w)


def test_environ_and_namespaced_pid() -> None:
    env = b"PATH=/bin\0SLURM_JOB_ID=4242\0SLURM_STEP_ID=3\0SLURM_LOCALID=1\0SLURM_JOB_GPUS=0,2\0CUDA_VISIBLE_DEVICES=0,1\0"
    w = from_environ(env)
    assert (w.slurm_job, w.slurm_step, w.slurm_task, w.slurm_gpus, w.visible_gpus, w.found_by) == (
        "4242", "3", "1", "0,2", "0,1", "environ")
    hostile = from_environ(b"SLURM_JOB_ID=\x1b]52;c;cm0K\x07\0CUDA_VISIBLE_DEVICES=" + b"9" * 5000 + b"\0")
    assert hostile == Workload()  # an escape sequence or 5 kB is no Slurm id: dropped
    assert ns_pid(b"Name:\tpython\nNSpid:\t4711\t1\n") == 1
    assert ns_pid(b"NSpid:\t4711\n") is None  # the host's own namespace
    assert ns_pid(b"NSpid:\t4711\tx\n") is None


def test_cgroup_first_then_environment() -> None:
    cg = b"0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_2\n"
    env = b"SLURM_JOB_ID=1\0SLURM_STEP_ID=5\0SLURM_JOB_GPUS=3\0"
    w = workload_of(cg, b"NSpid:\t10\t2\n", env)
    assert (w.slurm_job, w.slurm_step, w.slurm_task, w.slurm_gpus, w.ns_pid) == ("9", "0", "2", "3", 2)
    only_env = workload_of(b"0::/user.slice\n", b"", env)
    assert (only_env.slurm_job, only_env.slurm_step, only_env.found_by) == ("1", "5", "environ")


def test_pod_names_from_log_directories_and_keys() -> None:
    pods = pod_log_dirs([f"llm-serving_vllm-0_{UID}", "kube-system_coredns-7db6d8ff4d-x2k9p_not-a-uid",
                         f"bad\x1b]0;x_pod_{UID}", "README"])
    assert pods == {UID: ("llm-serving", "vllm-0")}
    w = with_pod_names(Workload(pod_uid=UID, runtime="containerd", container_id=CID), pods)
    assert describe(w) == "pod llm-serving/vllm-0"
    assert describe(Workload(pod_uid=UID)) == "pod uid 1c3e5f2a…"
    assert describe(Workload(slurm_job="4242", slurm_step="0", slurm_task="1", ns_pid=1)) == (
        "slurm 4242.0 task 1, pid 1 inside")
    assert describe(Workload(runtime="docker", container_id=CID), short=True) == "docker 0f0f0f0f0f0f"
    assert describe(w, short=True) == "pod vllm-0"
    assert workload_key(w) == f"pod={UID}" and workload_key(None) is None and workload_key(Workload()) is None
