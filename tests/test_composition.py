"""Declarations compose (training/rules.py): techniques (techniques/) and options (options/), every flag that
changes what a run computes. In every mode, each pair of declarations either is refused with one line naming
both, or runs with both taking effect, each seen through an observable of its own, at values where the two
interact (softsync at 2 of 2 workers, backup workers taking 1 of 2, a warm-up still under way), and ends
about as well as either alone.

A new technique or option gets this coverage by adding its enabling flags to ENABLE and its observable to
OBSERVE; the first test fails until it does.
"""

import ast
import dataclasses
import inspect
import itertools
import math
import multiprocessing
import re
import traceback
from pathlib import Path

import numpy as np
import pytest
from absl import flags
from conftest import REPO
from inprocess import train

from parallel_tf import compat
from parallel_tf.backports import zip_strict
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.compat import tf
from parallel_tf.data.sharding import Dataset
from parallel_tf.errors import ConfigError
from parallel_tf.graph import products
from parallel_tf.training import (
    declarations,
    hook_types,
    modes,
    options,
    rules,
    run_check,
    run_flags,
    run_options,
    seams,
    techniques,
)
from parallel_tf.training import settings as settings_lib
from parallel_tf.training.declarations import SEAMS
from parallel_tf.training.recipe import Recipe
from parallel_tf.training.techniques import clipping

STEPS, WORKERS, BATCH, DELAY_MS, RATE = 4, 2, 4, 20, 0.5
WARMUP, DECAY_EVERY, DECAY, SCALED_FROM = 100, 2, 0.5, 2  # the schedule options' values: see _scheduled_rate
# Each declaration's non-default flags that switch it on with 2 workers and 4 steps, at values where it acts on
# what the other declaration of a pair does.
ENABLE = {
    "backup_workers": {"replicas_to_aggregate": 1},
    "local_updates": {"fetch_every": 2},  # on by default; it takes effect between fetches
    "staleness_aware": {"staleness_aware": True},
    "softsync": {"softsync": 2},  # every push its own update, at α/2 under staleness-aware rates
    "bounded_staleness": {"max_staleness": 0},
    "delay_compensation": {"delay_compensation": 0.5},
    "adaptive_delay_compensation": {"adaptive_delay_compensation": 0.5},
    "local_sgd": {"local_steps": 2},
    "easgd": {"easgd_alpha": 0.25, "easgd_period": 2},
    "compression": {"gradient_compression": "8bit"},
    "powersgd": {"powersgd_rank": 1},
    "clipping": {"clip_norm": 1e-6},  # below any gradient's norm: every update is clipped
    "stragglers": {"worker_delay_ms": f"0:{DELAY_MS}"},  # the chief, whose step time the summary gives
    "warmup": {"warmup_steps": WARMUP},  # longer than any run here: every update is warming up
    "lr_decay": {"lr_schedule": "step", "lr_decay_steps": DECAY_EVERY, "lr_decay_rate": DECAY},
    "linear_scaling": {"linear_scaling_batch": SCALED_FROM},  # k = 4 / 2
    "eval_every": {"eval_every": 2},
    "strict_determinism": {"strict_determinism": True, "microbatches": 4},
    "steps_per_run": {"steps_per_run": 2},
    "link": {"link_rate": "100mbit"},
    "aggregation": {"aggregation": "accumulator"},
    "pipeline": {"pipeline_pieces": 2},
    "push_every": {"push_every": 2},
    "fetch_every": {"fetch_every": 2},
    "prefetch": {"prefetch": True},  # async's default, given: a pair that cannot prefetch is refused
    "central_every": {"central_every": 2},
    "allreduce_buckets": {"allreduce_bucket_mb": 1e-6},  # a bucket a variable: the matrix's one
    "allreduce_transport": {"allreduce_transport": "float16"},
}


def _pushes(s):
    """Async: every worker pushes every --push_every steps."""
    return WORKERS * math.ceil(STEPS / s.get("push_every", 1))


def _applied_r_per_step(s):
    """Each step applies the gradients of R = 1 distinct worker; the other's are dropped."""
    assert s["gradients_applied"] == STEPS
    assert sum(s["gradients_applied_by_worker"]) + s["stale_gradients_dropped"] >= STEPS


def _counted_each_local_update(s):
    assert s["local_updates_applied"] == STEPS


def _scaled_some_pushes(s):
    assert 0 < s["staleness_aware_pushes"] <= _pushes(s)


def _queued_every_push(s):
    assert s["softsync_pushes"] == _pushes(s)


