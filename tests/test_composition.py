"""Techniques compose by their declarations (techniques/rules.py): every pair either is refused with one
line naming both, or runs with both taking effect, each seen through an observable of its own.

A new technique gets this coverage by adding its smallest enabling flags to ENABLE and its observable
to OBSERVE; the first tests fail until it does.
"""

import ast
import inspect
import itertools
import re

import numpy as np
import pytest
from absl import flags
from conftest import REPO
from inprocess import train

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.data.sharding import Dataset
from parallel_tf.errors import ConfigError
from parallel_tf.training import task_flags, techniques
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.techniques import rules
from parallel_tf.training.train_graph import MODES

STEPS, WORKERS, DELAY_MS = 4, 2, 20
# Each technique's smallest non-default flags that switch it on with 2 workers and 4 steps.
ENABLE = {
    "backup_workers": {"replicas_to_aggregate": 1},
    "local_updates": {"fetch_every": 2},  # on by default; it takes effect between fetches
    "staleness_aware": {"staleness_aware": True},
    "softsync": {"softsync": 1},
    "bounded_staleness": {"max_staleness": 0},
    "delay_compensation": {"delay_compensation": 0.5},
    "adaptive_delay_compensation": {"adaptive_delay_compensation": 0.5},
    "local_sgd": {"local_steps": 2},
    "easgd": {"easgd_alpha": 0.25, "easgd_period": 2},
    "compression": {"gradient_compression": "8bit"},
    "clipping": {"clip_norm": 1e-6},  # below any gradient's norm: every update is clipped
    "stragglers": {"worker_delay_ms": f"0:{DELAY_MS}"},  # the chief, whose step time the summary gives
}
PUSHES = WORKERS * STEPS  # async: every worker pushes every step (no enabling flag changes --push_every)


def _applied_r_per_step(s):
    """Each step applies the gradients in when the chief takes them: at least R = 1, at most N."""
    assert 1 * STEPS <= s["gradients_applied"] <= WORKERS * STEPS


def _counted_each_local_update(s):
    assert s["local_updates_applied"] == STEPS


def _scaled_some_pushes(s):
    assert 0 < s["staleness_aware_pushes"] <= PUSHES


def _queued_every_push(s):
    assert s["softsync_pushes"] == PUSHES


def _clocks_within_s(s):
    assert 0 <= s["largest_clock_gap"] <= 0


def _compensated_every_push(s):
    assert sum(s["compensated_pushes"]) == PUSHES


def _exchanged_every_h_steps(s):
    assert s["exchanges"] == STEPS // 2


