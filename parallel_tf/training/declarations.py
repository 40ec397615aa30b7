"""What a mode, technique or option says of itself (rules.py composes them): the seams of a step and the hooks
that fill them, and the declarations, as data, their flags typed fields from which absl's are defined.
"""

from __future__ import annotations

import dataclasses

# typing's: subscripted at run time, as Python 3.7's abc's are not
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from absl import flags as absl_flags

from parallel_tf import cli
from parallel_tf.backports import dataclass_transform

if TYPE_CHECKING:
    from parallel_tf.cluster.config import ClusterConfig

# The hooks a mode's step may call (Mode.offers says which it does), by what each does. A technique that builds the
# graph itself calls only those it lists in `calls`, and closes the others (rule 3).
HOOKS_OF_THE_MODE = {
    "transmit": "encode the gradients a worker sends",
    "optimizer": "change how the optimizer applies an update",
    "push_learning_rate": "set each push's learning rate",
    "push_gradients": "change what a push applies",
    "send_push": "change how a push reaches the parameters",
    "after_push": "act on a worker's push once it is sent",
}
# A declaration's hooks: functions of its module named after the seam each fills (or methods of its module's HOOKS,
# a seams.OfOneGraph, where they share graph state). A technique may have any; an
# option, only all-reduce's "reduce" (the mode hooks, `build` and `wrap` are applied from the techniques alone).
HOOKS = (*HOOKS_OF_THE_MODE, "build", "wrap", "reduce")
OPTION_HOOKS = ("reduce",)


# The seams (rule 3), each with why a second owner is refused ({mode}: the run's), or "" where any number chain
SEAMS = {
    "build": "each builds the {mode} graph its own way",
    "transmit": "both " + HOOKS_OF_THE_MODE["transmit"],  # what reaches the parameters is decided once
    "send_push": "both " + HOOKS_OF_THE_MODE["send_push"],
    **dict.fromkeys(("wrap", "optimizer", "push_learning_rate", "push_gradients", "after_push"), ""),
    # all-reduce's: how a step reduces its gradients (a `reduce` hook), and what shapes the ring's sums
    "reduce": "each reduces the gradients its own way, and all-reduce has one reduce hook",
    "ring": "",
}
EVERY_MODE_SEAMS = ("build", "wrap")  # every mode has them: trainer.build_graph applies them around any builder
NO_CLUSTER = "single"  # the mode of the one plain process (modes/single.py)


@dataclasses.dataclass(frozen=True)
class EveryMode:
    """The `modes` of a declaration that every mode has, whatever it is (the trainer's evaluations, a link,
    a worker's pause), so a new mode has it with no edit elsewhere: every cluster mode, and with `single`
    the one plain process too."""

    single: bool = False

    def __contains__(self, mode):
        return self.single or mode != NO_CLUSTER

    def __str__(self):
        return "every mode" if self.single else "every cluster mode"


EVERY_MODE, EVERY_CLUSTER_MODE = EveryMode(single=True), EveryMode()

Values = Mapping[str, Any]  # {flag name: value} of a run, with "mode"


@dataclasses.dataclass(frozen=True)
class Flag:
    """A declaration's flag as a typed field, from which its absl flag is defined (`define`), owned by the
    declaration's module (--help groups flags by module). Its type is its default's (bool, int, float, str or a
    list), or `kind` where the default is None; with `choices`, an enum of them."""

    name: str
    default: Any
    help: str
    lower_bound: float | None = None
    upper_bound: float | None = None
    choices: tuple = ()
    kind: type | None = None
    parse: Callable[[Any], object] | None = None  # raises ConfigError, naming the flag, for a bad value
    valid: tuple = ()  # (predicate, what a value must be): absl's validator

    def define(self, module, flag_values=absl_flags.FLAGS):
        kind, owned = self.kind or type(self.default), {"flag_values": flag_values, "module_name": module}
        bounds: dict[str, Any] = {"lower_bound": self.lower_bound, "upper_bound": self.upper_bound}
        if self.choices:
            absl_flags.DEFINE_enum(self.name, self.default, list(self.choices), self.help, **owned)
        elif kind is bool:
            absl_flags.DEFINE_bool(self.name, self.default, self.help, **owned)
        elif kind is int:
            absl_flags.DEFINE_integer(self.name, self.default, self.help, **bounds, **owned)
        elif kind is float:
            cli.define_float(self.name, self.default, self.help, **bounds, **owned)
        elif kind is list:
            absl_flags.DEFINE_list(self.name, self.default, self.help, **owned)
        else:
            absl_flags.DEFINE_string(self.name, self.default, self.help, **owned)
        if self.parse:
            cli.validate_by_parsing(self.name, self.parse, flag_values)
        if self.valid:
            absl_flags.register_validator(self.name, self.valid[0], self.valid[1], flag_values=flag_values)


