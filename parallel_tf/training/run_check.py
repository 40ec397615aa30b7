"""The one check of a whole run, made alike by every task and every tool that starts one (the launcher,
study, bench and manifest writer): each declared flag applies to the run's mode, the global batch
shards over the workers, the mode's own rules hold (modes/), and the declared techniques and options
compose (rules.compose). Out-of-range values and contradictions become a `ConfigError`; entry points
print it as one line and exit 2 (see cli.py).

Every flag that changes what a run computes belongs to a declaration (a technique or an option), which
says the modes it applies to: a flag set where it does not apply is an error, because a flag silently
ignored is a wrong experiment the user believes they ran. Mode options apply to cluster modes; run
options to the one plain process too.
"""

from absl import flags

from parallel_tf.backports import cache
from parallel_tf.cluster import config as cluster_lib
from parallel_tf.errors import ConfigError
from parallel_tf.training import modes, options, rules, techniques
from parallel_tf.training.declarations import EVERY_MODE_SEAMS, HOOKS
from parallel_tf.training.run_flags import (
    CORE_RUN_FLAGS,
    OPTIONS,
    define_mode_option_flags,
    define_run_flags,
    given_flags,
)
from parallel_tf.training.seams import Hooks

FLAGS = flags.FLAGS
NO_CLUSTER = modes.SINGLE.name
MODE_OPTION_SCOPES = {**options.flag_scopes(OPTIONS, run_options=False), **techniques.flag_scopes()}
RUN_OPTION_SCOPES = options.flag_scopes(OPTIONS, run_options=True)
DECLARED_SCOPES = {**MODE_OPTION_SCOPES, **RUN_OPTION_SCOPES}
FLAG_SCOPES = {"job_name": modes.NAMES, "task_index": modes.NAMES, "mode": modes.NAMES, **DECLARED_SCOPES}
DECLARATIONS = (*(t.TECHNIQUE for t in techniques.TECHNIQUES), *(o.OPTION for o in OPTIONS))
DECLARED_BY = {name: declaration for declaration in DECLARATIONS for name in declaration.flags}
# {declaration's name: what fills its seams}: its module's HOOKS where its hooks share graph state (seams.OfOneGraph),
# else the module, whose functions are its hooks
HOOKS_OF = {
    name: getattr(module, "HOOKS", module)
    for name, module in {**techniques.BY_NAME, **{o.OPTION.name: o for o in OPTIONS}}.items()
}


def hooks_of(declarations, mode):
    """seams.Hooks of a run of `mode` with `declarations` on: for each seam its step has (EVERY_MODE_SEAMS and those
    the mode offers), the hooks (seams.Hooks) of those that declare it, in their order; none for any other seam, whose
    hook the step would never call (compression's reduce in a sync run)."""
    has = (*EVERY_MODE_SEAMS, *modes.BY_NAME[mode].offers)
    return Hooks(
        **{seam: tuple(HOOKS_OF[d.name] for d in declarations if seam in d.hooks) for seam in HOOKS if seam in has}
    )


def check_run(mode, cluster, values, given):
    """The run's Composition, or ConfigError with one line. `values`: {flag name: value} of the run flags
    and mode options; `given`: the names of those the user set; `cluster`: None for the one plain process."""
    check_values_in_scope(mode, values, given)
    if cluster:
        cluster_lib.check_shardable(values["global_batch_size"], cluster.num_workers)
        if modes.BY_NAME[mode].check:
            modes.BY_NAME[mode].check(values, cluster)
    in_scope = {name: value for name, value in values.items() if mode in FLAG_SCOPES.get(name, (mode,))}
    offered = modes.BY_NAME[mode].offers
    return rules.compose(DECLARATIONS, mode, cluster, in_scope, given, flag_defaults(), offered)


def needs_model_shapes(settings):
    """Whether a declaration of the run checks what only the model's shapes tell (check_model)."""
    return any(d.check_shapes for d in settings.declarations_on)


def check_model(settings, shapes):
    """Each on declaration's check of the model: `shapes`, of every trainable variable (model.trainable_shapes)."""
    values = {**settings.option_values, "mode": settings.mode}
    for declaration in settings.declarations_on:
        if declaration.check_shapes:
            declaration.check_shapes(values, settings.cluster, shapes)


def check_run_fits(cluster, mode, flag_values=FLAGS):
    """check_run for the tools that start a run's tasks, from their parsed `flag_values` of the run and
    mode-option groups: what the tasks will check, first."""
    values = {name: flag_values[name].value for name in flag_values}
    return check_run(mode, cluster, values, given_flags(flag_values))


def check_flag_scopes(mode, names=tuple(FLAG_SCOPES), flag_values=FLAGS):
    """Raises ConfigError for a flag of `names` given for a run of `mode` it does not apply to."""
    for name in names:
        scope = FLAG_SCOPES[name]
        if name in flag_values and flag_values[name].present and mode not in scope:
            if mode == NO_CLUSTER:
                raise ConfigError(
                    f"--{name} applies only to cluster tasks, and no cluster was given "
                    "(--cluster_spec, --ps_hosts/--worker_hosts or TF_CONFIG)"
                )
            raise not_for_mode(name, mode, scope)


def check_values_in_scope(mode, values, given):
    """Raises ConfigError for a declared flag given, or whose value is not its default, in a run of `mode` it
    does not apply to: Settings made without parsing (the tests, the bench's peers) cannot slip one past the
    scopes."""
    for name, scope in DECLARED_SCOPES.items():
        if mode in scope or name not in values:
            continue
        if name in given or as_settings_value(values[name]) != flag_defaults()[name]:
            raise not_for_mode(name, mode, scope)


def not_for_mode(name, mode, scope):
    """The refusal of flag `name` in a run of `mode`, with the reason its declaration gives, if any."""
    declared = DECLARED_BY.get(name)
    why = f": {declared.why_not_other_modes}" if declared and declared.why_not_other_modes else ""
    return ConfigError(f"--{name} does not apply to --mode={mode}; it is for {rules.scope_named(scope)}{why}")


def given_task_flags(mode, flag_values=FLAGS):
    """The run and mode-option flags the user gave, as arguments for a task of `mode` ('single' for the
    one-process reference), leaving out the declared flags that do not apply to it."""
    names = [*CORE_RUN_FLAGS, *(name for name, scope in DECLARED_SCOPES.items() if mode in scope)]
    return [flag_values[name].serialize() for name in names if name in flag_values and flag_values[name].present]


def spare_workers(cluster):
    """For the launcher: how many non-chief workers of `cluster` the run's flags let it lose and go on."""
    values = {name: FLAGS[name].value for name in techniques.flag_scopes()}
    return techniques.spare_workers(check_run_fits(cluster, FLAGS.mode).names, values, cluster)


def as_settings_value(value):
    """A flag's value as Settings holds it: a list flag's (a list of strings) as a tuple of ints."""
    return tuple(int(item) for item in value) if isinstance(value, (list, tuple)) else value


@cache
def defined_flags():
    """Every run and mode-option flag, defined in FlagValues of their own: their types and defaults."""
    scratch = flags.FlagValues()
    define_mode_option_flags(scratch)
    define_run_flags(scratch)
    return scratch


@cache
def flag_defaults():
    """{name: default} of every run and mode-option flag, as Settings holds it."""
    return {name: as_settings_value(defined_flags()[name].default) for name in defined_flags()}