def _clocks_within_s(s):
    assert 0 <= s["largest_clock_gap"] <= 0


def _compensated_every_push(s):
    assert sum(s["compensated_pushes"]) == _pushes(s)


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
        assert 0 < s["clipped_updates"] <= _pushes(s)


def _chief_paused(s):
    """Before each step it ran (with backup workers, the steps applied without it are skipped), and its
    training took at least its pauses."""
    assert 0 < s["straggler_pauses"] <= STEPS
    assert s["ms_per_step"] * STEPS >= DELAY_MS * s["straggler_pauses"]


def _scheduled_rate(s):
    """The rate the next update would take, logged at the run's last update u (the global step), worked out
    from the options on: k = 4/2 = 2 with linear scaling; warm-up over W = 100 updates from 0, base·(u+1)/W,
    or with linear scaling from η to kη, η + (kη − η)·u/W; step decay × ½ every 2 updates from update 0."""
    on, u = s["declared"], s["global_step"]
    k = BATCH / SCALED_FROM if "linear_scaling" in on else 1
    rate = RATE * k
    if "warmup" in on:
        rate = RATE + (rate - RATE) * u / WARMUP if "linear_scaling" in on else rate * (u + 1) / WARMUP
    if "lr_decay" in on:
        rate *= DECAY ** (u // DECAY_EVERY)
    assert s["scheduled_rate"] == pytest.approx(rate, rel=1e-6)


def _evaluated_every_2_steps(run):
    assert sum("eval_accuracy" in line for line in run["metrics"]) == STEPS // 2


def _accumulated(s):
    assert s["accumulator_updates"] == STEPS


def _microbatched(s):
    assert s["microbatch_passes"] == 4 // WORKERS


def _one_session_run_per_2_steps(s):
    assert s["session_runs"] == STEPS // 2 + _runs_before_the_first_step(s)


def _runs_before_the_first_step(s):
    """An async worker's first run fetches its copy, and SSP's first gate is a run before that."""
    return (s["mode"] == "async") + ("bounded_staleness" in s["declared"])


def _pushed_every_2_steps(s):
    assert sum(s["updates_by_worker"]) == WORKERS * STEPS // 2


def _fetched_every_2_steps(s):
    """A worker reads every second step: half of a read's bytes a step on the chief, a read being w's 128
    and the 8 of the global step it was read at (staleness counts from it)."""
    assert s["bytes_received_per_step"] == (Matrix.BYTES + 8) / 2


def _one_session_run_a_step(s):
    """The refresh for the next step rides in this step's run: one run a step (or a loop's run of steps,
    --steps_per_run, automatic where it composes), and the runs before the first step."""
    steps_a_run = s["declared"].get("steps_per_run", {}).get("steps_per_run", 1)
    assert s["session_runs"] == STEPS // steps_a_run + _runs_before_the_first_step(s)


def _pulled_piece_by_piece(s):
    """The matrix is one variable on one server: one piece, however many --pipeline_pieces allow (a server's
    variables are cut between them, never a variable), pushed and pulled on its own each step."""
    assert s["pipelined_pieces"] == 1


def _central_every_2_steps(s):
    assert s["central_exchanges_by_group"] == [STEPS // 2]


def _a_bucket_for_each_tensor_summed(s):
    """A bucket for each tensor the ring sums: the matrix, or with PowerSGD its P and its Q."""
    assert s["allreduce_buckets"] == (2 if "powersgd" in s["declared"] else 1)


def _half_the_gradient_bytes(s):
    """2 workers: the ring sends (N−1)/N of a vector twice, one vector each way: w's 32 floats, or with PowerSGD
    its P (8) and Q (4), in float16, and the two workers' losses in float32 (8 bytes)."""
    floats = 8 + 4 if "powersgd" in s["declared"] else Matrix.BYTES // 4
    assert s["bytes_sent_per_step"] == floats * 2 + 8


def _rank_1_factors(s):
    """The 8x4 matrix as P (8 floats) and Q (4), and the two losses: 56 bytes each way with 2 workers, or 32 with
    the factors in a half-precision transport."""
    factor_bytes = 2 if "allreduce_transport" in s["declared"] else 4
    assert (s["powersgd_matrices"], s["bytes_sent_per_step"]) == (1, (8 + 4) * factor_bytes + 8)


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
    "powersgd": _rank_1_factors,
    "clipping": _clipped_every_update,
    "stragglers": _chief_paused,
    "warmup": _scheduled_rate,
    "lr_decay": _scheduled_rate,
    "linear_scaling": _scheduled_rate,
    "eval_every": _evaluated_every_2_steps,
    "strict_determinism": _microbatched,
    "steps_per_run": _one_session_run_per_2_steps,
    "link": None,  # only the launcher shapes a link: tests/test_links.py observes it there
    "aggregation": _accumulated,
    "pipeline": _pulled_piece_by_piece,
    "push_every": _pushed_every_2_steps,
    "fetch_every": _fetched_every_2_steps,
    "prefetch": _one_session_run_a_step,
    "central_every": _central_every_2_steps,
    "allreduce_buckets": _a_bucket_for_each_tensor_summed,
    "allreduce_transport": _half_the_gradient_bytes,
}
OF_THE_RUN = {_evaluated_every_2_steps}  # observables that read the whole run (its metrics), not its summary
DECLARATIONS = run_check.DECLARATIONS
NAMES = [d.name for d in DECLARATIONS]
BY_NAME = dict(zip_strict(NAMES, DECLARATIONS))
TWO_WORKERS = cluster_lib.parse({"cluster": {"ps": ["a:1"], "worker": ["a:2", "a:3"]}}, "test")
WORKERS_ONLY = cluster_lib.parse({"cluster": {"worker": ["a:2", "a:3"]}}, "test")
GROUPED = cluster_lib.parse(
    {"cluster": {"ps": ["a:1"], "local_ps": ["a:2"], "worker": ["a:3", "a:4"]}, "groups": [[0, 1]]}, "test"
)
CLUSTERS = {"hierarchical": GROUPED, "allreduce": WORKERS_ONLY}


DEFAULTS = run_flags.parse_run_args([])  # every run and mode-option flag at its defined default


def compose(mode, cluster=TWO_WORKERS, **given):
    """run_check.check_run, as a task calls it, on the defaults of every run and mode-option flag and `given`."""
    values = {**{name: DEFAULTS[name].value for name in DEFAULTS}, **given}
    return run_check.check_run(mode, cluster, values, set(given))


def test_every_declaration_has_enabling_flags_and_an_observable():
    assert list(ENABLE) == list(OBSERVE) == NAMES


@pytest.mark.parametrize("technique", techniques.TECHNIQUES, ids=[t.TECHNIQUE.name for t in techniques.TECHNIQUES])
def test_a_technique_s_declaration_says_what_its_module_defines(technique):
    """Its hooks are the module's functions of those names, or the methods of its HOOKS (a seams.OfOneGraph, where
    they share graph state); its flags, the ones it defines; what it requires and conflicts with exists; what builds
    the graph calls only hooks of the mode."""
    declared = technique.TECHNIQUE
    hooks = getattr(technique, "HOOKS", technique)
    assert hooks is technique or isinstance(hooks, seams.OfOneGraph)
    defined = {hook for hook in declarations.HOOKS if inspect.isroutine(getattr(hooks, hook, None))}
    assert defined == set(declared.hooks)
    assert not {hook for hook in declarations.HOOKS if hooks is not technique and hasattr(technique, hook)}
    _defines_its_flags(technique)
    assert set(declared.calls) <= set(declarations.HOOKS_OF_THE_MODE)


@pytest.mark.parametrize("declared", run_check.DECLARATIONS, ids=[d.name for d in run_check.DECLARATIONS])
def test_every_hook_takes_its_seam_s_arguments(declared):
    """Each function a declaration fills a seam with takes the arguments of that seam's interface (seams.py), by
    name, in order: a hook written against another signature fails here, not in the run that first calls it."""
    for seam in declared.hooks:
        function = getattr(run_check.HOOKS_OF[declared.name], seam)
        wanted = list(inspect.signature(getattr(seams.INTERFACES[seam], seam)).parameters)[1:]  # without self
        assert list(inspect.signature(function).parameters) == wanted, f"{declared.name}.{function.__name__}"


def test_a_runs_options_are_every_declarations_typed_fields():
    """run_options.Options has each declaration's Options as a base, in the declarations' order, and no other, so
    settings.options holds every declared flag; each field's default is its absl flag's as Settings holds it (a
    list flag's a tuple), and its annotation says its flag's type."""
    assert run_options.Options.__bases__ == tuple(d.options for d in DECLARATIONS)
    fields = {field.name: field for field in dataclasses.fields(run_options.Options)}
    assert set(fields) == set(run_check.DECLARED_SCOPES)
    defaults = run_check.flag_defaults()
    assert {name: field.default for name, field in fields.items()} == {name: defaults[name] for name in fields}
    kinds = {
        "int": "int",
        "float": "float",
        "bool": "bool",
        "string": "str",
        "string enum": "str",
        "comma separated list of strings": "tuple",
    }
    for name, field in fields.items():
        kind = kinds[run_check.defined_flags()[name].flag_type()]
        said = getattr(field.type, "__name__", field.type)  # a type, or its name where annotations are postponed
        assert said == (f"{kind} | None" if field.default is None else kind), name


def test_mypy_sees_every_hook_bound_to_its_seam_s_interface():
    """training/hook_types.py binds <declaration>_<seam> to the seam's Protocol for every hook a declaration names,
    and nothing else, so mypy checks each one (deleting stragglers' wrap fails it: 'expression has type Module,
    variable has type "Wrap"'; clipping's, 'expression has type "Clipping"': tests/test_types.py)."""
    wanted = {
        f"{d.name}_{seam}": (seams.INTERFACES[seam], run_check.HOOKS_OF[d.name])
        for d in DECLARATIONS
        for seam in d.hooks
    }
    bound = {name: (kind, getattr(hook_types, name)) for name, kind in hook_types.__annotations__.items()}
    assert bound == wanted


@pytest.mark.parametrize("option", run_flags.OPTIONS, ids=[o.OPTION.name for o in run_flags.OPTIONS])
def test_an_option_s_declaration_says_what_its_module_defines(option):
    """As a technique's: its hooks (all-reduce's reduce, where it has one) are the module's functions."""
    assert {hook for hook in declarations.HOOKS if inspect.isfunction(getattr(option, hook, None))} == set(
        option.OPTION.hooks
    )
    _defines_its_flags(option)


@pytest.mark.parametrize("mode", modes.CLUSTER_MODES, ids=[m.MODE.name for m in modes.CLUSTER_MODES])
def test_a_mode_s_own_options_are_of_that_mode_alone_and_live_in_its_package(mode):
    """An option one mode takes is its mode's (Mode.options, in its package); options/ keeps those modes share."""
    for option in mode.MODE.options:
        assert option.OPTION.modes == (mode.MODE.name,) and option.__name__.startswith(f"{mode.__name__}.")
    of_one = [o for o in options.OPTIONS if not isinstance(o.OPTION.modes, declarations.EveryMode)]
    shared = [o.OPTION.name for o in of_one if len(o.OPTION.modes) == 1]
    assert not shared, shared


def test_an_option_with_a_hook_that_only_a_technique_s_module_is_asked_for_is_refused_where_it_is_declared():
    """The mode hooks, `build` and `wrap` are applied from the techniques alone: an option declaring one would
    have it silently never called."""
    with pytest.raises(AssertionError, match=r"an option's hooks are \('reduce',\), not \['wrap'\]"):
        declarations.Option(name="o", flags=("o",), modes=("sync",), hooks=("wrap",))


def _defines_its_flags(module):
    declared = getattr(module, "TECHNIQUE", None) or module.OPTION
    scratch = flags.FlagValues()
    declared.define_flags(module.__name__, scratch)  # owned by its module, where --help lists them
    assert sorted(flag.name for flag in scratch.flags_by_module_dict()[module.__name__]) == sorted(declared.flags)
    assert set(declared.requires) <= {*run_check.DECLARED_SCOPES, *run_flags.CORE_RUN_FLAGS}
    assert set(declared.conflicts) <= set(NAMES) - {declared.name}
    assert isinstance(declared.modes, declarations.EveryMode) or set(declared.modes) <= {
        options.NO_CLUSTER,
        *modes.NAMES,
    }


# What this TensorFlow cannot run, refused for it alone, not for the pair (1.15: a half-precision ring, whose
# refusal names its own flag): its pairs are left out here, and the 2.x suite composes them.
NOT_ON_THIS_TENSORFLOW = {"allreduce_transport"} if compat.tensorflow_1() else set()


def _pairs():
    for mode in modes.NAMES:
        for a, b in itertools.combinations(NAMES, 2):
            if not NOT_ON_THIS_TENSORFLOW & {a, b}:
                yield mode, a, b


def _outcome(mode, a, b):
    """(None, composition) for a pair that runs in `mode`, or (the refusal's line, None)."""
    try:
        return None, compose(mode, CLUSTERS.get(mode, TWO_WORKERS), **{**ENABLE[a], **ENABLE[b]})
    except ConfigError as e:
        return str(e), None


OUTCOMES = {pair: _outcome(*pair) for pair in _pairs()}
# A link changes only the time, and only the launcher's simulated hosts have one: its pairs compose here and
# train in tests/test_links.py, not on an in-process cluster, which has no network to shape.
SHAPED_ONLY = {name for name, observe in OBSERVE.items() if observe is None}
COMPOSED = [pair for pair, (refusal, _) in OUTCOMES.items() if refusal is None]
RUNS = [pair for pair in COMPOSED if not SHAPED_ONLY & set(pair)]


def _composed(*declarations, offered=()):
    """rules.compose of made-up declarations `declarations`, each switched on by its one flag, in mode "m"."""
    values = {d.flags[0]: 1 for d in declarations}
    return rules.compose(declarations, "m", None, values, set(values), dict.fromkeys(values, 0), offered)


def test_one_rule_refuses_a_second_owner_and_a_filler_of_a_closed_seam_and_chains_the_rest():
    """declarations.SEAMS, on made-up declarations: two encoders of what a worker sends are refused; two wraps chain;
    a seam a declaration closes is refused to its filler, the closer first; each only in a mode that offers the
    seam; an option's reduce hook and a technique's are two owners of the one reduction."""

    def declared(name, kind=declarations.Technique, **fields):
        return kind(name=name, flags=(name,), modes=("m",), **fields)

    a, b = declared("a", hooks=("transmit", "wrap")), declared("b", hooks=("transmit",))
    with pytest.raises(ConfigError, match="^--a=1 does not go with --b=1: both encode the gradients a worker sends$"):
        _composed(a, b, offered=("transmit",))
    assert _composed(a, b).names == ("a", "b")  # a mode whose step calls no transmit hook: neither is an owner
    assert _composed(a, declared("c", hooks=("wrap",))).names == ("a", "c")  # every mode has wrap
    closer = declared("d", declarations.Option, closes={"ring": "d sums its own way"})
    ring = declared("e", declarations.Option, fills=("ring",))
    with pytest.raises(ConfigError, match="^--d=1 does not go with --e=1: d sums its own way$"):
        _composed(ring, closer, offered=("ring",))
    assert _composed(ring, closer).options == ("e", "d")  # a mode without a ring: nothing to close
    builder = declared("f", hooks=("build",), calls=("transmit",))
    assert _composed(builder, b, offered=("transmit",)).names == ("f", "b")  # it calls the transmit hook
    with pytest.raises(ConfigError, match="^--f=1 does not go with --g=1: it builds its own m graph, which does not "):
        _composed(builder, declared("g", hooks=("optimizer",)), offered=("optimizer",))
    reducer, other = declared("h", declarations.Option, hooks=("reduce",)), declared("i", hooks=("reduce",))
    with pytest.raises(ConfigError, match="^--h=1 does not go with --i=1: each reduces the gradients its own way"):
        _composed(reducer, other, offered=("reduce",))  # an option's reduce hook and a technique's: one owner


@pytest.mark.parametrize("mode, a, b", list(OUTCOMES), ids=[" ".join(p) for p in OUTCOMES])
def test_a_pair_is_refused_naming_both_or_composes_both(mode, a, b):
    """Refused by scope (a flag of a declaration of other modes, named with the modes it is for), or by
    the rules with one line that names both declarations' flags; otherwise both are on."""
    refusal, composition = OUTCOMES[mode, a, b]
    if composition:
        assert {a, b} <= {*composition.names, *composition.options}
        return
    assert "\n" not in refusal
    if "does not apply to" in refusal:
        assert any(refusal.startswith(f"--{flag} does not apply to --mode={mode}") for flag in _flags(a, b))
    else:
        for name in (a, b):
            assert _names(name, refusal), (name, refusal)


def _flags(*names):
    return [flag for name in names for flag in ENABLE[name]]


def _names(name, refusal):
    """The line names the declaration by a flag of it, or by what switches it on (--fetch_every for local
    updates)."""
    return any(f"--{flag}" in refusal for flag in _flags(name)) or BY_NAME[name].switch in refusal


class Matrix:
    """A recipe with one 8x4 weight matrix (128 bytes as float32) on 4 examples of 8 features."""

    RECIPE = Recipe(
        name="matrix",
        model_fn=lambda features, num_classes: products.matmul(
            features, tf.get_variable("w", [8, num_classes], initializer=tf.zeros_initializer())
        ),
        datasets={},
    )
    BYTES = 8 * 4 * 4
    X = np.arange(32, dtype=np.float32).reshape(4, 8) / 32
    Y = np.array([0, 1, 2, 3])
    DATA = Dataset(X, Y, X, Y, num_classes=4, name="matrix")


def _train(logdir, mode, *names):
    flags_on = {flag: value for name in names for flag, value in ENABLE[name].items()}
    groups = [[0, 1]] if mode == "hierarchical" else None
    fields = dict(train_steps=STEPS, global_batch_size=BATCH, learning_rate=RATE, log_every=STEPS)
    return train(Matrix.RECIPE, Matrix.DATA, logdir, mode, groups=groups, **fields, **flags_on)


ALONE = {}  # {(mode, name): final loss of a run with that declaration alone}, trained once for every pair
# A pair ends no more than this much above the worse of its two alone (each starts at ln 4 = 1.386, and they
# end 0.6-1.4 after 4 steps): a sign or a scale wrong in the composition (a rate times n, not over n) shows.
# Wider than timing alone moves a run: backup workers taking 1 of 2 may apply the same worker's half of the
# batch every step (1.80, under load), where arrivals that alternate end at 1.27-1.34.
WORSE_BY = 0.6
# A declaration beside --eval_every trains what it trains alone (an evaluation reads the parameters and
# changes nothing: test_arithmetic.py), so those pairs run first and stand for it alone.
BESIDE_EVALUATIONS = "eval_every"
RUNS.sort(key=lambda pair: (modes.NAMES.index(pair[0]), BESIDE_EVALUATIONS not in pair))


@pytest.fixture(scope="module")
def trained(request, tmp_path_factory):
    """{pair: (its run, the worse final loss of its two declarations alone), or the traceback of its failure}, for
    the pairs of the pair test this session runs. A run's graph is built in Python, under one lock, on one core:
    so two processes train them, a share of the modes each, on the machine's two cores."""
    pairs = [
        tuple(item.callspec.params[name] for name in ("mode", "a", "b"))
        for item in request.session.items
        if getattr(item, "originalname", None)
        == test_both_declarations_of_a_pair_take_effect_and_train_as_well_as_either_alone.__name__
    ]
    root = str(tmp_path_factory.mktemp("pairs"))
    if len(pairs) < IN_THIS_PROCESS_BELOW:
        return _train_pairs(pairs, root)
    shares = _shares_of_whole_modes(pairs, PROCESSES)
    with multiprocessing.get_context("spawn").Pool(len(shares)) as pool:  # TensorFlow's threads forbid a fork
        trained = pool.starmap_async(_train_pairs, [(share, root) for share in shares]).get(PAIRS_TIMEOUT)
    return {pair: outcome for share in trained for pair, outcome in share.items()}


PROCESSES = 2
IN_THIS_PROCESS_BELOW = 20  # pairs: fewer (one picked with -k) train here, without a process's start
PAIRS_TIMEOUT = 900


def _shares_of_whole_modes(pairs, count):
    """`pairs` in `count` shares of about as many pairs each, a mode's all in one (its runs alone are trained once),
    each in the pairs' order."""
    by_mode = {mode: [pair for pair in pairs if pair[0] == mode] for mode in dict.fromkeys(p[0] for p in pairs)}
    shares = [[] for _ in range(count)]
    for mode in sorted(by_mode, key=lambda mode: -len(by_mode[mode])):
        min(shares, key=len).extend(by_mode[mode])
    return [sorted(share, key=pairs.index) for share in shares if share]


def _train_pairs(pairs, root):
    """Trains `pairs`, in order, each in a folder of its own under `root`; see `trained`."""
    outcomes = {}
    for mode, a, b in pairs:
        tmp_path = Path(root) / "-".join((mode, a, b))
        try:
            run = _train(tmp_path / "pair", mode, a, b)
            if BESIDE_EVALUATIONS in (a, b):
                ALONE.setdefault((mode, a if b == BESIDE_EVALUATIONS else b), run["summary"]["final_loss"])
            alone = max(_alone(tmp_path, mode, a), _alone(tmp_path, mode, b))
            outcomes[mode, a, b] = ({"summary": run["summary"], "metrics": run["metrics"]}, alone)
        except Exception:  # the pair's test fails with it; the other pairs go on
            outcomes[mode, a, b] = traceback.format_exc()
    return outcomes


@pytest.mark.inprocess
@pytest.mark.parametrize("mode, a, b", RUNS, ids=[" ".join(p) for p in RUNS])
def test_both_declarations_of_a_pair_take_effect_and_train_as_well_as_either_alone(trained, mode, a, b):
    outcome = trained[mode, a, b]
    assert not isinstance(outcome, str), outcome
    run, alone = outcome
    summary = run["summary"]
    for name in (a, b):
        assert name in summary["declared"]
        OBSERVE[name](run if OBSERVE[name] in OF_THE_RUN else summary)
    assert np.isfinite(summary["final_loss"]) and summary["final_loss"] <= alone + WORSE_BY, (summary, alone)


def _alone(tmp_path, mode, name):
    if (mode, name) not in ALONE:
        alone = [] if name == BESIDE_EVALUATIONS else [name]  # evaluations alone: the plain run's loss
        ALONE[mode, name] = _train(tmp_path / name, mode, *alone)["summary"]["final_loss"]
    return ALONE[mode, name]


# The pairs refused, and those of them refused by the rules (the others are refused for a declaration's modes):
# derived from the declarations, each run through the rules above; the docs quote their counts (test_docs.py).
REFUSALS = {pair: refusal for pair, (refusal, _) in OUTCOMES.items() if refusal}
BY_THE_RULES = {pair: refusal for pair, refusal in REFUSALS.items() if "does not apply to" not in refusal}


def test_the_rules_refuse_a_pair_only_for_a_reason_one_of_its_declarations_gives():
    """A refusal's reason is one its own declarations declare (rules.py): a conflict, a requirement and why, a
    seam it closes, or one a seam gives; or two requirements that differ. So no rule refuses a pair for a
    reason no declaration of the pair states, and a rule that changes shows in the counts the docs quote.
    `pytest -s -k refuse_a_pair_only` prints each with its line."""
    for (mode, a, b), refusal in BY_THE_RULES.items():
        print(f"refused {mode:6} {a} + {b}: {refusal}")
        assert refusal.split(": ", 1)[1] in _reasons(mode, _of_the_pair(mode, a, b)), (mode, a, b, refusal)
    print(
        f"{len(RUNS)} pairs run, {len(COMPOSED) - len(RUNS)} composed with a link, {len(REFUSALS)} refused "
        f"({len(BY_THE_RULES)} by the rules), of {len(OUTCOMES)}"
    )
    assert BY_THE_RULES  # the loop held some refusals to their reasons


def _of_the_pair(mode, a, b):
    """The two declarations, and those of `mode` their enabling flags switch on besides (--fetch_every=2 switches
    on Downpour's local updates)."""
    given = {*ENABLE[a], *ENABLE[b]}
    besides = [d for d in DECLARATIONS if mode in d.modes and given & {*d.flags, *d.named_by}]
    return [BY_NAME[a], BY_NAME[b], *besides]


def _reasons(mode, declarations):
    """Every reason `declarations` give to refuse another in `mode`, and those of the seams and requirements."""
    reasons = {"they do not go together", *(why.format(mode=mode) for why in SEAMS.values() if why)}
    for d in declarations:
        reasons |= {*d.conflicts.values(), *(why for _, why in d.requires.values()), *d.seams(mode)[1].values()}
    return reasons


FOUR_WORKERS = cluster_lib.parse({"cluster": {"ps": ["a:1"], "worker": ["a:2", "a:3", "a:4", "a:5"]}}, "test")


@pytest.mark.parametrize(
    "mode, cluster, given, line",
    [
        (
            "sync",
            TWO_WORKERS,
            {"replicas_to_aggregate": 1, "aggregation": "accumulator"},
            "--replicas_to_aggregate=1 needs --aggregation=ordered, not --aggregation=accumulator: each step sums "
            "its first R gradients in worker order",
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
        (
            "sync",
            TWO_WORKERS,
            {"pipeline_pieces": 2, "optimizer": "adam"},
            "--pipeline_pieces=2 does not go with --optimizer=adam: Adam counts one update of every variable a step",
        ),
    ],
    ids=[
        "backup workers accumulating",
        "SSP pushing every 2",
        "EASGD alpha 0.5 on 4 sync workers",
        "hierarchical adam",
        "pipelined adam",
    ],
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
    """--steps_per_run's loop holds the ordered step only: --aggregation=ordered, the default, is settled; and
    with --aggregation=accumulator given, it is refused."""
    assert compose("sync", steps_per_run=2).settled == {"aggregation": "ordered"}
    with pytest.raises(ConfigError, match="--steps_per_run=2 needs --aggregation=ordered"):
        compose("sync", steps_per_run=2, aggregation="accumulator")


@pytest.mark.parametrize("given", [{"worker_delay_ms": "0:20"}, {"fetch_every": 2}], ids=["straggler", "local"])
def test_the_techniques_that_read_as_a_step_begins_settle_noprefetch(given):
    """A straggler's pause and a local update come before a worker's read: --prefetch would read at the end of
    the step before. Given anyway, it is refused. (SSP's gate is part of the step before, ahead of its fetch.)"""
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
            "--strict_determinism needs --aggregation=ordered, not --aggregation=accumulator: it sums in a fixed order",
        ),
        (
            {"replicas_to_aggregate": 1, "local_steps": 2},
            {"replicas_to_aggregate", "local_steps"},
            "--replicas_to_aggregate=1 does not go with --local_steps=2: each builds the sync graph its own way",
        ),
        ({"warmup_steps": 3, "mode": "hierarchical"}, {"warmup_steps"}, "--warmup_steps does not apply to"),
    ],
)
def test_settings_are_checked_as_the_launcher_checks_the_run(fields, given, line):
    """run_settings and the tools' check_run_fits are one check (check_run): Settings a command line
    would be refused cannot be made, in a task or a test."""
    with pytest.raises(ConfigError, match=re.escape(line)):
        settings_lib.run_settings(given, **_settings(**fields))


