"""Every user mistake, run as the user would: exit 2, one line naming the problem, no traceback.

A case is a real process, run a few at a time (none starts a server that stays up), unless a task
refuses it from its flags alone (FLAGS_ONLY): those are checked in this process, with the flag
definitions and the settings a task makes before it starts anything, which is all the process would run."""

import concurrent.futures
import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from absl import flags
from cifar_files import write_cifar10
from conftest import (
    RECIPE,
    bench_command,
    cifar_command,
    k8s_command,
    launcher_command,
    peers_command,
    recipe_command,
    study_command,
)
from idx_files import write_mnist

from parallel_tf.errors import ConfigError
from parallel_tf.launch import launcher as launcher_lib
from parallel_tf.training import run_flags, task_settings

TIMEOUT = 120
CLUSTER = ["--job_name=worker", "--task_index=0"]
HELD_SOCKETS = []  # ports kept busy for the "port already in use" case, for as long as the module runs


def busy_address():
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    HELD_SOCKETS.append(held)
    return f"127.0.0.1:{held.getsockname()[1]}"


def spec(tmp, name, cluster):
    path = tmp / f"{name}.json"
    path.write_text(cluster if isinstance(cluster, str) else json.dumps({"cluster": cluster}))
    return f"--cluster_spec={path}"


def warm_server_command(*args):
    return [sys.executable, "-m", "parallel_tf.launch.warm_server", *args]


