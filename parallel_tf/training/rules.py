"""How declarations compose: what each technique (techniques/) and option (options/) says of itself,
and the one function that decides what a run does.

Every flag that changes what a run computes belongs to a declaration: a technique (a variant of a
mode: backup workers, softsync, compression, ...) or an option (a setting of the run or its mode:
a learning-rate schedule, --steps_per_run, --prefetch, strict determinism, ...). A declaration says,
as data, the modes it applies to, when it is on (by default: once its first flag is set away from its
default), what it requires of other flags, what it cannot run with and why, the hooks its module
defines (an option's: all-reduce's reduce alone) and whether it builds the mode's graph itself. A mode
(Mode) is declared the same way: its builder and the shape of its cluster. `compose` reads only
declarations, so none names another's flags, and the launcher, the tools, the manifest writer and every
task decide alike.

The rules, in the order `compose` applies them:
1. A flag a declaration that is on requires: a different value the user gave is refused; two
   declarations requiring different values are refused; otherwise the required value is the run's.
   A settled value may switch a declaration off (--prefetch, settled to False), so this repeats until
   nothing changes.
2. Every declaration of the run's mode refuses bad values of its own flags (its `check`), and a flag
   of a declaration that is off, other than the one that switches it on, is refused when given: it
   would do nothing (--microbatches without --strict_determinism).
3. Seams (SEAMS), the places of a mode's step a declaration fills with its own code: a seam that takes one
   owner (`both` says why) is refused to a second, and a seam a declaration closes (`closes`: strict
   determinism's reduction, which does not sum by the ring; a technique that builds the graph itself, for
   the mode's hooks its builder does not call) is refused to every other. The rest chain, in the order of
   TECHNIQUES. A seam counts only in a mode that has it: `build` and `wrap` in every mode (trainer.build_graph
   applies them around any builder), the others where the mode's step calls them (`Mode.offers`).
4. A pair either of whose declarations names the other in `conflicts` is refused, with its reason.

Wrapping order: the graph is built by the technique that builds it (or the mode), then wrapped by
every `wrap` hook in the order of TECHNIQUES (techniques/__init__.py), innermost first.
"""

from __future__ import annotations

import dataclasses
import itertools

from parallel_tf.backports import zip_strict
from parallel_tf.errors import ConfigError
from parallel_tf.training.declarations import EVERY_MODE_SEAMS, NO_CLUSTER, SEAMS, EveryMode, Option, Technique, as_flag


@dataclasses.dataclass(frozen=True)
class Composition:
    """What `compose` decided: the techniques on, by name in wrapping order, the options on, and the flag
    values the declarations settle."""

    names: tuple
    options: tuple
    settled: dict


def compose(declarations, mode, cluster, values, given, defaults, offered=()):
    """The run's composition, or ConfigError with one line naming what cannot go together.

    `declarations`: every technique (in wrapping order) and option; `values`: every flag of the run,
    by name; `given`: the names of the flags the user set; `defaults`: every flag's defined default;
    `offered`: the seams the mode's step calls (Mode.offers)."""
    values = {**values, "mode": mode}
    of_mode = [d for d in declarations if mode in d.modes]
    on, settled = _settle(of_mode, values, cluster, given, defaults)
    values.update(settled)
    for declaration in on:
        automatic = {flag: decide(values) for flag, decide in declaration.automatic.items() if values[flag] is None}
        settled.update(automatic)
        values.update(automatic)
    for declaration in of_mode:
        if declaration.check:
            declaration.check(values, cluster)
        if declaration not in on:
            _refuse_idle_flags(declaration, given)
    _check_seams(on, values, mode, offered)
    for a, b in itertools.combinations(on, 2):
        for first, second in ((a, b), (b, a)):  # the one that declares the conflict speaks first
            why = _conflict(first, second)
            if why:
                _refuse(first, second, why, values)
    names = tuple(d.name for d in on if isinstance(d, Technique))
    return Composition(names, tuple(d.name for d in on if isinstance(d, Option)), settled)


def _settle(of_mode, values, cluster, given, defaults):
    """(the declarations on, the values they settle), repeated until a settled value switches none on or off."""
    settled: dict = {}
    for _ in range(len(of_mode) + 1):
        current = {**values, **settled}
        on = [d for d in of_mode if d.is_on(current, cluster, defaults)]
        now = _settle_requirements(on, current, values, given)
        if now == settled:
            return on, settled
        settled = now
    raise AssertionError(f"requirements do not settle: {settled}")


def _settle_requirements(on, current, values, given):
    settled: dict = {}
    by: dict = {}
    for declaration in on:
        for flag, (value, why) in declaration.requires.items():
            if flag not in values:  # not a flag of this run
                continue
            if flag in given and values[flag] != value:
                raise ConfigError(
                    f"{declaration.describe(current)} needs {as_flag(flag, value)}, not "
                    f"{as_flag(flag, values[flag])}: {why}"
                )
            if flag in settled and settled[flag] != value:
                raise ConfigError(
                    f"{by[flag].describe(current)} needs {as_flag(flag, settled[flag])} and "
                    f"{declaration.describe(current)} needs {as_flag(flag, value)}: they do not go together"
                )
            settled[flag], by[flag] = value, declaration
    return settled


def _refuse_idle_flags(declaration, given):
    for flag in declaration.flags[1:]:
        if flag in given:
            raise ConfigError(f"--{flag} applies only with {declaration.switch}")


def _conflict(a, b):
    return a.conflicts.get(b.name)


def _check_seams(on, values, mode, offered):
    """Rule 3: one owner where a seam takes one, none beside a declaration that closes it; the one that
    closes a seam speaks first."""
    seams = [declaration.seams(mode) for declaration in on]  # (filled, closes) of each, in the order of `on`
    for seam in (seam for seam in SEAMS if seam in EVERY_MODE_SEAMS or seam in offered):
        owners = [d for d, (filled, _) in zip_strict(on, seams) if seam in filled]
        if SEAMS[seam] and len(owners) > 1:
            _refuse(owners[0], owners[1], SEAMS[seam].format(mode=mode), values)
        for closer, (_, closes) in zip_strict(on, seams):
            if seam in closes:
                for other in (d for d in owners if d is not closer):
                    _refuse(closer, other, closes[seam], values)


def _refuse(first, second, why, values):
    raise ConfigError(f"{first.describe(values)} does not go with {second.describe(values)}: {why}")


def scope_named(modes, prefix="--mode="):
    """A declaration's `modes` as its refusals and --help name them: --mode=sync|async, or every cluster mode."""
    if isinstance(modes, EveryMode):
        return str(modes)
    return prefix + "|".join(mode for mode in modes if mode != NO_CLUSTER)
