"""What the launcher asks of the recipe before anything starts or is written: the tasks' flags, checked by the
chief's own command (--check_flags), and --download, done before the launcher fences itself off. Free of
TensorFlow, as the launcher is."""

import json
import os
import subprocess
import sys

from absl import flags

from parallel_tf.backports import removeprefix
from parallel_tf.cli import CHECKED_DATASET, UNKNOWN_FLAG, unknown_flag
from parallel_tf.data import download
from parallel_tf.errors import ConfigError, TaskFailure
from parallel_tf.launch.processes import say

CHECK_TIMEOUT_SECS = 120
FLAGS = flags.FLAGS


def check_task_flags(cluster, recipe_path, common):
    """Runs the chief's command with --check_flags before anything is started or written, so a flag
    the tasks would refuse (the recipe's own, an unknown one, a bad value) is one line and exit 2 here,
    in the recipe's own words, in well under a second: a task checks its flags before it imports
    TensorFlow. The cluster goes by TF_CONFIG, as its spec file is not written yet; without one (None),
    the command is the one plain process's."""
    environment = dict(os.environ)
    if cluster:
        environment["TF_CONFIG"] = json.dumps({**json.loads(cluster.to_json()), "task": {"type": "worker", "index": 0}})
    command = [sys.executable, recipe_path, *common, "--check_flags"]
    done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECS)
    if done.returncode == 2:
        said = (done.stderr + done.stdout).strip().splitlines() or ["the chief's command refused its flags (exit 2)"]
        raise ConfigError(with_suggestion(removeprefix(said[-1], "error: ")))
    if done.returncode:
        raise TaskFailure(f"checking the tasks' flags failed (exit {done.returncode}): {done.stderr.strip()}")


def with_suggestion(refusal):
    """The recipe's refusal of a flag it does not know, with the launcher's flags it may have meant beside the
    recipe's (the recipe's own parser knows only the recipe's: --num_worker gets no suggestion there)."""
    unknown = UNKNOWN_FLAG.match(refusal)
    if not unknown or ":" in refusal:  # a flag the recipe has a hint for: its words
        return refusal
    suggested = [removeprefix(flag, "--") for flag in (unknown[2] or "").split(" or ") if flag]
    return unknown_flag(unknown[1], list(FLAGS), suggested=suggested)


def fetch_before_fencing(recipe_flags, recipe_path, dry_run=False):
    """--download, done by the launcher before it enters its private network (not in a dry run): inside it the tasks
    reach only each other, so their own downloads could not connect. The tasks then find every file
    with its checksum in --data_dir and fetch nothing. The data flags are the recipe's; a value they
    would refuse is left for the tasks to report. Without --dataset, the recipe's own default is asked
    of it (--check_flags says the dataset it would read)."""
    data = flags.FlagValues()
    flags.DEFINE_string("dataset", None, "", flag_values=data)
    flags.DEFINE_string("data_dir", None, "", flag_values=data)
    flags.DEFINE_bool("download", False, "", flag_values=data)
    flags.DEFINE_string("download_url", None, "", flag_values=data)
    try:
        data(["launch", *recipe_flags], known_only=True)
    except flags.Error:
        return
    if not (data.download and data.data_dir):
        return
    dataset = data.dataset or recipes_dataset(recipe_path, recipe_flags)
    if dataset in download.SOURCES and dry_run:
        say(f"--dry_run: would download {dataset} into {data.data_dir} before the cluster starts")
    elif dataset in download.SOURCES:
        say(f"downloading {dataset} into {data.data_dir} before the cluster starts")
        download.fetch(dataset, data.data_dir, data.download_url, say=say)


def recipes_dataset(recipe_path, recipe_flags):
    """The dataset the recipe's tasks read with these flags, as its --check_flags says; None if it
    refuses them (the chief's check reports that, in its words)."""
    command = [sys.executable, recipe_path, *recipe_flags, "--check_flags"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_SECS)
    said = [
        removeprefix(line, CHECKED_DATASET) for line in done.stdout.splitlines() if line.startswith(CHECKED_DATASET)
    ]
    return said[-1] if done.returncode == 0 and said else None
