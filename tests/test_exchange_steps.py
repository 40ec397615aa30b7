import math

import pytest

from parallel_tf.graph.exchange_steps import fetches_before, sends_after


@pytest.mark.parametrize("train_steps, every", [(12, 1), (12, 3), (12, 5), (7, 7), (5, 9)])
def test_sends_happen_every_n_steps_and_after_the_last(train_steps, every):
    sent_after = [step for step in range(train_steps) if sends_after(step, every, train_steps)]
    assert sent_after[-1] == train_steps - 1  # nothing summed is left unsent
    assert len(sent_after) == math.ceil(train_steps / every)
    assert sent_after[:-1] == list(range(every - 1, train_steps - 1, every))


def test_fetch_before_steps_0_n_2n():
    assert [step for step in range(10) if fetches_before(step, 4)] == [0, 4, 8]
    assert all(fetches_before(step, 1) for step in range(10))
