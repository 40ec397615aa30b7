"""The seams of a step that a technique or option fills (declarations.SEAMS), as typed interfaces, and `Hooks`,
what fills each in one run.

A declaration's hook is the function of its module named after the seam, or where its hooks share graph state the
method of its module's `HOOKS` (an OfOneGraph, fresh for each graph), with that seam's signature here (an
option has only all-reduce's reduce): each interface is a Protocol a module (or HOOKS) meets by having that
function, and training/hook_types.py binds every declaration's hooks to the interface of each seam it fills, so mypy
(./run_tests.sh) fails on a hook deleted or written to another signature; tests/test_composition.py checks the
bindings cover every hook declared, and each hook's parameter names. Each takes the run's Settings first. A step
calls them on what its run's `Hooks` holds (`technique.reduce(settings, ring, variables)`), typed by these
interfaces, so a reader follows the call here and mypy checks it (in the modes: pyproject.toml). Which seams take
one owner, and which chain, is declarations.SEAMS's to say.
"""

from __future__ import annotations  # the types name TensorFlow's and the package's, never imported here

import dataclasses
from typing import TYPE_CHECKING

from parallel_tf.backports import Protocol

if TYPE_CHECKING:
    from parallel_tf.graph.collectives import Reducing, Ring
    from parallel_tf.graph.pushes import Send
    from parallel_tf.training.settings import Settings
    from parallel_tf.training.train_graph import TrainGraph


class Build(Protocol):
    """The mode's graph, built by the technique instead of the mode; of the mode hooks of the other techniques on
    (settings.hooks), it calls those its declaration's `calls` lists."""

    def build(self, settings: Settings, recipe, dataset) -> TrainGraph: ...


class Wrap(Protocol):
    """The graph built, with the technique's variables, ops, counters or pauses added."""

    def wrap(self, settings: Settings, graph: TrainGraph) -> TrainGraph: ...


class Transmit(Protocol):
    """Gradients of this worker (on `device`) as the parameter servers receive them, each next to its variable in
    `destinations`; `stream` numbers the worker and the run's seed, for random draws. Sync and async."""

    def transmit(self, settings: Settings, tensors: list, destinations: list, device: str, stream: int) -> list: ...


class Optimizer(Protocol):
    """The optimizer that applies each update, as the technique changes it. Every mode that applies updates."""

    def optimizer(self, settings: Settings, optimizer): ...


class PushLearningRate(Protocol):
    """Async: the rate a push of `staleness` (an int64 tensor) is applied with."""

    def push_learning_rate(self, settings: Settings, learning_rate, staleness): ...


class PushGradients(Protocol):
    """Async: (what a push applies to `parameters` instead of the received `sums`, on_fetch(after): the ops to run
    with each fetch once ops `after` have)."""

    def push_gradients(self, settings: Settings, parameters: list, sums: list) -> tuple: ...


class SendPush(Protocol):
    """Async: how a push reaches the parameters once op `after` has run; optimizer_at(staleness) is the run's
    optimizer for a push of that staleness."""

    def send_push(self, settings: Settings, optimizer, sums, parameters, global_step, after, optimizer_at) -> Send: ...


class AfterPush(Protocol):
    """Async: the ops a push runs once sent, before any fetch after it reads: local updates count the worker's own
    push as in its copy; SSP tells the worker's clock and gates its next step."""

    def after_push(self, settings: Settings, read_step) -> list: ...


class Reduce(Protocol):
    """All-reduce: the ways of reducing a step's gradients, each from its first step on (a phase of the driver),
    made once before any step, with any state they keep."""

    def reduce(self, settings: Settings, ring: Ring, variables: list) -> list[Reducing]: ...


class OfOneGraph:
    """The base of a technique's hooks whose graph state they share: SSP's clocks, made by the first of its hooks
    a build calls and used by the other, the payloads compression's `wrap` counts. Its module's `HOOKS` is a pristine
    one; every graph is built with a fresh one (trainer.build_graph), so no state crosses graphs and none needs a
    TensorFlow collection to be found again. Equal to any other of its class, as a module is to itself, so Settings
    made from the same flags stay equal."""

    def __eq__(self, other):
        return type(other) is type(self) if isinstance(other, OfOneGraph) else NotImplemented

    def __hash__(self):
        return hash(type(self))


@dataclasses.dataclass(frozen=True)
class Hooks:
    """What fills each seam in one run: the module (or its HOOKS, an OfOneGraph) of each technique and option on
    that declares its hook, in wrapping order, at most one where declarations.SEAMS takes one owner; empty: the
    mode's own way. Settled once with the run's Settings (settings.run_settings), so a step's build looks nothing
    up; trainer.build_graph builds each graph with fresh OfOneGraphs."""

    build: tuple[Build, ...] = ()
    wrap: tuple[Wrap, ...] = ()
    transmit: tuple[Transmit, ...] = ()
    optimizer: tuple[Optimizer, ...] = ()
    push_learning_rate: tuple[PushLearningRate, ...] = ()
    push_gradients: tuple[PushGradients, ...] = ()
    send_push: tuple[SendPush, ...] = ()
    after_push: tuple[AfterPush, ...] = ()
    reduce: tuple[Reduce, ...] = ()


# {seam: its interface}, for the seams a hook fills
INTERFACES = {
    "build": Build,
    "wrap": Wrap,
    "transmit": Transmit,
    "optimizer": Optimizer,
    "push_learning_rate": PushLearningRate,
    "push_gradients": PushGradients,
    "send_push": SendPush,
    "after_push": AfterPush,
    "reduce": Reduce,
}
