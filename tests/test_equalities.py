"""The starting points every mode and technique keeps, bitwise, on the digits MLP (200 steps), trained
on in-process clusters (inprocess.py): one process = async with one worker pushing and fetching every
step; hierarchical with one group = sync accumulator with that many workers; 2 parameter servers = 1."""

import importlib.util

import pytest
from conftest import RECIPE
from inprocess import train

from parallel_tf import datasets
from parallel_tf.flags import Settings
from parallel_tf.recipe import Recipe

pytestmark = pytest.mark.inprocess


def _mnist_recipe_module():
    spec = importlib.util.spec_from_file_location("mnist_recipe", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines its --model flag, as running the recipe does
    return module


MLP = Recipe(name="mnist", model_fn=_mnist_recipe_module().mlp, datasets={})
DIGITS = datasets.digits(
    Settings(
        mode="single",
        job_name="worker",
        task_index=0,
        cluster=None,
        global_batch_size=120,
        train_steps=200,
        learning_rate=0.1,
        optimizer="sgd",
        seed=0,
        logdir=None,
        dataset="digits",
    )
)
FLAGS = {"global_batch_size": 120, "train_steps": 200, "learning_rate": 0.1, "log_every": 50}


def sha(tmp_path, name, mode, **flags):
    return train(MLP, DIGITS, tmp_path / name, mode, **{**FLAGS, **flags})["summary"]["params_sha256"]


def test_async_with_one_worker_pushing_and_fetching_every_step_is_the_one_process_run(tmp_path):
    assert sha(tmp_path, "async", "async", num_workers=1) == sha(tmp_path, "single", "single")


def test_hierarchical_with_one_group_is_sync_accumulator_with_that_many_workers(tmp_path):
    hierarchical = sha(tmp_path, "hierarchical", "hierarchical", groups=[[0, 1]])
    assert hierarchical == sha(tmp_path, "sync", "sync", aggregation="accumulator")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_parameter_servers_train_what_one_does(tmp_path, mode):
    flags = {"num_workers": 1} if mode == "async" else {}  # async with two workers is not repeatable
    assert sha(tmp_path, "two", mode, num_ps=2, **flags) == sha(tmp_path, "one", mode, num_ps=1, **flags)
