"""What a cluster on this machine takes from it: free loopback ports for its tasks, its cores, and its GPUs, one a
worker."""

import os
import socket
import subprocess

from parallel_tf import compat
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.training import modes
from parallel_tf.training.run_flags import MAX_INTRA_OP_THREADS


def local_cluster(mode, num_ps, num_workers, num_groups):
    """A spec on free loopback ports; in hierarchical mode worker i joins group i mod G, as in the seed."""
    num_ps, num_groups = modes.server_counts(mode, num_ps, num_groups)
    if num_groups > num_workers:
        raise ConfigError(f"--num_groups={num_groups} is more than --num_workers={num_workers}")
    free = free_loopback_addresses(num_ps + num_groups + num_workers)
    return cluster_lib.assign_jobs(free, num_ps, num_groups, "generated spec")


def share_cores(threads_flag, num_workers):
    """Gives --intra_op_threads (`threads_flag`, which every task gets) where the user gave none: the environment's,
    else the cores this process may run on shared by the workers, at least 1 (the parameter servers' updates are
    light). At 2 a task, two workers on 2 cores ran 4 threads: the CIFAR-10 CNN's all-reduce step took 1.1-1.3x as
    long as at 1 (BENCHMARKS.md, "Threads a task"). No portable bit depends on the count
    (tests/test_portable_bits.py)."""
    if threads_flag.present:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    shared = min(MAX_INTRA_OP_THREADS, max(1, cores // num_workers))
    threads_flag.parse(str(compat.intra_op_threads(None) if compat.threads_set_by_user() else shared))


def free_loopback_addresses(count):
    """`count` distinct free 127.0.0.1 ports, found by binding port 0 (all held until all are found)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [f"127.0.0.1:{s.getsockname()[1]}" for s in sockets]
    finally:
        for s in sockets:
            s.close()


def visible_gpus():
    """GPU ids the launcher may hand out: CUDA_VISIBLE_DEVICES if set, else what nvidia-smi lists."""
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(listing.stdout.splitlines()) if line.startswith("GPU ")]


def gpu_environments(cluster, gpus=None):
    """Per-task CUDA_VISIBLE_DEVICES: worker i gets GPU i mod G, a ps (central or local) none. {} without GPUs."""
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        return {}
    environments = {f"{job}:{i}": "" for job in cluster_lib.SERVER_JOBS for i in range(len(cluster.jobs.get(job, ())))}
    environments.update({f"worker:{i}": gpus[i % len(gpus)] for i in range(cluster.num_workers)})
    return environments
