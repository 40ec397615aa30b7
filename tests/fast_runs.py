"""The runs whose equalities tests/test_fast_kernels.py holds with --kernels=fast (TensorFlow's own products and
oneDNN's ops, whose bits are this machine's): trained on in-process clusters in a process of its own, since
TensorFlow reads the kernels once, as it loads. Prints {name: params_sha256} as JSON on its last line.

    python tests/fast_runs.py
"""

import json
import tempfile
from pathlib import Path

from parallel_tf import compat

compat.pin_before_loading(kernels="fast")  # before anything loads TensorFlow

from inprocess import train  # noqa: E402 (after the pin)
from models import CNN, DIGITS, FLAGS, MLP  # noqa: E402

STRICT = {"strict_determinism": True}
RUNS = {  # name: (recipe, mode, flags); the tests' FLAGS (30 steps of 120 rows) unless said
    **{f"sync {n}, {repeat}": (MLP, "sync", {"num_workers": n}) for n in (1, 2, 4) for repeat in ("first", "again")},
    **{f"strict sync {n}": (MLP, "sync", {"num_workers": n, **STRICT}) for n in (1, 2, 4)},
    **{f"strict allreduce {n}": (MLP, "allreduce", {"num_workers": n, **STRICT}) for n in (1, 2, 4)},
    **{f"CNN strict sync {n}": (CNN, "sync", {"num_workers": n, "train_steps": 10, **STRICT}) for n in (1, 2)},
    # two servers, each variable's share in 2 pieces pulled as applied, at the automatic steps a run: one server's bits
    "sync 2, 2 servers pipelined": (MLP, "sync", {"num_workers": 2, "num_ps": 2, "pipeline_pieces": 2}),
}
# A strict run stopped at step 15 on 2 workers and trained on to 30 on 4, as an elastic restart or a resume does.
RESUMED = ("strict sync, 15 steps on 2, then to 30 on 4", (MLP, "sync", {**STRICT, "train_steps": 15}), 2, 4)


def train_all(logdir):
    hashes = {}
    for name, (recipe, mode, flags) in RUNS.items():
        summary = train(
            recipe, DIGITS, Path(logdir) / name.replace(" ", "_").replace(",", ""), mode, **{**FLAGS, **flags}
        )
        hashes[name] = summary["summary"]["params_sha256"]
        hashes[f"{name}: bits"] = summary["summary"]["kernels"]["bits"]
    name, (recipe, mode, flags), first, then = RESUMED
    resumed = Path(logdir) / "resumed"
    train(recipe, DIGITS, resumed, mode, num_workers=first, **{**FLAGS, **flags})
    hashes[name] = train(recipe, DIGITS, resumed, mode, num_workers=then, **{**FLAGS, **STRICT})["summary"][
        "params_sha256"
    ]
    return hashes


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as logdir:
        print(json.dumps(train_all(logdir)))
