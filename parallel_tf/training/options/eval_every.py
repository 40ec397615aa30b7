"""--eval_every=n (every mode): the chief evaluates the parameters on the held-out split every n steps
and after the last, logging eval_loss and eval_accuracy with that step's metrics. It reads the
parameters, not a worker's copy (async, hierarchical). With --steps_per_run it must fall between runs."""

from parallel_tf.training.declarations import EVERY_MODE, Flags, Option, flag


class Options(Flags):
    eval_every: int = flag(
        0,
        "The chief evaluates the parameters on the held-out split every this many steps (and after the last), "
        "logging eval_loss and eval_accuracy with that step's metrics. 0: only at the end.",
        lower_bound=0,
    )


OPTION = Option(
    name="eval_every",
    modes=EVERY_MODE,  # the trainer evaluates, whatever the mode
    options=Options,
)
