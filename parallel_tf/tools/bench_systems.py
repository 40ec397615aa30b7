"""What the bench runs (bench.py): its models, and its systems, each the one process (the limit), one of our
modes on a local cluster, TensorFlow's strategy of a kind (its peer), or the parameter-server floor."""

from __future__ import annotations

import dataclasses

from parallel_tf import compat
from parallel_tf.tools.network_model import PIPELINE_PIECES


@dataclasses.dataclass(frozen=True)
class Model:
    title: str
    recipe: str
    flags: tuple
    train_steps: int
    quick_steps: int


@dataclasses.dataclass(frozen=True)
class System:
    title: str
    kind: str  # "limit", "sync", "async" or "floor": whom it is compared with
    mode: str | None = None  # ours: the launcher's --mode; None for the one process and the peers
    flags: tuple = ()
    strategy: str | None = None  # a peer's tf_strategies --strategy
    min_workers: int = 1
    steps_per_run: int | None = None  # ours: --steps_per_run (None: the default, automatic); the logging
    # interval is rounded up to a multiple of it
    ps_per_worker: bool = False  # ours: --num_ps=N, a parameter server for each of the N workers
    warm: bool = False  # ours: the tasks forked by a warm server, which loaded TensorFlow once for every run of it
    environment: tuple = ()  # ours: (variable, value) pairs its tasks get


def _and_a_run_a_step(name, system):
    """{`name`: `system`, `name`_step: the same at one step a session run}: the row its loop of steps (the default
    --steps_per_run) is measured against, next to it. Twins that run apart in the full run's order (sync_step,
    allreduce_step, process_step with its own title) are written out where they run."""
    a_run_a_step = dataclasses.replace(system, title=f"{system.title}, a run a step", steps_per_run=1)
    return {name: system, f"{name}_step": a_run_a_step}


