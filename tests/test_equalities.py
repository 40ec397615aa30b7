"""The equalities every mode and technique keeps, trained on in-process clusters (inprocess.py). On the
digits MLP (50 steps), bitwise: one process = sync with one worker = async with one worker pushing and
fetching every step; hierarchical with one group = sync accumulator with that many workers (Adam); 2 parameter
servers = 1, pipelined or not; strict determinism gives one model for 1, 2 and 4 workers. Up to rounding:
ordered sync on 3 workers = 1 worker. On the CIFAR-10 CNN with augmentation, sync repeats bitwise; local SGD
and synchronous EASGD repeat bitwise."""

import numpy as np
import pytest
from inprocess import train
from models import CIFAR10, CNN, DEFAULTS, DIGITS, FLAGS, MLP, sha

from parallel_tf.data import datasets
from parallel_tf.data.sharding import random_crop_and_flip
from parallel_tf.training.recipe import Recipe

pytestmark = pytest.mark.inprocess


def test_async_with_one_worker_pushing_and_fetching_every_step_is_the_one_process_run(tmp_path):
    assert sha(tmp_path / "async", "async", num_workers=1) == sha(tmp_path / "single", "single")


def test_sync_with_one_worker_is_the_one_process_run(tmp_path):
    assert sha(tmp_path / "sync", "sync", num_workers=1) == sha(tmp_path / "single", "single")


def test_ordered_sync_on_three_workers_is_one_worker_up_to_rounding(tmp_path):
    """Three workers sum three partial gradients where one worker sums one: the same model, up to float rounding."""
    one, three = (train(MLP, DIGITS, tmp_path / f"{n}", "sync", num_workers=n, **FLAGS)["params"] for n in (1, 3))
    assert max(np.abs(one[name] - three[name]).max() for name in one) < 1e-5


def test_hierarchical_with_one_group_is_sync_accumulator_with_that_many_workers(tmp_path):
    """With Adam, whose state the central ps keeps step for step beside the group's at --central_every=1
    (SGD's one group, at any --central_every, is worked out by hand in test_arithmetic.py)."""
    hierarchical = sha(tmp_path / "hierarchical", "hierarchical", groups=[[0, 1]], optimizer="adam")
    assert hierarchical == sha(tmp_path / "sync", "sync", aggregation="accumulator", optimizer="adam")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_parameter_servers_train_what_one_does(tmp_path, mode):
    flags = {"num_workers": 1} if mode == "async" else {}  # async with two workers is not repeatable
    assert sha(tmp_path / "two", mode, num_ps=2, **flags) == sha(tmp_path / "one", mode, num_ps=1, **flags)


# (servers, pieces a server; 0: not pipelined) beside one plain server, for each model and worker count: every
# split and pipelined layout is run by some case, and every case runs one of each (two runs, not all five: time)
LAYOUTS = {
    ("MLP", 2): [(1, 3), (4, 0)],
    ("CNN", 2): [(2, 3), (4, 0)],
    ("MLP", 4): [(2, 0), (4, 3)],
    ("CNN", 4): [(2, 0), (4, 3)],
}


@pytest.mark.parametrize("model, workers", LAYOUTS, ids=[f"{workers}-{model}" for model, workers in LAYOUTS])
def test_variables_split_over_1_2_and_4_servers_pipelined_or_not_train_the_same_bits(tmp_path, model, workers):
    """Sync splits its large variables over the servers (graph/placement.py): every element is still summed
    and updated as one server does it, and the pieces start from the whole variable's values. Pipelined
    (graph/pipeline.py), in 3 pieces a server each applied and pulled on its own, inside the loop of steps,
    the sums and updates are the same."""
    hashes = set()
    for servers, pieces in [(1, 0), *LAYOUTS[model, workers]]:
        flags = {"num_ps": servers, "num_workers": workers, "pipeline_pieces": pieces, **FLAGS}
        run = train({"MLP": MLP, "CNN": CNN}[model], DIGITS, tmp_path / f"{servers}_{pieces}", "sync", **flags)
        split = servers * max(pieces, 1)
        assert run["summary"]["variables_split_over"] == (split if split > 1 else 0)
        assert run["summary"]["session_runs"] == FLAGS["train_steps"] // 5  # 5 steps a run: log_every=15
        hashes.add(run["summary"]["params_sha256"])
    assert len(hashes) == 1