def cases(tmp):
    not_a_socket = tmp / "not_a_socket"
    not_a_socket.write_text("")
    good = spec(tmp, "good", {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]})
    four_workers = {"ps": ["127.0.0.1:1"], "local_ps": ["127.0.0.1:2", "127.0.0.1:3"]}
    four_workers["worker"] = [f"127.0.0.1:{port}" for port in range(4, 8)]

    def grouped(name, groups):
        return spec(tmp, name, json.dumps({"cluster": four_workers, "groups": groups}))

    hierarchical = ["--mode=hierarchical", *CLUSTER]
    corrupt = tmp / "corrupt_mnist"
    corrupt.mkdir()
    write_mnist(corrupt)
    labels = corrupt / "train-labels-idx1-ubyte"
    labels.write_bytes(labels.read_bytes()[:-3])
    incomplete = tmp / "incomplete_mnist"
    incomplete.mkdir()
    used = tmp / "used_logdir"
    used.mkdir()
    (used / "summary.json").write_text("{}")
    unfinished = tmp / "unfinished_logdir"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"recipe": "mnist", "seed": 7}))
    a_file = tmp / "a_file"
    a_file.write_text("")
    study, bench = tmp / "a_study", tmp / "a_bench"
    for folder, marker in ((study, "report.json"), (bench, "bench.json")):
        folder.mkdir()
        (folder / marker).write_text("{}")
    corrupt_cifar = tmp / "corrupt_cifar"
    corrupt_cifar.mkdir()
    write_cifar10(corrupt_cifar, per_batch=2)
    batch = corrupt_cifar / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:100])
    return {
        "malformed JSON": (
            recipe_command(spec(tmp, "malformed", '{"cluster": {"ps": [}'), *CLUSTER),
            "malformed.json: malformed JSON at line 1",
        ),
        "spec without ps": (
            recipe_command(spec(tmp, "nops", {"worker": ["127.0.0.1:2"]}), *CLUSTER),
            '--mode=sync needs a parameter server: the cluster has no "ps" job (only --mode=allreduce',
        ),
        "spec without worker": (
            recipe_command(spec(tmp, "noworker", {"ps": ["127.0.0.1:2"]}), *CLUSTER),
            "cluster.worker: missing or empty",
        ),
        "host not host:port": (
            recipe_command(spec(tmp, "nohost", {"ps": ["127.0.0.1"], "worker": ["127.0.0.1:2"]}), *CLUSTER),
            "cluster.ps[0]: '127.0.0.1' is not host:port",
        ),
        "port out of range": (
            recipe_command(spec(tmp, "port", {"ps": ["127.0.0.1:65536"], "worker": ["127.0.0.1:2"]}), *CLUSTER),
            "port must be a number from 1 to 65535",
        ),
        "same address twice": (
            recipe_command(spec(tmp, "twice", {"ps": ["127.0.0.1:2"], "worker": ["127.0.0.1:2"]}), *CLUSTER),
            "cluster.worker[0]: address 127.0.0.1:2 is already used by cluster.ps[0]",
        ),
        "task index out of range": (
            recipe_command(good, "--job_name=worker", "--task_index=2"),
            "--task_index=2 is out of range: job 'worker' has 2 task(s)",
        ),
        "unknown job name": (
            recipe_command(good, "--job_name=chief"),
            "--job_name=chief: value should be one of <ps|local_ps|worker>",
        ),
        "missing job name": (recipe_command(good), "--job_name is required in a cluster"),
        "batch not divisible by workers": (
            recipe_command(good, *CLUSTER, "--global_batch_size=101"),
            "--global_batch_size=101 is not divisible by the worker count 2",
        ),
        "missing data dir": (
            recipe_command("--dataset=mnist", f"--data_dir={tmp / 'absent'}"),
            "absent: no such directory",
        ),
        "data dir without the files": (
            recipe_command("--dataset=mnist", f"--data_dir={incomplete}"),
            "missing MNIST file train-images-idx3-ubyte",
        ),
        "truncated data file": (
            recipe_command("--dataset=mnist", f"--data_dir={corrupt}"),
            "train-labels-idx1-ubyte: size 65 bytes does not match its header [60] (68 bytes)",
        ),
        "corrupt CIFAR-10 batch": (
            cifar_command(f"--data_dir={corrupt_cifar}"),
            "cifar-10-batches-py/data_batch_3: not a CIFAR-10 batch",
        ),
        "data dir for a bundled dataset": (
            recipe_command(f"--data_dir={incomplete}"),
            "--data_dir does not apply to --dataset=digits, which needs no files",
        ),
        "file dataset without data dir": (
            recipe_command("--dataset=mnist"),
            "--dataset=mnist is read from files: give --data_dir",
        ),
        "mirror without --download": (
            recipe_command("--dataset=mnist", f"--data_dir={incomplete}", "--download_url=http://127.0.0.1:1/"),
            "--download_url only applies with --download",
        ),
        "unknown dataset": (recipe_command("--dataset=imagenet"), "--dataset=imagenet: value should be one of"),
        "flag for another mode": (
            recipe_command("--task_index=1"),
            "--task_index applies only to cluster tasks, and no cluster was given",
        ),
        "two cluster sources": (
            recipe_command(good, "--ps_hosts=127.0.0.1:5", "--worker_hosts=127.0.0.1:6", *CLUSTER),
            "give the cluster one way, not both --cluster_spec and --ps_hosts/--worker_hosts",
        ),
        "non-numeric flag": (recipe_command("--train_steps=ten"), "--train_steps=ten: invalid literal for int()"),
        "zero steps": (recipe_command("--train_steps=0"), "--train_steps=0: 0 is not a positive integer"),
        "step decay without its interval": (
            recipe_command("--lr_schedule=step"),
            "--lr_schedule=step decays every --lr_decay_steps or at --lr_decay_milestones: give one",
        ),
        "an infinite learning rate": (
            recipe_command("--learning_rate=inf"),
            "flag --learning_rate=inf: must be a finite number",
        ),
        "decay milestones out of order": (
            recipe_command("--lr_schedule=step", "--lr_decay_milestones=30,20"),
            "flag --lr_decay_milestones=['30', '20']: must be positive whole numbers in increasing order",
        ),
        "an unknown schedule": (
            recipe_command("--lr_schedule=linear"),
            "value should be one of <constant|step|cosine>",
        ),
        "negative learning rate": (recipe_command("--learning_rate=-1"), "--learning_rate=-1"),
        "unknown flag": (recipe_command("--stepz=5"), "unknown flag --stepz"),
        "a misspelled flag, close to the launcher's and the recipe's": (
            launcher_command("--trian_steps=5"),
            "error: unknown flag --trian_steps (did you mean --train_steps or --trace_steps?)",
        ),
        "a flag of the launcher given to a task": (
            recipe_command("--num_workers=2"),
            "unknown flag --num_workers: it is the launcher's (./run_local_cluster.sh, python -m parallel_tf.launch)",
        ),
        "a worker count beside a cluster spec that says another": (
            launcher_command(good, "--num_workers=4"),
            f"--num_workers=4 contradicts {good}, which has 2 workers: the spec names every task; drop --num_workers",
        ),
        "a server count beside a cluster spec that says another": (
            launcher_command(good, "--num_ps=2"),
            f"--num_ps=2 contradicts {good}, which has 1 parameter server",
        ),
        "a missing data dir, through the launcher": (
            launcher_command("--dataset=mnist", f"--data_dir={tmp / 'absent'}"),
            "absent: no such directory",
        ),
        "a truncated data file, through the launcher": (
            launcher_command("--dataset=mnist", f"--data_dir={corrupt}"),
            "train-labels-idx1-ubyte: size 65 bytes does not match its header [60] (68 bytes)",
        ),
        "a corrupt CIFAR-10 batch, through the launcher": (
            launcher_command("--recipe=cifar10", f"--data_dir={corrupt_cifar}"),
            "cifar-10-batches-py/data_batch_3: not a CIFAR-10 batch",
        ),
        "a study's folder as a run's logdir": (
            launcher_command(f"--logdir={study}"),
            f"--logdir={study} holds a study (report.json), not a run: give a run a folder of its own",
        ),
        "a run's logdir as a study's folder": (
            study_command(f"--out={used}"),
            f"--out={used} holds a run (summary.json), not a study: give a study a folder of its own",
        ),
        "a bench's folder as a run's logdir": (
            recipe_command(f"--logdir={bench}"),
            f"--logdir={bench} holds a bench (bench.json), not a run",
        ),
        "oneDNN's ops beside portable kernels": (
            ["env", "TF_ENABLE_ONEDNN_OPTS=1", *launcher_command("--train_steps=5")],
            "TF_ENABLE_ONEDNN_OPTS=1 in the environment asks for TensorFlow's kernels, and the run's are "
            "--kernels=portable (the default): unset it, or choose --kernels=fast",
        ),
        "logdir holding a run": (recipe_command(f"--logdir={used}"), "already holds a finished run (summary.json)"),
        "logdir checked before any data is read": (
            recipe_command("--dataset=mnist", "--download", f"--data_dir={tmp / 'never'}", f"--logdir={used}"),
            "already holds a finished run (summary.json)",
        ),
        "port already in use": (
            recipe_command(f"--ps_hosts={busy_address()}", "--worker_hosts=127.0.0.1:2", "--job_name=ps"),
            "ps:0's port",
        ),
        "unwritable logdir": (recipe_command(f"--logdir={a_file / 'run'}"), "cannot write there: Not a directory"),
        "a rank that compresses none of the matrices": (
            launcher_command("--mode=allreduce", "--powersgd_rank=200"),
            "--powersgd_rank=200 compresses none of the model's matrices by --powersgd_min_compression=2",
        ),
        "gathered codes that send more than the ring": (
            launcher_command("--mode=allreduce", "--num_workers=8", "--gradient_compression=8bit"),
            "--gradient_compression=8bit over all-reduce gathers 67382 bytes a step from the other 7 workers",
        ),
        "an absurd thread count": (
            recipe_command("--intra_op_threads=100000"),
            "--intra_op_threads=100000",
        ),
        "a half-precision transport with one worker": (
            launcher_command("--mode=allreduce", "--num_workers=1", "--allreduce_transport=float16"),
            "--allreduce_transport=float16 with one worker: nothing crosses the ring",
        ),
        "a link for one all-reduce worker": (
            launcher_command("--mode=allreduce", "--num_workers=1", "--link_rate=100mbit"),
            "--link_rate=100mbit with one all-reduce worker: nothing crosses a link",
        ),
        "more simulated hosts than tasks": (
            launcher_command("--simulate_hosts=5"),
            "--simulate_hosts=5 is more than the cluster's 3 tasks: 2 host(s) would hold none",
        ),
        "a launch resuming a run with other settings": (
            launcher_command(f"--logdir={unfinished}"),
            f"--logdir={unfinished} holds an unfinished run that this command is not: seed 7, here 0;",
        ),
        "resume with other settings": (
            recipe_command(f"--logdir={unfinished}"),
            "holds an unfinished run that this command is not: seed 7, here 0; ",
        ),
        "empty host list": (
            recipe_command("--ps_hosts=", "--worker_hosts=127.0.0.1:2", "--job_name=worker"),
            '--mode=sync needs a parameter server: the cluster has no "ps" job',
        ),
        "zero batch": (recipe_command("--global_batch_size=0"), "--global_batch_size=0: 0 is not a positive integer"),
        "negative steps": (recipe_command("--train_steps=-5"), "--train_steps=-5: -5 is not a positive integer"),
        "negative checkpoint interval": (recipe_command("--checkpoint_every=-1"), "-1 is not a non-negative integer"),
        "backup workers with the accumulator": (
            recipe_command(good, *CLUSTER, "--replicas_to_aggregate=1", "--aggregation=accumulator"),
            "--replicas_to_aggregate=1 needs --aggregation=ordered, not --aggregation=accumulator",
        ),
        "more replicas than workers": (
            recipe_command(good, *CLUSTER, "--replicas_to_aggregate=3"),
            "--replicas_to_aggregate=3 is more than the 2 workers",
        ),
        "launcher: isolation impossible but required": (
            launcher_command(
                spec(tmp, "launch_remote", {"ps": ["192.0.2.1:2"], "worker": ["192.0.2.1:3"]}), "--isolate_network=on"
            ),
            "cannot isolate the cluster: the cluster spec names 192.0.2.1:2, not a loopback address",
        ),
        "hierarchical without groups": (
            recipe_command(good, *hierarchical),
            '--mode=hierarchical needs a cluster spec with a "local_ps" job and "groups"',
        ),
        "worker in two groups": (
            recipe_command(grouped("in_two_groups", [[0, 2], [1, 2, 3]]), *hierarchical),
            "groups[1]: worker 2 is already in groups[0]",
        ),
        "group not dividing the batch": (
            recipe_command(grouped("uneven", [[0, 1, 2], [3]]), *hierarchical, "--global_batch_size=8"),
            "groups[0] has 3 workers, which does not divide --global_batch_size=8",
        ),
        "push_every below 1": (
            recipe_command(good, *CLUSTER, "--mode=async", "--push_every=0"),
            "--push_every=0: 0 is not a positive integer",
        ),
        "clipping with local SGD": (
            recipe_command(good, *CLUSTER, "--clip_norm=1", "--local_steps=2"),
            "--local_steps=2 does not go with --clip_norm=1.0: it builds its own sync graph, which does not change "
            "how the optimizer applies an update",
        ),
        "QSGD with more levels than an int8 holds": (
            recipe_command(good, *CLUSTER, "--gradient_compression=qsgd:128"),
            "--gradient_compression=qsgd:128: expected none, 8bit, 1bit, topk:K, qsgd:S[:B], terngrad (K and B "
            "positive integers, 1 <= S <= 127)",
        ),
        "both delay compensations": (
            recipe_command(good, *CLUSTER, "--mode=async", "--delay_compensation=1", "--adaptive_delay_compensation=1"),
            "--adaptive_delay_compensation=1.0 does not go with --delay_compensation=1.0: both compensate a push "
            "for its delay, one with λ fixed, the other with λ adapted; choose one",
        ),
        "async flag in sync mode": (
            recipe_command(good, *CLUSTER, "--fetch_every=2"),
            "--fetch_every does not apply to --mode=sync; it is for --mode=async",
        ),
        "launcher: an all-reduce transport for parameter servers": (
            launcher_command("--allreduce_transport=float16"),
            "--allreduce_transport does not apply to --mode=sync; it is for --mode=allreduce",
        ),
        "launcher: half-precision transport with strict determinism": (
            launcher_command("--mode=allreduce", "--allreduce_transport=bfloat16", "--strict_determinism"),
            "--strict_determinism does not go with --allreduce_transport=bfloat16: strict determinism gathers whole "
            "float32 microbatch gradients, to equal sync strict bitwise",  # the one that closes the ring speaks first
        ),
        "launcher: --num_groups outside hierarchical": (
            launcher_command("--mode=async", "--num_groups=2"),
            "--num_groups applies only to --mode=hierarchical, not async",
        ),
        "launcher: grouped spec in sync mode": (
            launcher_command(grouped("launch_grouped", [[0, 2], [1, 3]])),
            '"local_ps" and "groups", which only --mode=hierarchical uses, not sync',
        ),
        "microbatches without strict determinism": (
            recipe_command(good, *CLUSTER, "--microbatches=4"),
            "--microbatches applies only with --strict_determinism",
        ),
        "strict microbatches not split evenly over workers": (
            recipe_command(good, *CLUSTER, "--strict_determinism", "--microbatches=3"),
            "--microbatches=3 is not divisible by the worker count 2",
        ),
        "strict determinism with the accumulator": (
            recipe_command(good, *CLUSTER, "--strict_determinism", "--aggregation=accumulator"),
            "--strict_determinism needs --aggregation=ordered, not --aggregation=accumulator: it sums in a fixed order",
        ),
        "local updates in sync mode": (
            recipe_command(good, *CLUSTER, "--nolocal_updates"),
            "--local_updates does not apply to --mode=sync; it is for --mode=async",
        ),
        "aggregation in async mode": (
            recipe_command(good, *CLUSTER, "--mode=async", "--aggregation=accumulator"),
            "--aggregation does not apply to --mode=async; it is for --mode=sync",
        ),
        "study: strict determinism outside sync": (
            study_command("--strict_determinism", "--modes=sync,async"),
            "--strict_determinism is a sync|allreduce-mode option: use it with --modes=sync,allreduce",
        ),
        "study: unknown mode": (study_command("--modes=sync,fast"), "--modes: fast: choose from sync, async"),
        "study: seeds and repeats": (
            study_command("--seeds=0,1", "--repeats=3"),
            "--seeds and --repeats: give one (--seeds runs one repeat per seed)",
        ),
        "study: a seed that is not a number": (
            study_command("--seeds=0,x"),
            "--seeds=0,x: expected distinct whole numbers, e.g. 0,1,2,3,4",
        ),
        "launcher: a task flag no one defines": (launcher_command("--stepz=5"), "error: unknown flag --stepz"),
        "warm server: a socket path that is a file": (
            warm_server_command(f"--socket={not_a_socket}"),
            f"--socket={not_a_socket} is a file that is not a socket",
        ),
        "warm server: a socket in a folder that does not exist": (
            warm_server_command(f"--socket={tmp / 'nowhere' / 'socket'}"),
            f"--socket={tmp / 'nowhere' / 'socket'}: No such file or directory",
        ),
        "launcher: a value the recipe's own flag refuses": (
            launcher_command("--model=rnn"),
            "--model=rnn: value should be one of <mlp|cnn>",
        ),
        "launcher: a learning rate of zero": (
            launcher_command("--learning_rate=0"),
            "--learning_rate=0.0: must be greater than 0",
        ),
        "launcher: a file dataset without data dir": (
            launcher_command("--dataset=mnist"),
            "--dataset=mnist is read from files: give --data_dir",
        ),
        "launcher: unknown recipe": (
            launcher_command("--recipe=nope"),
            "--recipe=nope: no such recipe (available: cifar10, mnist)",
        ),
        "launcher: a straggler that is not a worker": (
            launcher_command("--num_workers=2", "--worker_delay_ms=2:50"),
            "--worker_delay_ms=2:50: there is no worker 2 (workers 0-1)",
        ),
        "a straggler's delay that is not a number": (
            recipe_command(good, *CLUSTER, "--worker_delay_ms=1:fast"),
            "--worker_delay_ms=1:fast: '1:fast' is not WORKER:MILLISECONDS (e.g. 1:50)",
        ),
        "launcher: a negative delay compensation": (
            launcher_command("--mode=async", "--delay_compensation=-1"),
            "--delay_compensation=-1.0: λ must be 0 (off) or more",
        ),
        "launcher: softsync over more workers than there are": (
            launcher_command("--mode=async", "--num_workers=2", "--softsync=3"),
            "--softsync=3 is more than the 2 workers: n-softsync takes floor(N/n) pushes",
        ),
        "bounded staleness in sync mode": (
            launcher_command("--max_staleness=2"),
            "--max_staleness does not apply to --mode=sync; it is for --mode=async",
        ),
        "slurm resolver outside a Slurm step": (
            recipe_command("--cluster_resolver=slurm"),
            "--cluster_resolver=slurm: SLURM_STEP_NODELIST is not set; run the task under srun",
        ),
        "a task's --num_ps without a resolver": (
            recipe_command(good, *CLUSTER, "--num_ps=2"),
            "--num_ps applies only with --cluster_resolver; a spec, hosts or TF_CONFIG name every task",
        ),
        "launcher: fewer workers without restarts": (
            launcher_command("--min_workers=1"),
            "--min_workers applies with --max_restarts: only a restart can go on with fewer workers",
        ),
        "launcher: fewer workers in async mode": (
            launcher_command("--mode=async", "--max_restarts=1", "--min_workers=1"),
            "--min_workers applies only to --mode=sync|allreduce, not async: a resume must keep its worker count",
        ),
        "tfjob resolver without TF_CONFIG": (
            recipe_command("--cluster_resolver=tfjob"),
            "--cluster_resolver=tfjob: TF_CONFIG is not set; the TFJob operator sets it in each pod",
        ),
        "the exit code of a mistake for a failure": (
            recipe_command(good, *CLUSTER, "--failure_exit_code=2"),
            "--failure_exit_code=2: 2 means a mistake, which no restart cures; choose another code",
        ),
        "k8s: no image": (k8s_command(), "--image is required: the container image the pods run"),
        "k8s: groups outside hierarchical mode": (
            k8s_command("--image=x", "--num_groups=3"),
            "--num_groups applies only to --mode=hierarchical, not sync",
        ),
        "k8s: a name Kubernetes refuses": (
            k8s_command("--image=x", "--name=My_Job"),
            "--name=My_Job: a TFJob name must be a DNS label",
        ),
        "launcher: groups by host without hosts": (
            launcher_command("--mode=hierarchical", "--groups=by_host"),
            "--groups=by_host: a cluster without --simulate_hosts does not say which tasks share a host",
        ),
        # One rule for --groups=by_host with --num_groups, in the launcher, a Slurm task and the TFJob writer.
        "launcher: groups by host and a group count": (
            launcher_command("--mode=hierarchical", "--simulate_hosts=2", "--groups=by_host", "--num_groups=2"),
            "--groups=by_host makes one group per host; it does not take --num_groups",
        ),
        "slurm task: groups by host and a group count": (
            recipe_command("--cluster_resolver=slurm", "--mode=hierarchical", "--groups=by_host", "--num_groups=2"),
            "--groups=by_host makes one group per host; it does not take --num_groups",
        ),
        "k8s: groups by host": (
            k8s_command("--image=x", "--mode=hierarchical", "--groups=by_host"),
            "--groups=by_host: a TFJob does not say which tasks share a host; use --num_groups",
        ),
        "launcher: simulated hosts outside the private network": (
            launcher_command("--simulate_hosts=2", "--isolate_network=off"),
            "--simulate_hosts builds its hosts inside the launcher's private network",
        ),
        "launcher: a link rate without a unit": (
            launcher_command("--link_rate=100"),
            "--link_rate=100: expected a rate such as 100mbit, 1gbit or 10gbit",
        ),
        "launcher: a link delay without a link": (
            launcher_command("--link_delay=5"),
            "--link_delay applies only with --link_rate",
        ),
        "launcher: a negative link delay": (
            launcher_command("--link_rate=100mbit", "--link_delay=-1"),
            "flag --link_delay=-1: -1.0 is not a non-negative number",
        ),
        "launcher: a link delay that is not a number": (
            launcher_command("--link_rate=100mbit", "--link_delay=abc"),
            "flag --link_delay=abc: could not convert string to float: 'abc'",
        ),
        "launcher: a link losing more than half its packets": (
            launcher_command("--link_rate=100mbit", "--link_loss=2"),
            "flag --link_loss=2: 2.0 is not a number in the range [0.0, 0.5]",
        ),
        "launcher: a link loss without a link": (
            launcher_command("--link_loss=0.01"),
            "--link_loss applies only with --link_rate",
        ),
        "launcher: a link outside the private network": (
            launcher_command("--link_rate=100mbit", "--isolate_network=off"),
            "--link_rate builds its hosts inside the launcher's private network",
        ),
        "launcher: a link on a cluster spec": (
            launcher_command("--link_rate=100mbit", good),
            "--link_rate lays the cluster out itself; it does not take --cluster_spec",
        ),
        "bench: a link rate without a unit": (
            bench_command("--links=100"),
            "--links=100: expected a rate such as 100mbit, 1gbit or 10gbit",
        ),
        "bench: the one process on a link": (
            bench_command("--links=100mbit", "--systems=process,sync"),
            "--links: the one process sends nothing over a network, so no link can slow it",
        ),
        "k8s: a link on a TFJob": (
            k8s_command("--image=img", "--link_rate=100mbit"),
            "--link_rate: a TFJob's network is the cluster's own; only the local launcher shapes one",
        ),
        "task: a link the launcher did not shape": (
            recipe_command(good, *CLUSTER, "--link_rate=100mbit"),
            "--link_rate=100mbit: only the launcher shapes a link",
        ),
        "launcher: an unknown gradient codec": (
            launcher_command("--gradient_compression=4bit"),
            "--gradient_compression=4bit: expected none, 8bit, 1bit, topk:K",
        ),
        "launcher: an infinite clipping norm": (
            launcher_command("--num_workers=2", "--clip_norm=inf"),
            "flag --clip_norm=inf: must be a finite number",
        ),
        "launcher: a schedule for hierarchical groups": (
            launcher_command("--mode=hierarchical", "--warmup_steps=10"),
            "--warmup_steps does not apply to --mode=hierarchical",
        ),
        "study: a variant whose techniques do not go together, before any run": (
            study_command("--workers=2", "--variants=async;async --max_staleness=0 --push_every=2"),
            "variant 'async --max_staleness=0 --push_every=2' on 2 workers: --max_staleness=0 needs --push_every=1",
        ),
        "launcher: compression with the accumulator": (
            launcher_command("--gradient_compression=8bit", "--aggregation=accumulator"),
            "--gradient_compression=8bit needs --aggregation=ordered, not --aggregation=accumulator",
        ),
        "launcher: compression with strict determinism": (
            launcher_command("--gradient_compression=1bit", "--strict_determinism"),
            "--gradient_compression=1bit needs --nostrict_determinism, not --strict_determinism",
        ),
        "launcher: local SGD with momentum": (
            launcher_command("--local_steps=4", "--optimizer=momentum"),
            "--local_steps=4 needs --optimizer=sgd, not --optimizer=momentum: an optimizer's slots",
        ),
        "launcher: local SGD with compression": (
            launcher_command("--local_steps=4", "--gradient_compression=8bit"),
            "--local_steps=4 does not go with --gradient_compression=8bit: it builds its own sync graph",
        ),
        "launcher: EASGD with a push technique": (
            launcher_command("--mode=async", "--easgd_alpha=0.25", "--staleness_aware"),
            "--easgd_alpha=0.25 does not go with --staleness_aware: it builds its own async graph, which does not set",
        ),
        "launcher: an elastic force past the midpoint": (
            launcher_command("--mode=async", "--easgd_alpha=0.75"),
            "--easgd_alpha=0.75: must be from 0 (off) to 0.5",
        ),
        "bench: an unknown system": (
            bench_command("--systems=sync,fast"),
            "--systems: unknown fast (known: process, process_step, process_fast, process_avx2, floor, sync, "
            "sync_servers, sync_servers_pipelined, sync_pipelined, sync_fast",
        ),
        "bench: too few steps for a steady state": (
            bench_command("--train_steps=5"),
            "--train_steps=5: the bench needs at least 10 to see a steady state",
        ),
        "bench: a worker count that does not divide the batch": (
            bench_command("--workers=1,7"),
            "--workers: 7 does not divide --global_batch_size=120",
        ),
        "peers: an optimizer other than SGD": (
            peers_command("--strategy=mirrored", f"--logdir={tmp / 'peers'}", "--optimizer=adam"),
            "--optimizer=adam: the peers train with plain SGD only",
        ),
        "peers: a link delay without a link": (
            peers_command("--strategy=mirrored", f"--logdir={tmp / 'peers'}", "--link_delay=5"),
            "--link_delay applies only with --link_rate",
        ),
        "peers: a logdir holding a run": (
            peers_command("--strategy=mirrored", f"--logdir={used}"),
            "already holds a run; choose another",
        ),
        "launcher: zero workers": (launcher_command("--num_workers=0"), "--num_workers=0: 0 is not a positive integer"),
        "launcher: zero steps a run": (
            launcher_command("--steps_per_run=0"),
            "flag --steps_per_run=0: 0 is not a positive integer",
        ),
        "launcher: parameter servers for all-reduce": (
            launcher_command("--mode=allreduce", "--num_ps=2"),
            "--num_ps does not apply to --mode=allreduce: its workers all-reduce their gradients among themselves",
        ),
        "k steps a run with the accumulator": (
            recipe_command(good, *CLUSTER, "--steps_per_run=10", "--aggregation=accumulator"),
            "--steps_per_run=10 needs --aggregation=ordered",
        ),
        "k steps a run, logged inside them": (
            recipe_command(good, *CLUSTER, "--steps_per_run=10", "--log_every=15"),
            "--log_every=15 is not a multiple of --steps_per_run=10: the trainer can only log",
        ),
        "all-reduce on a cluster with a ps": (
            recipe_command(good, *CLUSTER, "--mode=allreduce"),
            "--mode=allreduce runs workers only, which all-reduce their gradients among themselves",
        ),
        "launcher: bad spec": (
            launcher_command(spec(tmp, "launch_bad", {"ps": ["x"], "worker": ["127.0.0.1:2"]})),
            "cluster.ps[0]: 'x' is not host:port",
        ),
    }


