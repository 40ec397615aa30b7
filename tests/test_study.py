"""Sync mode's reproducibility promises, checked as a user would check them: with the study tool.

A study runs the one-process reference and several real clusters one after another. (How one worker
compares with the one process and with three workers, and strict determinism across worker counts,
are checked on in-process clusters: test_equalities.py.)"""

import json
import os
import signal

import pytest
from conftest import study_command

pytestmark = pytest.mark.cluster

STEPS = ["--train_steps=20", "--log_every=5"]
STUDY_TIMEOUT = 600


def study(procs, out, *args):
    run = procs.start(study_command(f"--out={out}", *args, *STEPS))
    assert run.wait(STUDY_TIMEOUT) == 0, run.output
    return run, json.loads((out / "report.json").read_text())


def test_ordered_sync_repeats_bitwise_on_two_workers(procs, tmp_path):
    out = tmp_path / "study"
    run, report = study(procs, out, "--workers=2", "--repeats=2")
    sync = report["verdicts"]["sync"]
    assert sync["repeats_identical"]
    assert [row["workers"] for row in report["runs"]] == [2, 2]
    assert len(report["reference"]["params_sha256"]) == 64
    assert "[study] sync: repeats identical: yes" in run.output
    assert "[study] 3/3 sync-2w-r2 done" in run.output  # progress, run by run
    # The cluster runs fork their tasks from the study's warm server: TensorFlow loaded once for both
    for name in ("sync-2w-r1", "sync-2w-r2"):
        assert "[launch] forking the 3 tasks in a fork server (pid" in (out / "runs" / f"{name}.log").read_text()
    table = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| sync |")]
    assert len(table) == 2
    assert (out / "loss_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The chief sends at least the MLP's gradient, 9610 float32, every step; the reference nothing.
    assert all(row["bytes_sent_per_step"] >= 38440 for row in report["runs"])
    assert report["reference"]["bytes_sent_per_step"] == 0
    megabytes = report["runs"][0]["megabytes_sent"]
    assert megabytes == sorted(megabytes) and megabytes[-1] > 0
    # Held out and drift, every --log_every (5) steps: both repeats the same, within sync's promise of the reference.
    held_out = [[(step, loss, accuracy) for step, _, loss, accuracy in row["held_out"]] for row in report["runs"]]
    assert [step for step, _, _ in held_out[0]] == [5, 10, 15, 20] and held_out[0] == held_out[1]
    assert [step for step, _ in report["runs"][0]["distances"]] == [5, 10, 15, 20]
    assert report["runs"][0]["distances"] == report["runs"][1]["distances"]
    assert all(difference <= 1e-5 for _, difference in report["runs"][0]["distances"])
    assert (out / "drift.png").read_bytes()[:4] == (out / "held_out.png").read_bytes()[:4] == b"\x89PNG"


def test_study_refuses_an_out_dir_holding_a_report(procs, tmp_path):
    (tmp_path / "report.json").write_text("{}")
    run = procs.start(study_command(f"--out={tmp_path}"))
    assert run.wait(60) == 2
    assert run.lines == [f"error: --out={tmp_path} already holds a study's results (report.json); choose another --out"]
    assert (tmp_path / "report.json").read_text() == "{}"


def test_ctrl_c_stops_a_study_with_one_line_naming_its_report(procs, tmp_path):
    """Ctrl-C during a run: the run is killed with the study, which says where the runs finished so far are
    (exit 130, no traceback), as the bench does."""
    out = tmp_path / "study"
    run = procs.start(study_command(f"--out={out}", *STEPS))
    run.wait_for_line(r"^\[study\] 1/\d+ reference \.\.\.$", 60)
    os.kill(run.proc.pid, signal.SIGINT)
    assert run.wait(30) == 128 + signal.SIGINT
    assert run.lines[-1] == f"[study] interrupted; the runs finished so far are in {out / 'report.md'}"
    assert "Traceback" not in run.output


def test_study_refuses_a_bad_run_flag_before_any_run(procs, tmp_path):
    run = procs.start(study_command(f"--out={tmp_path}", "--train_steps=0"))
    assert run.wait(120) == 2
    assert run.lines == ["error: flag --train_steps=0: 0 is not a positive integer"]


def test_study_stops_at_a_recipe_flag_the_runs_refuse_with_their_one_line(procs, tmp_path):
    """Refused as the recipe's flag check says, before the first run: one line, and no study directory."""
    out = tmp_path / "study"
    run = procs.start(study_command(f"--out={out}", "--model=rnn"))
    assert run.wait(120) == 2
    assert run.lines == ["error: flag --model=rnn: value should be one of <mlp|cnn>"]
    assert not out.exists()


@pytest.mark.parametrize(
    "variants, error",
    [
        (
            "nope --push_every=2",
            "--variants: 'nope --push_every=2' must start with a mode, one of sync, async, hierarchical",
        ),
        ("async push_every=2", "--variants: 'async push_every=2': after the mode, only --flags"),
    ],
)
def test_study_refuses_a_variant_that_is_not_a_mode_and_flags(procs, tmp_path, variants, error):
    run = procs.start(study_command(f"--out={tmp_path}", f"--variants={variants}"))
    assert run.wait(60) == 2
    assert run.lines[0].startswith(f"error: {error}") and len(run.lines) == 1


def test_study_refuses_a_variant_flag_of_another_mode_before_any_run(procs, tmp_path):
    run = procs.start(study_command(f"--out={tmp_path}", "--variants=async;sync --staleness_aware"))
    assert run.wait(60) == 2
    assert run.lines == [
        "error: --variants: 'sync --staleness_aware': --staleness_aware does not apply to --mode=sync; "
        "it is for --mode=async"
    ]
    assert not (tmp_path / "runs").exists()


def test_study_counts_an_allreduce_variants_workers_without_a_ps(procs, tmp_path):
    """The fit check lays out each variant's cluster as its launcher will: all-reduce has workers only."""
    variants = "allreduce --strict_determinism --microbatches=3"
    run = procs.start(study_command(f"--out={tmp_path}", f"--variants={variants}", "--workers=1,2"))
    assert run.wait(60) == 2
    assert run.lines == [
        f"error: variant '{variants}' on 2 workers: --microbatches=3 is not divisible by the worker count 2; "
        "strict determinism needs whole microbatches per worker"
    ]
