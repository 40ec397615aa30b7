"""How techniques compose: what each declares, and the one function that decides a run's set.

Every technique module has a `TECHNIQUE = Technique(...)` that says, as data, the modes it applies
to, the flags it needs of others, the techniques it cannot run with and why, the hooks its module
defines, and whether it builds the mode's graph itself. `resolve` reads only these declarations
(and each module's own `enabled` and `check`), so a technique never names another's flags, and
the launcher, the tools, the manifest writer and every task decide the same way.

The rules, in the order `resolve` applies them:
1. Each technique of the run's mode refuses bad values of its own flags (its module's
   `check(values, cluster)`); it is on when its module's `enabled(values, cluster)` says so.
2. A flag a technique requires: a different value the user gave is refused; two techniques
   requiring different values are refused; otherwise the required value is the run's.
3. At most one technique builds the mode's graph (its `build` hook), and it must call the mode
   hooks (HOOKS_OF_THE_MODE) of every other technique on: its `calls` lists the ones it does.
4. At most one technique provides each single-owner hook (SINGLE_OWNER_HOOKS).
5. A pair either of whose declarations names the other in `conflicts` is refused, with its reason.

Wrapping order: the graph is built by the technique that builds it (or the mode), then wrapped by
every `wrap` hook in the order of TECHNIQUES (techniques/__init__.py), innermost first.
"""

import dataclasses
import itertools

from parallel_tf.errors import ConfigError

# The hooks a mode's builder calls (sync: transmit and optimizer; async: all of them). A technique that builds the
# graph itself calls only those it lists in `calls`; with any other technique providing one, it is refused.
HOOKS_OF_THE_MODE = {
    "transmit": "encode the gradients a worker sends",
    "optimizer": "change how the optimizer applies an update",
    "push_learning_rate": "set each push's learning rate",
    "push_gradients": "change what a push applies",
    "send_push": "change how a push reaches the parameters",
    "after_push": "mark a worker's own push as already in its copy",
}
SINGLE_OWNER_HOOKS = ("transmit", "send_push")  # what reaches the parameters can be decided only once
HOOKS = (*HOOKS_OF_THE_MODE, "build", "wrap", "spare_workers")


@dataclasses.dataclass(frozen=True)
class Technique:
    """A technique's declaration; `flags[0]` is the one that switches it on."""

    name: str
    flags: tuple
    modes: tuple
    hooks: tuple = ()  # of HOOKS, each a function of the module with that name; `build` replaces the mode's builder
    requires: dict = dataclasses.field(default_factory=dict)  # {flag: (value, why)}
    conflicts: dict = dataclasses.field(default_factory=dict)  # {technique name: why}
    calls: tuple = ()  # with a `build` hook: the HOOKS_OF_THE_MODE its builder calls

    def __post_init__(self):
        unknown = set(self.hooks) - set(HOOKS)
        assert not unknown, f"{self.name}: unknown hooks {sorted(unknown)}"

    @property
    def builds_graph(self):
        return "build" in self.hooks

    def describe(self, values):
        """How the user switched it on, as a flag: --softsync=2, --staleness_aware."""
        return as_flag(self.flags[0], values[self.flags[0]])


@dataclasses.dataclass(frozen=True)
class Composition:
    """What `resolve` decided: the techniques on, by name in wrapping order, and the flag values they settle."""

    names: tuple
    settled: dict


def resolve(techniques, modules, mode, cluster, values, given):
    """The run's composition, or ConfigError with one line naming what cannot go together.

    `techniques` are the declarations in wrapping order and `modules` their modules by name; `values`
    holds every technique flag and every other flag a technique may require that applies to `mode`
    (with "mode" itself); `given` the names of the flags the user set."""
    values = {**values, "mode": mode}
    of_mode = [t for t in techniques if mode in t.modes]
    for technique in of_mode:
        modules[technique.name].check(values, cluster)
    on = [t for t in of_mode if modules[t.name].enabled(values, cluster)]
    settled = _settle_requirements(on, values, given)
    _check_builder(on, values, mode)
    _check_single_owners(on, values)
    for a, b in itertools.combinations(on, 2):
        why = a.conflicts.get(b.name) or b.conflicts.get(a.name)
        if why:
            raise ConfigError(f"{a.describe(values)} does not go with {b.describe(values)}: {why}")
    return Composition(tuple(t.name for t in on), settled)


def _settle_requirements(on, values, given):
    settled, by = {}, {}
    for technique in on:
        for flag, (value, why) in technique.requires.items():
            if flag not in values:  # not an option of this mode
                continue
            if flag in given and values[flag] != value:
                raise ConfigError(
                    f"{technique.describe(values)} needs {as_flag(flag, value)}, not {as_flag(flag, values[flag])}: "
                    f"{why}"
                )
            if flag in settled and settled[flag] != value:
                raise ConfigError(
                    f"{by[flag].describe(values)} needs {as_flag(flag, settled[flag])} and "
                    f"{technique.describe(values)} needs {as_flag(flag, value)}: they do not go together"
                )
            settled[flag], by[flag] = value, technique
    return settled


def _check_builder(on, values, mode):
    builders = [t for t in on if t.builds_graph]
    if len(builders) > 1:
        a, b = builders[:2]
        raise ConfigError(
            f"{a.describe(values)} does not go with {b.describe(values)}: each builds the {mode} graph its own way"
        )
    for builder in builders:
        for other in on:
            for hook in sorted(set(other.hooks) & set(HOOKS_OF_THE_MODE) - set(builder.calls)):
                raise ConfigError(
                    f"{builder.describe(values)} does not go with {other.describe(values)}: it builds its own "
                    f"{mode} graph, which does not {HOOKS_OF_THE_MODE[hook]}"
                )


def _check_single_owners(on, values):
    for hook in SINGLE_OWNER_HOOKS:
        owners = [t for t in on if hook in t.hooks]
        if len(owners) > 1:
            a, b = owners[:2]
            raise ConfigError(
                f"{a.describe(values)} does not go with {b.describe(values)}: both {HOOKS_OF_THE_MODE[hook]}"
            )


def as_flag(name, value):
    """The flag as a user gives it: --name=value, --name, --noname."""
    if isinstance(value, bool):
        return f"--{name}" if value else f"--no{name}"
    return f"--{name}={value}"