def test_settings_are_made_only_by_run_settings():
    """Every Settings(...) in the package, the recipes and the tests is the one inside run_settings."""
    sources = [*(REPO / "parallel_tf").rglob("*.py"), *(REPO / "recipes").glob("*.py"), *(REPO / "tests").glob("*.py")]
    makers = {
        f"{path.relative_to(REPO)}:{where}"
        for path in sources
        for where in _settings_makers(ast.parse(path.read_text()))
    }
    assert makers == {"parallel_tf/training/settings.py:run_settings"}


def test_the_settled_fields_are_worked_out_once_from_the_others():
    """Settings.SETTLED is every field after one_step_a_run (a plain field added at the end is not taken for a settled
    one), and run_settings works each out. Async on 2 workers, each pushing every 2nd of its 9 steps: 2·⌈9/2⌉ = 10
    pushes, the global step's clock; a cosine schedule left to the run decays over those 10 less its 2 warm-up
    pushes, 8; clipping is on, so the optimizer seam holds its hooks, and a clipping norm sums each variable whole
    (async prefetches by default: --prefetch is on too)."""
    names = [field.name for field in dataclasses.fields(settings_lib.Settings)]
    assert tuple(names[names.index("one_step_a_run") + 1 :]) == settings_lib.SETTLED
    flags = {"push_every": 2, "lr_schedule": "cosine", "warmup_steps": 2, "clip_norm": 1.0}
    settings = settings_lib.run_settings(set(flags), **_settings(mode="async", train_steps=9, **flags))
    assert (settings.num_workers, settings.lockstep, settings.clock, settings.updates_in_run) == (
        2,
        False,
        "pushes",
        10,
    )
    assert (settings.schedule.decay_steps, settings.schedule.warmup_steps) == (8, 2)
    assert [d.name for d in settings.declarations_on] == ["clipping", "warmup", "lr_decay", "push_every", "prefetch"]
    assert settings.hooks.optimizer == (clipping.HOOKS,) and settings.hooks.reduce == ()
    assert (settings.whole_variables, settings.keeps_worker_state, settings.spare_workers) == (True, False, 0)


def _settings_makers(node, function="<module>"):
    """The names of the functions (innermost) under `node` that call Settings(...)."""
    if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Settings":
        yield function
    inner = node.name if isinstance(node, ast.FunctionDef) else function
    for child in ast.iter_child_nodes(node):
        yield from _settings_makers(child, inner)


def test_the_count_of_techniques_in_a_loop_of_steps():
    """Every technique whose step is a graph composes with k steps a session run (and trains in RUNS); the rest
    are refused, each saying why it needs Python between steps (the docs quote both counts)."""
    technique_names = {t.TECHNIQUE.name for t in techniques.TECHNIQUES}
    in_a_loop = {
        pair: refusal
        for pair, (refusal, _) in OUTCOMES.items()
        if "steps_per_run" in pair[1:] and set(pair[1:]) - {"steps_per_run"} <= technique_names
    }
    refused = {pair for pair, refusal in in_a_loop.items() if refusal and "does not apply to" not in refusal}
    trained = {pair for pair, refusal in in_a_loop.items() if refusal is None}
    assert (len(trained), len(refused)) == (12, 8)
    assert trained <= set(RUNS)
