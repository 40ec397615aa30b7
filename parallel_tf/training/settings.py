"""What a task knows of its run: `Settings`, made once from the parsed flags (task_settings.py) or
from fields (run_settings, the one way they are made: tasks, the bench's peers and the tests alike),
checked as a whole run (run_check.check_run) and never changed after. What the run's fields decide (its
declarations, the hooks filling each seam, the clock, the schedule, the workers) is settled then as fields of their
own, so a step's build reads plain typed data and calls nothing here.
"""

from __future__ import annotations

import dataclasses

from absl import flags

from parallel_tf.cluster import config as cluster_lib
from parallel_tf.graph.optimizers import Schedule
from parallel_tf.training import modes, run_check, techniques
from parallel_tf.training.options import steps_per_run
from parallel_tf.training.run_options import Options
from parallel_tf.training.seams import Hooks

FLAGS = flags.FLAGS
MAX_WORKERS = 1 << 16  # for numbering each worker's random draws apart


@dataclasses.dataclass(frozen=True)
class Settings:
    """Everything a task needs to know, checked; decided once, never changed after parsing. A declared
    flag's value (an option's or a technique's: options/, techniques/) is a field of `options`. The fields after
    `one_step_a_run` (SETTLED) are settled by run_settings from the others (_settled): a copy that changes a field
    they derive from must be made by run_settings again."""

    mode: str  # "single" when there is no cluster
    job_name: str  # "worker" in a single-process run
    task_index: int
    cluster: cluster_lib.ClusterConfig | None
    global_batch_size: int
    train_steps: int
    learning_rate: float
    optimizer: str
    seed: int
    logdir: str
    dataset: str
    data_dir: str | None = None
    download: bool = False
    download_url: str | None = None
    log_every: int = 50
    snapshot_every: int = 0
    nan_guard: bool = True
    intra_op_threads: int | None = None  # None: the environment's count, else compat.PINNED_THREADS
    kernels: str | None = None  # None: what the environment says, else portable (compat.kernels)
    recipe_flags: tuple = ()  # ((name, value), ...) of the recipe's own flags (settings_from_flags)
    startup_timeout: float = 60.0
    checkpoint_every: int = 100
    fresh: bool = False
    operation_timeout: float = 300.0
    options: Options = Options()  # every declared flag, as check_run settled them (training/run_options.py)
    techniques: tuple = ()  # the techniques on, as check_run decided (names, in wrapping order)
    options_on: tuple = ()  # the options on (options/), as check_run decided
    num_gpus: int = 0
    trace_steps: tuple | None = None  # (first, end) of --trace_steps, or None
    # All-reduce: TensorFlow remembers a collective's keys for the life of a process, so one process
    # that runs several clusters in turn (the tests) gives each its own group; a task runs one.
    collective_group: int = 1
    # Why the automatic --steps_per_run is 1 where the mode has a loop of steps: the refusal k > 1 would get
    # (a technique that needs Python between steps); "" where it loops, or was given
    one_step_a_run: str = ""
    # Settled (_settled):
    num_workers: int = 1
    lockstep: bool = False  # the data position is the global step, so the run resumes on any worker count
    declarations_on: tuple = ()  # (declarations.Declaration) of every technique and option on, in their order
    hooks: Hooks = Hooks()  # what fills each seam (seams.py), as a step calls it
    # A technique on computes on each variable whole (a codec's scale, a norm's sum), so a mode must not split its
    # variables in pieces over the servers
    whole_variables: bool = False
    keeps_worker_state: bool = False  # a technique or option on keeps state on each worker that a resume needs
    spare_workers: int = 0  # how many workers may die without stopping training (backup workers)
    clock: str = "steps"  # what the global step counts, the clock a schedule runs in: steps, unless the mode says
    updates_in_run: int = 0  # the updates the whole run applies, in that clock
    schedule: Schedule = Schedule(0.0)  # the learning rate as a function of the update it is applied at

    @property
    def is_chief(self):
        return self.job_name == "worker" and self.task_index == 0

    @property
    def base_learning_rate(self):
        """--learning_rate, times k = --global_batch_size / --linear_scaling_batch under the linear scaling rule:
        the rate wherever one is used (after warm-up, before decay)."""
        if not self.options.linear_scaling_batch:
            return self.learning_rate
        return self.learning_rate * self.global_batch_size / self.options.linear_scaling_batch

    @property
    def random_stream(self):
        """This worker's own stream of random numbers in this run (a random codec's draws), the same whichever
        mode sends its gradients: seed·2¹⁶ + worker."""
        return self.seed * MAX_WORKERS + self.task_index

    @property
    def option_values(self):
        """{flag: value} of every declared flag, as the declarations' functions take a run's values."""
        return dataclasses.asdict(self.options)

    def arithmetic_options(self):
        """The value of every declared flag of this run's mode that decides its arithmetic, on or off (a
        schedule's, a technique's): what, besides the common flags, run.json records (a resume must match)
        and summary.json."""
        return {
            name: getattr(self.options, name)
            for name, scope in run_check.DECLARED_SCOPES.items()
            if self.mode in scope and not run_check.DECLARED_BY[name].timing_only
        }

    def declared(self):
        """{name: what it did} for every technique and option this run has on (summary.json): its flags'
        values, unless its declaration says more (the schedule in its clock, compression's algorithm)."""
        return {
            d.name: d.record(self) if d.record else {flag: getattr(self.options, flag) for flag in d.flags}
            for d in self.declarations_on
        }


