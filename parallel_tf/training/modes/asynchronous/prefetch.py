"""--prefetch (async, on by default): a step's fetch ends the previous step's session run, once its
push is sent, so a step is one run instead of two (modes/asynchronous/__init__.py). The techniques that must
read as a step begins (a straggler's pause, a local update) settle --noprefetch; SSP's gate is part of the
step before, ahead of its fetch. The trainer counts its session runs (`session_runs`)."""

from parallel_tf.training.declarations import Flags, Option, flag


class Options(Flags):
    prefetch: bool = flag(
        True,
        "async: refresh a worker's copy for its next step at the end of this step's run, once its push is "
        "sent, so a step is one session run, not two; --noprefetch: at the start of the next step.",
    )


OPTION = Option(name="prefetch", modes=("async",), options=Options, enabled=lambda values, cluster: values["prefetch"])