def flag(default, help, **spec):
    """A field of a declaration's `Options` that is a flag: its value in a run's Settings.options (a list flag's as
    a tuple of ints, as Settings holds it) by default, and what Flag defines absl's from (`spec`: Flag's bounds,
    choices, kind, parse, valid). The field's name is the flag's."""
    held = tuple(int(item) for item in default) if isinstance(default, list) else default
    return dataclasses.field(default=held, metadata={FLAG: {"default": default, "help": help, **spec}})


FLAG = "flag"  # the metadata key of a flag's definition on its field


@dataclass_transform(frozen_default=True)
class Flags:
    """The base of a declaration's `Options`, its flags as typed `flag` fields: each subclass is a frozen dataclass,
    as is a class of several (training/run_options.py)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(frozen=True)(cls)


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a technique or option says of itself; `flags[0]` is the one that switches it on."""

    KIND: ClassVar[str] = "declaration"

    name: str
    modes: tuple | EveryMode
    # Its flags' typed fields (a Flags subclass of `flag` fields, the first the flag that switches it on), as a
    # run's Settings.options has them (training/run_options.py)
    options: type | None = None
    defines: tuple = dataclasses.field(default=(), init=False)  # its flags (Flag), from `options`
    flags: tuple = ()  # their names: set from `options` (a rule's test names them alone)
    # (values, cluster) -> whether a run with these values uses it; None: once flags[0] is not at its default
    enabled: Callable[[Values, ClusterConfig], bool] | None = None
    check: Callable[[Values, ClusterConfig], None] | None = None  # raises ConfigError for a bad value of its flags
    requires: dict = dataclasses.field(default_factory=dict)  # {flag: (value, why)}, while it is on
    # {flag: (values) -> value}: a flag of its own whose default (None) means "as the run decides", while it is on:
    # the value the run uses, settled as a requirement is, so run.json and summary.json say what ran
    automatic: dict = dataclasses.field(default_factory=dict)
    conflicts: dict = dataclasses.field(default_factory=dict)  # {declaration name: why}
    switched_on_by: str = ""  # how a refusal names what switches it on; default --flags[0]
    named_by: tuple = ()  # the flags a refusal names it by, with their values; default flags[0]
    why_not_other_modes: str = ""  # said when one of its flags is given for a mode outside `modes`
    record: Callable[[object], dict] | None = None  # (Settings) -> what summary.json says it did; default its flags
    # The summary.json counter of the times it changed something, where on it may change nothing (clipping
    # whose norm is never reached): 0 in every run of a study means the variant trained its baseline.
    effect: str = ""
    # It changes when things happen, never what is computed (the network): not part of what a resume must
    # match, nor of summary.json's mode options; `declared` records it when on.
    timing_only: bool = False
    # (values) -> whether, with these values, each worker keeps state of its own across steps (error feedback's
    # residuals): checkpointed one slot a worker (graph/worker_state.py), so a resume needs as many workers.
    worker_state: Callable[[Values], bool] | None = None
    # It computes on each variable whole (a codec's scale, a norm's sum): a mode places its variables whole then,
    # where it would split them over its parameter servers (graph/placement.py)
    whole_variables: bool = False
    # (values, cluster, [shape of each trainable variable]) -> ConfigError for what only the model's shapes tell
    # (PowerSGD's rank against its matrices): checked before any task starts, from the recipe's model
    check_shapes: Callable[[Values, ClusterConfig, list], None] | None = None
    # Of HOOKS, each a function of its module (or a method of its HOOKS) with that name and its seam's signature
    # (seams.py): the seams it fills with code. A technique's `build` replaces the mode's builder; a `reduce`
    # (seams.Reduce) gives all-reduce's ways of reducing, each from the step it starts at; without one, the plain
    # ring's.
    hooks: tuple = ()
    fills: tuple = ()  # the SEAMS it fills besides its hooks, with no code of its own (a ring option: "ring")
    closes: dict = dataclasses.field(default_factory=dict)  # {seam: why no other declaration may fill it}

    def __post_init__(self):
        if self.options:
            fields = dataclasses.fields(self.options)
            object.__setattr__(self, "defines", tuple(Flag(field.name, **field.metadata[FLAG]) for field in fields))
            object.__setattr__(self, "flags", tuple(flag.name for flag in self.defines))
        unknown = (set(self.fills) | set(self.closes)) - set(SEAMS)
        assert not unknown, f"{self.name}: unknown seams {sorted(unknown)}"
        unknown = set(self.hooks) - set(HOOKS)
        assert not unknown, f"{self.name}: unknown hooks {sorted(unknown)}"

    def seams(self, mode):
        """The seams it fills, and {seam: why} of those it closes, in `mode`."""
        return (*self.hooks, *self.fills), self.closes

    def is_on(self, values, cluster, defaults):
        """Whether a run with `values` uses it; `defaults`: every flag's defined default."""
        if self.enabled:
            return self.enabled(values, cluster)
        return values[self.flags[0]] != defaults[self.flags[0]]

    def describe(self, values):
        """How the user switched it on, as flags: --softsync=2, --staleness_aware, --fetch_every=2 with
        --local_updates."""
        return " with ".join(as_flag(flag, values[flag]) for flag in self.named_by or self.flags[:1])

    def define_flags(self, module, flag_values=absl_flags.FLAGS):
        """absl's flags of `defines`, owned by `module` (the declaration's)."""
        for flag in self.defines:
            flag.define(module, flag_values)

    @property
    def switch(self):
        return self.switched_on_by or f"--{self.flags[0]}"


