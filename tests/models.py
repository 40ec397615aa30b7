"""The recipes' models and the digits data, loaded once per test process (a recipe module defines
its own flags, which absl allows only once), for training on in-process clusters."""

import importlib.util

from conftest import CIFAR_RECIPE, RECIPE
from inprocess import train

from parallel_tf.data import datasets
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.settings import run_settings


def recipe_module(name, path):
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines its own flags, as running the recipe does
    return module


MNIST = recipe_module("mnist", RECIPE)
MLP = Recipe(name="mnist", model_fn=MNIST.mlp, datasets={})
CNN = Recipe(name="mnist", model_fn=MNIST.cnn, datasets={})
CIFAR10 = recipe_module("cifar10", CIFAR_RECIPE)
DEFAULTS = run_settings(
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
DIGITS = datasets.digits(DEFAULTS)
FLAGS = {"global_batch_size": 120, "train_steps": 30, "learning_rate": 0.1, "log_every": 15}


def sha(logdir, mode, **flags):
    """The params_sha256 of the digits MLP trained in `mode` (the recipe's defaults, 30 steps, unless `flags`)."""
    return train(MLP, DIGITS, logdir, mode, **{**FLAGS, **flags})["summary"]["params_sha256"]