def test_strict_determinism_trains_the_same_parameters_for_1_2_and_4_workers(tmp_path):
    strict = {"strict_determinism": True, "microbatches": 8}
    hashes = {sha(tmp_path / f"strict{n}", "sync", num_workers=n, **strict) for n in (1, 2, 4)}
    assert len(hashes) == 1


def test_cifar10_cnn_with_augmentation_repeats_bitwise_on_a_sync_cluster(tmp_path):
    cifar = datasets.synthetic_cifar10(DEFAULTS, num_train=240, num_eval=24)
    recipe = Recipe(name="cifar10", model_fn=CIFAR10.model, datasets={}, augment=_augment)
    flags = {"global_batch_size": 24, "train_steps": 10, "learning_rate": 0.01, "log_every": 5}
    first, second = (train(recipe, cifar, tmp_path / name, "sync", **flags)["summary"] for name in ("first", "second"))
    assert first["params_sha256"] == second["params_sha256"]


def _augment(images, step, positions, settings):
    return random_crop_and_flip(images, step, positions, settings.global_batch_size, settings.seed)


@pytest.mark.parametrize("mode", ["sync", "allreduce"])
def test_a_finished_run_trained_on_to_more_steps_ends_on_the_straight_run(tmp_path, mode):
    """20 steps, finished (summary.json written), then the same logdir with --train_steps=30: the run
    resumes from its last checkpoint and ends on the bits of 30 steps run straight."""
    flags = {**FLAGS, "train_steps": 20, "log_every": 10}
    train(MLP, DIGITS, tmp_path / "extended", mode, **flags)
    extended = train(MLP, DIGITS, tmp_path / "extended", mode, **{**flags, "train_steps": 30})["summary"]
    assert extended["session_runs"] == 1  # steps 20-29 in one run of 10: resumed, not trained again from 0
    assert extended["params_sha256"] == sha(tmp_path / "straight", mode, log_every=10)


@pytest.mark.parametrize("technique", [{"local_steps": 4}, {"easgd_alpha": 0.2}], ids=["local_sgd", "easgd"])
def test_local_steps_on_copies_repeat_bitwise(tmp_path, technique):
    """A copy's SGD step must read the copies its gradients were computed from: its assigns wait for every
    gradient (ref variables are read in place, so an early assign to the second layer changed the first
    layer's gradient, and repeats differed)."""
    first, second = (sha(tmp_path / name, "sync", **technique) for name in ("first", "second"))
    assert first == second


@pytest.mark.parametrize("optimizer, pieces", [("sgd", 0), ("momentum", 3)], ids=["plain", "pipelined-momentum"])
def test_a_run_resumed_on_another_number_of_servers_ends_on_the_straight_runs_bits(tmp_path, optimizer, pieces):
    """The checkpoint holds each variable whole (its pieces saved as slices of it), so 15 steps on 2 servers
    trained on to 30 on 4 end where 30 on 1 do; resumed pipelined too, 3 pieces a server, with momentum's
    slots restored into the pipeline's pieces."""
    train(MLP, DIGITS, tmp_path / "resumed", "sync", num_ps=2, optimizer=optimizer, **{**FLAGS, "train_steps": 15})
    on_4 = {"num_ps": 4, "optimizer": optimizer, "pipeline_pieces": pieces, **FLAGS}
    resumed = train(MLP, DIGITS, tmp_path / "resumed", "sync", **on_4)["summary"]["params_sha256"]
    assert resumed == sha(tmp_path / "straight", "sync", num_ps=1, optimizer=optimizer)
