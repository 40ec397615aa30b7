"""Each recipe trains through the real readers on tiny files in the datasets' published formats."""

import json
import re
import subprocess

import pytest
from cifar_files import write_cifar10
from conftest import REPO, bench_command, cifar_command, k8s_command, launcher_command, recipe_command, study_command
from idx_files import write_mnist

from parallel_tf.backports import removeprefix

pytestmark = pytest.mark.cluster  # every test here starts the real command

TIMEOUT = 120


def train(command, logdir):
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((logdir / "summary.json").read_text())


@pytest.mark.parametrize("model", ["cnn"])  # the MLP trains on digits all over the suite; the reader is the same
def test_mnist_recipe_trains_on_idx_files(tmp_path, model):
    write_mnist(tmp_path, num_train=120, num_eval=40, gz=True)
    logdir = tmp_path / "run"
    summary = train(
        recipe_command(
            "--dataset=mnist", f"--model={model}", f"--data_dir={tmp_path}", f"--logdir={logdir}", "--train_steps=30"
        ),
        logdir,
    )
    assert (summary["dataset"], summary["train_steps"]) == ("mnist", 30)
    assert summary["eval_accuracy"] >= 0.9  # 1.0 here (40/40); images or labels misread would be chance, 0.1


def test_cifar10_recipe_trains_on_the_archive_with_augmentation(tmp_path):
    write_cifar10(tmp_path, per_batch=24, archive=True)
    logdir = tmp_path / "run"
    summary = train(
        cifar_command(
            f"--data_dir={tmp_path}", f"--logdir={logdir}", "--train_steps=120", "--augment", "--learning_rate=0.03"
        ),
        logdir,
    )
    assert (summary["recipe"], summary["dataset"]) == ("cifar10", "cifar10")
    # 0.75 (18/24) in 120 augmented steps at a rate of 0.03; misread images or labels would be chance, 0.1. On these
    # 120 images a short run's accuracy swings with its bits: since the biases' gradients are summed in order, 80
    # steps at 0.05 (0.79 before) end at 0.375 with a loss of 1.04; 80 at 0.03 end at 0.71, 120 at 0.05 at 0.75. At
    # the default 0.1 they diverge after step 50 (loss 17.4 at step 80).
    assert summary["eval_accuracy"] >= 0.6


@pytest.mark.parametrize(
    "command, flags",
    [
        (
            launcher_command,
            ["--recipe", "--mode", "--num_workers", "--logdir", "--fresh", "--train_steps", "--learning_rate"]
            + ["--gradient_compression", "--clip_norm", "--replicas_to_aggregate", "--softsync", "--warmup_steps"],
        ),
        (study_command, ["--variants", "--workers", "--out", "--train_steps", "--staleness_aware", "--push_every"]),
        (bench_command, ["--systems", "--quick", "--train_steps"]),
        (k8s_command, ["--image", "--logdir_claim", "--num_workers", "--train_steps"]),
    ],
    ids=["launch", "study", "bench", "k8s"],
)
def test_help_exits_0_listing_the_commands_flags_and_the_run_flags_it_passes_on(command, flags):
    done = subprocess.run(command("--help"), capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^ +--(?:\[no\])?(\w+)", done.stdout, re.MULTILINE))
    assert {removeprefix(flag, "--") for flag in flags} - listed == set()
    if "--softsync" in flags:  # a technique's flags under its name and the modes it applies to
        assert "\n  softsync (async):\n    --softsync: " in done.stdout
        assert "A recipe's own flags (--model, --dataset, ...)" in done.stdout


def test_help_lists_the_task_flags_and_the_recipes_own():
    done = subprocess.run(recipe_command("--help"), capture_output=True, text=True, timeout=TIMEOUT, cwd=REPO)
    assert done.returncode == 0
    for flag in ("--job_name", "--cluster_spec", "--global_batch_size", "--dataset: <digits|mnist>", "--model"):
        assert flag in done.stdout, flag