# The fields _settled works out (tests/test_settings.py holds this to what it sets)
SETTLED = (
    "num_workers",
    "lockstep",
    "declarations_on",
    "hooks",
    "whole_variables",
    "keeps_worker_state",
    "spare_workers",
    "clock",
    "updates_in_run",
    "schedule",
)


def run_settings(given=frozenset(), **fields):
    """The one way Settings are made: `fields` (Settings fields and declared flags, by name) checked as a
    whole run (check_run), with the techniques and options its flags switch on and the values they settle.
    `given`: the names of the flags the user set."""
    declared = dataclasses.asdict(Options())  # every declared flag at its default, then the fields given
    declared.update({name: fields.pop(name) for name in list(fields) if name in declared})
    settings = Settings(options=Options(**declared), **fields)
    looped = declared["steps_per_run"] is None and settings.mode in run_check.DECLARED_SCOPES["steps_per_run"]
    if looped:  # composed at one step a run first: the declarations on then say whether a loop composes
        declared["steps_per_run"] = 1
        settings = dataclasses.replace(settings, options=Options(**declared))
    composition = _composition(settings, given)
    if looped:  # automatic: as many steps a run as fit between the trainer's boundaries, where a loop composes
        declared.update({name: value for name, value in composition.settled.items() if name in declared})
        declared["steps_per_run"], why = _automatic_steps_a_run(settings, composition)
        settings = dataclasses.replace(settings, options=Options(**declared), one_step_a_run=why)
        if declared["steps_per_run"] > 1:
            composition = _composition(settings, given)
    settled = composition.settled
    composed = dataclasses.replace(
        settings,
        techniques=composition.names,
        options_on=composition.options,
        options=Options(**{**declared, **{name: value for name, value in settled.items() if name in declared}}),
        **{name: value for name, value in settled.items() if name not in declared},
    )
    return _settled(composed)


def _settled(settings):
    """`settings` with the fields their others decide (Settings' settled fields), worked out once."""
    on = (*settings.techniques, *settings.options_on)
    declarations = tuple(d for d in run_check.DECLARATIONS if d.name in on)
    values = settings.option_values
    settings = dataclasses.replace(
        settings,
        num_workers=settings.cluster.num_workers if settings.cluster else 1,
        lockstep=modes.BY_NAME[settings.mode].lockstep,
        declarations_on=declarations,
        hooks=run_check.hooks_of(declarations, settings.mode),
        whole_variables=any(d.whole_variables for d in declarations),
        keeps_worker_state=any(d.worker_state(values) for d in declarations if d.worker_state),
        spare_workers=techniques.spare_workers(settings.techniques, values, settings.cluster),
    )
    mode = modes.BY_NAME[settings.mode]
    clock, updates = mode.clock(settings) if mode.clock else ("steps", settings.train_steps)
    return dataclasses.replace(settings, clock=clock, updates_in_run=updates, schedule=_schedule(settings, updates))


def _schedule(settings, updates_in_run):
    """The learning rate as a function of the update it is applied at (graph/optimizers.py)."""
    options = settings.options
    # only cosine's length defaults to the training left: a resume that trains longer then changes it
    decay_steps = options.lr_decay_steps
    if options.lr_schedule == "cosine" and not decay_steps:
        decay_steps = max(updates_in_run - options.warmup_steps, 1)
    return Schedule(
        settings.base_learning_rate,
        options.lr_schedule,
        options.warmup_steps,
        decay_steps,
        options.lr_decay_rate,
        options.lr_decay_milestones,
        warmup_from=settings.learning_rate if options.linear_scaling_batch else None,
    )


def _automatic_steps_a_run(settings, composition):
    """(the automatic steps a run, "" or why it is one) of `settings`, composed at one step a run as `composition`:
    the most that fit between the trainer's boundaries, or one where a loop would be slower or a declaration on
    refuses it (options/steps_per_run.py)."""
    values = {**_values(settings), **composition.settled}
    steps = steps_per_run.automatic(values)
    on = [d for d in run_check.DECLARATIONS if d.name in (*composition.names, *composition.options)]
    looping = {**values, "steps_per_run": steps}
    why = steps_per_run.one_step_a_run(values) or (
        steps_per_run.loop_refusal(on, looping, settings.cluster) if steps > 1 else ""
    )
    return (1, why) if why else (steps, "")


def _composition(settings, given):
    return run_check.check_run(settings.mode, settings.cluster, _values(settings), given)


def _values(settings):
    """{name: value} of every field and declared flag of `settings`, as check_run takes them."""
    fields = {
        f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name not in ("options", *SETTLED)
    }
    return {**fields, **settings.option_values}