def _elastic_exchanges(s):
    if s["mode"] == "sync":
        assert s["exchanges"] == STEPS // 2
    else:
        assert s["exchanges_by_worker"] == [STEPS // 2] * WORKERS


def _fewer_bytes_on_the_wire(s):
    """The chief's whole step sends less than its gradient would as float32 (128 bytes); 8bit is 32 + 4."""
    assert (s["bytes_per_push"], s["float_bytes_per_push"]) == (36, 128)
    assert s["bytes_sent_per_step"] < s["float_bytes_per_push"]


def _clipped_every_update(s):
    """Sync and all-reduce: the chief's STEPS updates; async: every push, or softsync's means of them."""
    if s["mode"] in ("sync", "allreduce"):
        assert s["clipped_updates"] == STEPS
    else:
        assert 0 < s["clipped_updates"] <= PUSHES


def _chief_paused(s):
    assert s["ms_per_step"] >= DELAY_MS


OBSERVE = {
    "backup_workers": _applied_r_per_step,
    "local_updates": _counted_each_local_update,
    "staleness_aware": _scaled_some_pushes,
    "softsync": _queued_every_push,
    "bounded_staleness": _clocks_within_s,
    "delay_compensation": _compensated_every_push,
    "adaptive_delay_compensation": _compensated_every_push,
    "local_sgd": _exchanged_every_h_steps,
    "easgd": _elastic_exchanges,
    "compression": _fewer_bytes_on_the_wire,
    "clipping": _clipped_every_update,
    "stragglers": _chief_paused,
}
NAMES = [t.TECHNIQUE.name for t in techniques.TECHNIQUES]
TWO_WORKERS = cluster_lib.parse({"cluster": {"ps": ["a:1"], "worker": ["a:2", "a:3"]}}, "test")
WORKERS_ONLY = cluster_lib.parse({"cluster": {"worker": ["a:2", "a:3"]}}, "test")
GROUPED = cluster_lib.parse(
    {"cluster": {"ps": ["a:1"], "local_ps": ["a:2"], "worker": ["a:3", "a:4"]}, "groups": [[0, 1]]}, "test"
)


DEFAULTS = task_flags.parse_run_args([])  # every run and mode-option flag at its defined default


def compose(mode, cluster=TWO_WORKERS, **given):
    """task_flags.compose, as a task calls it, on the defaults of `mode`'s options and `given`."""
    defaults = {name: DEFAULTS[name].value for name, scope in task_flags.MODE_OPTION_SCOPES.items() if mode in scope}
    values = {**defaults, "optimizer": DEFAULTS.optimizer, **given}
    return task_flags.compose(mode, cluster, values, set(given))


def test_every_technique_has_enabling_flags_and_an_observable():
    assert list(ENABLE) == list(OBSERVE) == NAMES


@pytest.mark.parametrize("technique", techniques.TECHNIQUES, ids=NAMES)
def test_a_declaration_says_what_its_module_defines(technique):
    """Its hooks are the module's functions of those names; its flags, the ones it defines; what it
    requires and conflicts with exists; what builds the graph calls only hooks of the mode."""
    declared = technique.TECHNIQUE
    assert {hook for hook in rules.HOOKS if inspect.isfunction(getattr(technique, hook, None))} == set(declared.hooks)
    scratch = flags.FlagValues()
    technique.define_flags(scratch)
    assert set(scratch) == set(declared.flags)
    assert set(declared.requires) <= set(task_flags.MODE_OPTION_SCOPES) | set(task_flags.COMPOSED_RUN_FLAGS)
    assert set(declared.conflicts) <= set(NAMES) - {declared.name}
    assert set(declared.calls) <= set(rules.HOOKS_OF_THE_MODE)


def _pairs():
    for mode in MODES:
        for a, b in itertools.combinations(NAMES, 2):
            yield mode, a, b


def _outcome(mode, a, b):
    """(None, composition) for a pair that runs in `mode`, or (the refusal's line, None)."""
    scopes = techniques.BY_NAME
    outside = [name for name in (a, b) if mode not in scopes[name].TECHNIQUE.modes]
    if outside:
        return f"--{scopes[outside[0]].TECHNIQUE.flags[0]} does not apply to --mode={mode}", None
    cluster = {"hierarchical": GROUPED, "allreduce": WORKERS_ONLY}.get(mode, TWO_WORKERS)
    try:
        return None, compose(mode, cluster, **ENABLE[a], **ENABLE[b])
    except ConfigError as e:
        return str(e), None


OUTCOMES = {pair: _outcome(*pair) for pair in _pairs()}
RUNS = [pair for pair, (refusal, _) in OUTCOMES.items() if refusal is None]


@pytest.mark.parametrize("mode, a, b", list(OUTCOMES), ids=[" ".join(p) for p in OUTCOMES])
def test_a_pair_is_refused_naming_both_or_composes_both(mode, a, b):
    """Refused by scope (the flag of a technique of another mode), or by the rules with one line that
    names both techniques' flags; otherwise both are on."""
    refusal, composition = OUTCOMES[mode, a, b]
    if composition:
        assert composition.names == (a, b)
        return
    assert "\n" not in refusal
    if "does not apply to" not in refusal:
        for name in (a, b):
            assert f"--{techniques.BY_NAME[name].TECHNIQUE.flags[0]}" in refusal or _implied_by(name, refusal)


def _implied_by(name, refusal):
    """Local updates are switched on by --fetch_every, which the line names instead."""
    return name == "local_updates" and "--fetch_every" in refusal


class Matrix:
    """A recipe with one 8x4 weight matrix (128 bytes as float32) on 4 examples of 8 features."""

    RECIPE = Recipe(
        name="matrix",
        model_fn=lambda features, num_classes: tf.matmul(
            features, tf.get_variable("w", [8, num_classes], initializer=tf.zeros_initializer())
        ),
        datasets={},
    )
    X = np.arange(32, dtype=np.float32).reshape(4, 8) / 32
    Y = np.array([0, 1, 2, 3])
    DATA = Dataset(X, Y, X, Y, num_classes=4, name="matrix")


@pytest.mark.inprocess
@pytest.mark.parametrize("mode, a, b", RUNS, ids=[" ".join(p) for p in RUNS])
def test_both_techniques_of_a_pair_take_effect(tmp_path, mode, a, b):
    flags_of_pair = {**ENABLE[a], **ENABLE[b]}
    run = train(Matrix.RECIPE, Matrix.DATA, tmp_path, mode, train_steps=STEPS, global_batch_size=4, **flags_of_pair)
    summary = run["summary"]
    assert summary["techniques"] == [a, b]
    OBSERVE[a](summary)
    OBSERVE[b](summary)


# The pairs the rules refuse (the others outside scope are refused for a technique's mode): a rule that
# changes shows here. `pytest -s -k count_of_pairs` prints each with its line.
RUN, REFUSED = 36, 228  # of the 264 mode × pair combinations; docs/modes-and-techniques.md quotes them
REFUSED_BY_RULES = {
    ("sync", "backup_workers", "local_sgd"),
    ("sync", "backup_workers", "easgd"),
    ("sync", "backup_workers", "compression"),
    ("sync", "local_sgd", "easgd"),
    ("sync", "local_sgd", "compression"),
    ("sync", "easgd", "compression"),
    ("sync", "backup_workers", "clipping"),
    ("sync", "local_sgd", "clipping"),
    ("sync", "easgd", "clipping"),
    ("async", "local_updates", "softsync"),
    ("async", "local_updates", "bounded_staleness"),
    ("async", "local_updates", "delay_compensation"),
    ("async", "local_updates", "easgd"),
    ("async", "staleness_aware", "easgd"),
    ("async", "softsync", "bounded_staleness"),
    ("async", "softsync", "delay_compensation"),
    ("async", "softsync", "easgd"),
    ("async", "bounded_staleness", "easgd"),
    ("async", "delay_compensation", "easgd"),
    ("async", "easgd", "compression"),
    ("async", "local_updates", "adaptive_delay_compensation"),
    ("async", "softsync", "adaptive_delay_compensation"),
    ("async", "delay_compensation", "adaptive_delay_compensation"),
    ("async", "adaptive_delay_compensation", "easgd"),
    ("async", "easgd", "clipping"),
}


def test_the_count_of_pairs():
    refused = {pair: refusal for pair, (refusal, _) in OUTCOMES.items() if refusal}
    by_rules = {pair: refusal for pair, refusal in refused.items() if "does not apply to" not in refusal}
    for (mode, a, b), refusal in by_rules.items():
        print(f"refused {mode:6} {a} + {b}: {refusal}")
    print(f"{len(RUNS)} pairs run, {len(refused)} refused ({len(by_rules)} by the rules), of {len(OUTCOMES)}")
    assert set(by_rules) == REFUSED_BY_RULES
    assert (len(RUNS), len(refused)) == (RUN, REFUSED)


FOUR_WORKERS = cluster_lib.parse({"cluster": {"ps": ["a:1"], "worker": ["a:2", "a:3", "a:4", "a:5"]}}, "test")


@pytest.mark.parametrize(
    "mode, cluster, given, line",
    [
        (
            "sync",
            TWO_WORKERS,
            {"replicas_to_aggregate": 1, "gradient_compression": "8bit"},
            "--replicas_to_aggregate=1 needs --aggregation=accumulator and --gradient_compression=8bit needs "
            "--aggregation=ordered: they do not go together",
        ),
        (
            "async",
            TWO_WORKERS,
            {"max_staleness": 0, "push_every": 2},
            "--max_staleness=0 needs --push_every=1, not --push_every=2: SSP's clocks count steps",
        ),
        (
            "sync",
            FOUR_WORKERS,
            {"easgd_alpha": 0.5, "easgd_period": 1},
            "--easgd_alpha=0.5 with 4 sync workers: each exchange scales the copies' distance to the centre by "
            "1 - (N+1)α = -1.5, which diverges; α must be below 2/(N+1) = 0.4",
        ),
        (
            "hierarchical",
            GROUPED,
            {"optimizer": "adam", "central_every": 4},
            "--central_every=4 with --optimizer=adam: the central ps would take one adam step on the group's "
            "summed gradients, not the group's 4 steps",
        ),
    ],
    ids=["backup workers with 8bit", "SSP pushing every 2", "EASGD alpha 0.5 on 4 sync workers", "hierarchical adam"],
)
def test_the_cases_that_trained_something_else_are_refused_with_one_line(mode, cluster, given, line):
    with pytest.raises(ConfigError) as refused:
        compose(mode, cluster, **given)
    assert str(refused.value).startswith(line)


@pytest.mark.parametrize(
    "num_workers, alpha, refused", [(4, 0.4, True), (4, 0.39, False), (3, 0.5, True), (2, 0.5, False), (1, 0.5, False)]
)
def test_sync_easgd_alpha_is_bounded_by_2_over_n_plus_1(num_workers, alpha, refused):
    """|1 - (N+1)α| < 1: α < 0.4 for 4 workers, 0.5 for 3, 0.667 for 2 (where 0.5, the flag's own bound, goes)."""
    spec = {"cluster": {"ps": ["a:1"], "worker": [f"a:{2 + i}" for i in range(num_workers)]}}
    cluster = cluster_lib.parse(spec, "test")
    if refused:
        with pytest.raises(ConfigError, match="α must be below 2/\\(N\\+1\\)"):
            compose("sync", cluster, easgd_alpha=alpha)
    else:
        assert compose("sync", cluster, easgd_alpha=alpha).names == ("easgd",)


def test_hierarchical_takes_any_optimizer_when_every_group_step_reaches_the_centre():
    assert compose("hierarchical", GROUPED, optimizer="adam", central_every=1).names == ()
    assert compose("hierarchical", GROUPED, optimizer="sgd", central_every=4).names == ()


def test_a_required_value_the_user_did_not_give_is_the_runs():
    """Backup workers aggregate in arrival order: --aggregation=accumulator, unless the user said otherwise."""
    assert compose("sync", replicas_to_aggregate=1).settled == {
        "aggregation": "accumulator",
        "strict_determinism": False,
    }


@pytest.mark.parametrize(
    "given", [{"max_staleness": 0}, {"worker_delay_ms": "0:20"}, {"fetch_every": 2}], ids=["SSP", "straggler", "local"]
)
def test_the_techniques_that_read_as_a_step_begins_settle_noprefetch(given):
    """SSP's gate, a straggler's pause and a local update come before a worker's read: --prefetch would read
    at the end of the step before. Given anyway, it is refused."""
    assert compose("async", **given).settled["prefetch"] is False
    assert compose("async").settled == {}  # plain async prefetches
    with pytest.raises(ConfigError, match="needs --noprefetch, not --prefetch"):
        compose("async", **given, prefetch=True)


def _settings(**fields):
    base = dict(mode="sync", job_name="worker", task_index=0, cluster=TWO_WORKERS, global_batch_size=120)
    base.update(train_steps=4, learning_rate=0.1, optimizer="sgd", seed=0, logdir=None, dataset="test")
    return {**base, **fields}


@pytest.mark.parametrize(
    "fields, given, line",
    [
        ({"global_batch_size": 7}, set(), "--global_batch_size=7 is not divisible by the worker count 2"),
        ({"microbatches": 4}, {"microbatches"}, "--microbatches applies only with --strict_determinism"),
        (
            {"strict_determinism": True, "aggregation": "accumulator"},
            {"strict_determinism", "aggregation"},
            "--strict_determinism sums in a fixed order: it needs --aggregation=ordered",
        ),
        (
            {"options": {**techniques.default_options(), "replicas_to_aggregate": 1, "local_steps": 2}},
            {"replicas_to_aggregate", "local_steps"},
            "--replicas_to_aggregate=1 needs --aggregation=accumulator and --local_steps=2 needs --aggregation=ordered",
        ),
    ],
)
def test_settings_are_checked_as_the_launcher_checks_the_run(fields, given, line):
    """run_settings and the tools' check_run_fits are one check (check_run): Settings a command line
    would be refused cannot be made, in a task or a test."""
    with pytest.raises(ConfigError, match=re.escape(line)):
        task_flags.run_settings(given, **_settings(**fields))


def test_settings_are_made_only_by_run_settings():
    """Every Settings(...) in the package, the recipes and the tests is the one inside run_settings."""
    sources = [*(REPO / "parallel_tf").rglob("*.py"), *(REPO / "recipes").glob("*.py"), *(REPO / "tests").glob("*.py")]
    makers = {
        f"{path.relative_to(REPO)}:{where}"
        for path in sources
        for where in _settings_makers(ast.parse(path.read_text()))
    }
    assert makers == {"parallel_tf/training/task_flags.py:run_settings"}


def _settings_makers(node, function="<module>"):
    """The names of the functions (innermost) under `node` that call Settings(...)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Settings":
        yield function
    inner = node.name if isinstance(node, ast.FunctionDef) else function
    for child in ast.iter_child_nodes(node):
        yield from _settings_makers(child, inner)