@dataclasses.dataclass(frozen=True)
class Technique(Declaration):
    """A variant of a mode, written as one module whose functions (or its HOOKS' methods) are its `hooks`."""

    KIND: ClassVar[str] = "technique"

    calls: tuple = ()  # with a `build` hook: the HOOKS_OF_THE_MODE its builder calls
    spare_workers: Callable[[Values, ClusterConfig], int] | None = None  # (values, cluster) -> workers the run may lose

    @property
    def builds_graph(self):
        return "build" in self.hooks

    def seams(self, mode):
        """A technique that builds the graph closes the mode's hooks its builder does not call."""
        filled, closes = super().seams(mode)
        if self.builds_graph:
            not_called = [hook for hook in HOOKS_OF_THE_MODE if hook not in self.calls]
            builds = f"it builds its own {mode} graph, which does not "
            closes = {**{hook: builds + HOOKS_OF_THE_MODE[hook] for hook in not_called}, **closes}
        return filled, closes


@dataclasses.dataclass(frozen=True)
class Option(Declaration):
    """A setting of the run or of its mode that changes what is computed; the modes and the trainer act on it."""

    KIND: ClassVar[str] = "option"

    def __post_init__(self):
        super().__post_init__()
        unknown = set(self.hooks) - set(OPTION_HOOKS)
        assert not unknown, f"{self.name}: an option's hooks are {OPTION_HOOKS}, not {sorted(unknown)}"


@dataclasses.dataclass(frozen=True)
class Mode:
    """A distributed training mode, written as one module: its builder and what its cluster and its run
    must be. Techniques and options name the modes they apply to; a mode names none of them."""

    name: str
    build: Callable  # (recipe, dataset, settings) -> TrainGraph
    cluster: bool = True  # False: the one plain process, the reference a 1-worker cluster must match
    groups: bool = False  # a local parameter server per group of workers (job local_ps, the spec's "groups")
    workers_alone: str = ""  # how its workers exchange with no parameter server; "": they use parameter servers
    flags: tuple = ()  # its cluster-shape flags, defined by its module's define_flags
    lockstep: bool = False  # the data position is the global step, so a run resumes on any worker count
    # The SEAMS its step has besides EVERY_MODE_SEAMS: the hooks it calls, and all-reduce's ring, whose options set
    # values its sums read. A hook of any other seam would never be called in it, so it owns nothing there.
    offers: tuple = ()
    check: Callable[[Values, ClusterConfig], None] | None = None  # its rules of a whole run: ConfigError, one line
    # (hosts_known, source, flag_values) -> None: its rules of how a cluster is laid out on hosts, checked
    # wherever one is (Slurm, the launcher, a TFJob); `source` names it, for the ConfigError
    check_layout: Callable[[bool, str, object], None] | None = None
    # (settings) -> (what the global step counts, the updates the run applies): a schedule's clock; default the steps
    clock: Callable[[object], tuple] | None = None
    options: tuple = ()  # the modules of the options it owns (an Option each, of this mode only), in their order

    @property
    def parameter_servers(self):
        return self.cluster and not self.workers_alone


def as_flag(name, value):
    """The flag as a user gives it: --name=value, --name, --noname."""
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no{name}"
    return f"--{name}={value}"