# The portable kernel a CPU with AVX-512F runs by default is twice as wide as the AVX2 one, with the same bits
# (graph/portable_kernel.py): these rows measure what the width buys.
AVX2_KERNEL = ((compat.PORTABLE_KERNEL, "avx2"),)
MODELS = {
    "mlp": Model("digits MLP 64-128-10 (recipes/mnist.py), latency-bound", "mnist", (), 500, 300),
    "cnn": Model(
        "CIFAR-10 CNN on synthetic data (recipes/cifar10.py), compute-bound",
        "cifar10",
        ("--dataset=synthetic",),
        40,
        20,
    ),
}
SYSTEMS = {
    "process": System("one process (the limit)", "limit"),
    "process_step": System("one process, a run a step", "limit", steps_per_run=1),
    "process_fast": System("one process, --kernels=fast", "limit", flags=("--kernels=fast",)),
    "process_avx2": System("one process, the AVX2 kernel", "limit", environment=AVX2_KERNEL),
    "floor": System("parameter-server floor", "floor", strategy="floor"),
    "sync": System("sync, ordered", "sync", mode="sync"),
    "sync_servers": System("sync, a ps per worker", "sync", mode="sync", ps_per_worker=True, min_workers=2),
    "sync_servers_pipelined": System(
        "sync, a ps per worker, pipelined",
        "sync",
        mode="sync",
        flags=(f"--pipeline_pieces={PIPELINE_PIECES}",),
        ps_per_worker=True,
        min_workers=2,
    ),
    "sync_pipelined": System(
        "sync, ordered, pipelined", "sync", mode="sync", flags=(f"--pipeline_pieces={PIPELINE_PIECES}",)
    ),
    "sync_fast": System("sync, ordered, --kernels=fast", "sync", mode="sync", flags=("--kernels=fast",)),
    "strict": System("sync, strict", "sync", mode="sync", flags=("--strict_determinism",)),
    "accumulator": System("sync, accumulator", "sync", mode="sync", flags=("--aggregation=accumulator",)),
    "sync_step": System("sync, ordered, a run a step", "sync", mode="sync", steps_per_run=1),
    **_and_a_run_a_step(
        "sync_8bit",
        System("sync, ordered, 8-bit gradients", "sync", mode="sync", flags=("--gradient_compression=8bit",)),
    ),
    "allreduce": System("all-reduce", "sync", mode="allreduce"),
    "allreduce_fast": System("all-reduce, --kernels=fast", "sync", mode="allreduce", flags=("--kernels=fast",)),
    "allreduce_avx2": System("all-reduce, the AVX2 kernel", "sync", mode="allreduce", environment=AVX2_KERNEL),
    "allreduce_step": System("all-reduce, a run a step", "sync", mode="allreduce", steps_per_run=1),
    "allreduce_strict": System("all-reduce, strict", "sync", mode="allreduce", flags=("--strict_determinism",)),
    "allreduce_fp16": System(
        "all-reduce, float16 transport", "sync", mode="allreduce", flags=("--allreduce_transport=float16",)
    ),
    **_and_a_run_a_step(
        "allreduce_powersgd1",
        System("all-reduce, PowerSGD rank 1", "sync", mode="allreduce", flags=("--powersgd_rank=1",)),
    ),
    "allreduce_powersgd4": System(
        "all-reduce, PowerSGD rank 4", "sync", mode="allreduce", flags=("--powersgd_rank=4",)
    ),
    "allreduce_8bit": System(
        "all-reduce, 8-bit codes gathered", "sync", mode="allreduce", flags=("--gradient_compression=8bit",)
    ),
    "allreduce_buckets": System(
        "all-reduce, 1 MB buckets", "sync", mode="allreduce", flags=("--allreduce_bucket_mb=1",)
    ),
    "sync_unforked": System("sync, ordered, a process a task", "sync", mode="sync", flags=("--fork_tasks=false",)),
    "sync_warm": System("sync, ordered, forked by a warm server", "sync", mode="sync", warm=True),
    **_and_a_run_a_step("async", System("async", "async", mode="async")),
    **_and_a_run_a_step(
        "async_staleness_aware",
        System("async, staleness-aware", "async", mode="async", flags=("--staleness_aware",)),
    ),
    **_and_a_run_a_step(
        "async_ssp",
        System("async, SSP (s = 1)", "async", mode="async", flags=("--max_staleness=1",), min_workers=2),
    ),
    "hierarchical": System("hierarchical, 2 groups", "async", mode="hierarchical", min_workers=2),
    "mirrored": System("MultiWorkerMirroredStrategy (TensorFlow's defaults)", "sync", strategy="mirrored"),
    "mirrored_ours": System(
        "MultiWorkerMirroredStrategy, our kernels", "sync", strategy="mirrored", flags=("--noat_defaults",)
    ),
    "parameter_server": System(
        "ParameterServerStrategy (TensorFlow's defaults)", "async", strategy="parameter_server", min_workers=2
    ),
}
# The ways of talking less, which pay only on a link: the full run (BENCHMARKS.md's main tables) leaves them to
# --links.
ON_LINKS = (
    "sync_servers",
    "sync_servers_pipelined",
    "sync_8bit",
    "allreduce_fp16",
    "allreduce_8bit",
    "allreduce_buckets",
    "allreduce_powersgd1",
    "allreduce_powersgd4",
)
# The rows of BENCHMARKS.md's "Techniques in the loop" the full run has no use for (a technique at the default
# steps a run, and at one a run): run with --systems, beside the default-k rows the full run has.
TECHNIQUES_IN_THE_LOOP = (
    "sync_8bit_step",
    "allreduce_powersgd1_step",
    "async_staleness_aware",
    "async_staleness_aware_step",
    "async_ssp",
    "async_ssp_step",
)
# The rows of BENCHMARKS.md's "Starting the tasks" beside the default sync's: each task a process that loads
# TensorFlow itself (launch/forkserver.py), and the tasks forked by a warm server that loaded it before the run
# (launch/warm_server.py), which change the whole run's time (run s), not a step's.
STARTS = ("sync_unforked", "sync_warm")
# The rows of BENCHMARKS.md's "Kernels" that run the AVX2 kernel where the CPU has a wider one.
KERNEL_WIDTHS = ("process_avx2", "allreduce_avx2")
# the pipeline on one server without a link: the measurement behind its default (BENCHMARKS.md, issue 78)
PIPELINE_DEFAULT = ("sync_pipelined",)
APART = ON_LINKS + TECHNIQUES_IN_THE_LOOP + STARTS + KERNEL_WIDTHS + PIPELINE_DEFAULT
FULL_RUN = tuple(name for name in SYSTEMS if name not in APART)

# The peers run at TensorFlow's defaults (tf_strategies.py): what a user who picks TensorFlow's strategy gets. The
# one process is compared with MultiWorkerMirroredStrategy on one worker: TensorFlow alone, at its defaults.
PEERS = {"sync": "mirrored", "async": "parameter_server", "limit": "mirrored"}


def peer_of(system):
    """The peer a system's throughput is compared with: TensorFlow's strategy of its kind at its defaults; None
    for the floor and for the peers themselves."""
    peer = PEERS.get(SYSTEMS[system].kind)
    return peer if peer != system and not SYSTEMS[system].strategy else None


def same_kernels_peer_of(system):
    """The peer in the system's own kernels, which measures the distribution alone: TensorFlow's defaults (its
    fast path) beside --kernels=fast, the peer in our portable kernels beside those; None where there is none."""
    if SYSTEMS[system].kind not in ("sync", "limit") or SYSTEMS[system].strategy:
        return None
    return "mirrored" if "--kernels=fast" in SYSTEMS[system].flags else "mirrored_ours"