# A recipe's cases that a task refuses in task_settings.settings_from_flags, from its flags and the spec they name.
# "unknown flag" and "batch not divisible by workers" stay real processes: one of each kind of refusal
# (absl's parser, our check) shows the process's exit code and single line.
FLAGS_ONLY = {
    "an absurd thread count",
    "an infinite learning rate",
    "decay milestones out of order",
    "a straggler's delay that is not a number",
    "k steps a run with the accumulator",
    "k steps a run, logged inside them",
    "all-reduce on a cluster with a ps",
    "a task's --num_ps without a resolver",
    "aggregation in async mode",
    "async flag in sync mode",
    "backup workers with the accumulator",
    "both delay compensations",
    "clipping with local SGD",
    "QSGD with more levels than an int8 holds",
    "empty host list",
    "flag for another mode",
    "group not dividing the batch",
    "hierarchical without groups",
    "host not host:port",
    "local updates in sync mode",
    "malformed JSON",
    "microbatches without strict determinism",
    "mirror without --download",
    "missing job name",
    "more replicas than workers",
    "negative checkpoint interval",
    "negative learning rate",
    "negative steps",
    "non-numeric flag",
    "port out of range",
    "push_every below 1",
    "same address twice",
    "slurm resolver outside a Slurm step",
    "slurm task: groups by host and a group count",
    "spec without ps",
    "spec without worker",
    "step decay without its interval",
    "an unknown schedule",
    "strict determinism with the accumulator",
    "strict microbatches not split evenly over workers",
    "task index out of range",
    "tfjob resolver without TF_CONFIG",
    "the exit code of a mistake for a failure",
    "two cluster sources",
    "unknown dataset",
    "unknown job name",
    "worker in two groups",
}


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("bad_input")


