"""When the periodic exchanges of async and hierarchical training happen: pure functions of the step.

Kept free of TensorFlow so the exchange steps are tested on their own, and so the counts in the
metrics can be checked against them.
"""


def fetches_before(step, fetch_every):
    """Downpour's n_fetch: a worker refreshes its copy of the parameters before steps 0, n, 2n, ..."""
    return step % fetch_every == 0


def sends_after(step, send_every, train_steps):
    """Downpour's n_push, and a group's exchange with the central ps: after steps n-1, 2n-1, ...,
    and after the last step whatever n is, so no summed gradient is left unsent."""
    done = step + 1
    return done % send_every == 0 or done == train_steps