@pytest.fixture(scope="module")
def table(tmp):
    return cases(tmp)


@pytest.fixture(scope="module")
def outcomes(tmp, table):
    def run(command):
        # In tmp: the default logdir (runs/...) of a refused run lands there, not in the repository.
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp)
        return done.returncode, done.stdout, done.stderr

    processes = {name: case for name, case in table.items() if name not in FLAGS_ONLY}
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        futures = {name: (pool.submit(run, command), expected) for name, (command, expected) in processes.items()}
        return {name: (*future.result(), expected) for name, (future, expected) in futures.items()}


def case_names():
    with tempfile.TemporaryDirectory() as tmp:
        return sorted(cases(Path(tmp)))


@pytest.mark.cluster
@pytest.mark.parametrize("case", sorted(set(case_names()) - FLAGS_ONLY))
def test_bad_input_exits_2_with_one_line(outcomes, case):
    code, stdout, stderr, expected = outcomes[case]
    lines = [line for line in (stdout + stderr).splitlines() if line.strip()]
    assert code == 2, f"exit {code}; output:\n{stdout}{stderr}"
    assert lines == [lines[0]] and lines[0].startswith("error: "), f"want one error line, got:\n{stdout}{stderr}"
    assert expected in lines[0]


@pytest.mark.parametrize("case", sorted(FLAGS_ONLY))
def test_a_task_refuses_bad_flags_before_it_starts_anything(table, case):
    command, expected = table[case]
    assert command[:2] == [sys.executable, RECIPE], "only a recipe's task is checked in this process"
    refusal = task_refusal(command[2:])
    assert refusal is not None and "\n" not in refusal, refusal
    assert expected in refusal


def task_refusal(args):
    """What a task with `args` says before it starts anything, or None: its flags parsed with their
    definitions (validators included) and its settings made, as task.main does, in fresh FlagValues."""
    values = flags.FlagValues()
    run_flags.define_task_flags(["digits", "mnist"], values)
    try:
        values(["task", *args])
        task_settings.settings_from_flags(values)
    except (flags.Error, ConfigError) as e:
        return str(e)
    return None


@pytest.mark.cluster
def test_a_refused_run_leaves_no_logdir_behind(outcomes, tmp):
    """Every command above ran in `tmp` and was refused: none left the runs/<recipe>-<mode>-<time> a
    launch makes for itself (the launcher removes it while empty), nor runs/ itself."""
    assert outcomes and not (tmp / "runs").exists(), sorted(str(p) for p in (tmp / "runs").rglob("*"))


def test_a_task_given_a_flag_of_the_launcher_is_told_whose_it_is():
    """run_flags.LAUNCHER_FLAGS names exactly the launcher's flags that a task does not take: those get
    LAUNCHER_HINTS' line instead of the nearest of the task's own names (--num_workers is not --num_groups)."""
    launcher, task = flags.FlagValues(), flags.FlagValues()
    launcher_lib.define_launcher_flags(launcher)
    run_flags.define_task_flags(["digits"], task)
    assert set(launcher) - set(task) == set(run_flags.LAUNCHER_FLAGS)
