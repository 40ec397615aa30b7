"""Bytes a worker sends and receives per step, counted from the tensors of its step that cross tasks,
checked against what each step must move, worked out by hand."""

import pytest
from inprocess import half_mean_square, scalar_dataset, scalar_recipe, train
from models import DIGITS, MLP

from parallel_tf.compat import tf
from parallel_tf.training import traffic

pytestmark = pytest.mark.inprocess

QUADRATIC = scalar_recipe(half_mean_square, w0=0.0)


def per_step(run):
    summary = run["summary"]
    return summary["bytes_sent_per_step"], summary["bytes_received_per_step"]


FLOAT_GRADIENT = 4  # one float parameter
BESIDES_THE_GRADIENT = 4  # its loss to the barrier
RECEIVED = 4 + 2 * 8  # w, and every worker's (index, loss)


@pytest.mark.parametrize(
    "flags, sent",
    [({}, FLOAT_GRADIENT), ({"gradient_compression": "8bit"}, 1 + 4)],
    ids=["float", "8bit"],
)
def test_the_chief_of_ordered_sync_sends_and_receives_what_its_step_needs(tmp_path, flags, sent):
    """One float parameter, two workers. The chief sends its gradient (4 bytes; 8bit: an int8 and a
    float32 scale) and its loss to the barrier (4); it receives w (4) and every worker's (index, loss)
    (2 × 8). (The barrier's constants, its index, the count it dequeues and the release token, are made
    on the ps, as are the gradient slot's index, the learning rate and the global step's increment.)"""
    run = train(QUADRATIC, scalar_dataset(1, 3), tmp_path, "sync", **flags)
    assert per_step(run) == (sent + BESIDES_THE_GRADIENT, RECEIVED)
    assert [(m["bytes_sent_per_step"], m["bytes_received_per_step"]) for m in run["metrics"]] == [per_step(run)] * 3


def test_compression_saves_what_its_codec_says_on_the_mlp(tmp_path):
    """The digits MLP's 4 variables hold 64·128 + 128 + 128·10 + 10 = 9610 floats: 38440 bytes of
    gradient; 8bit sends 9610 int8 and 4 float32 scales, 9626 bytes. Nothing else changes."""
    flags = {"global_batch_size": 120, "train_steps": 4, "learning_rate": 0.1, "log_every": 2}
    floats = train(MLP, DIGITS, tmp_path / "float", "sync", **flags)
    eight = train(MLP, DIGITS, tmp_path / "8bit", "sync", gradient_compression="8bit", **flags)
    assert per_step(floats)[0] - per_step(eight)[0] == 38440 - 9626
    assert per_step(floats)[1] == per_step(eight)[1] >= 38440  # the parameters it reads
    assert eight["summary"]["bytes_per_push"] == 9626 and eight["summary"]["float_bytes_per_push"] == 38440


def test_a_single_process_sends_nothing(tmp_path):
    assert per_step(train(QUADRATIC, scalar_dataset(1, 3), tmp_path, "single")) == (0, 0)


@pytest.mark.parametrize(
    "num_workers, flags, each_way",
    [
        (2, {}, 2 * 1 * (38440 + 2 * 4) // 2),
        (4, {}, 2 * 3 * (38440 + 4 * 4) // 4),
        (2, {"strict_determinism": True, "microbatches": 4}, 1 * 2 * (38440 + 4)),
    ],
    ids=["2 workers", "4 workers", "strict, 2 workers"],
)
def test_allreduce_moves_what_its_ring_moves_on_the_mlp(tmp_path, num_workers, flags, each_way):
    """The MLP's 38440 bytes of gradient and a float slot per worker for the losses, all-reduced by a ring:
    2(N-1)/N of them each way. Strict gathers each worker's M/N microbatch rows of 38440 + 4 bytes (its loss
    rides along) from the N-1 others: with M = 4, N = 2, twice the all-reduce's bytes."""
    flags = {"global_batch_size": 120, "train_steps": 2, "learning_rate": 0.1, "log_every": 2, **flags}
    run = train(MLP, DIGITS, tmp_path, "allreduce", num_workers=num_workers, **flags)
    assert per_step(run) == (each_way, each_way)


def test_each_server_carries_its_share_of_the_split_variables(tmp_path):
    """The MLP on two parameter servers: variables of more than 1 KB in two pieces along their first axis,
    hidden/weights as two [32, 128] (16,384 bytes each), logits/weights as two [64, 10] (2,560), the
    biases whole (512, 40); each placed on the server holding fewer bytes so far, in the order they are made:
    16,384 on ps:0, 16,384 on ps:1, 512 on ps:0, 2,560 on ps:1, 2,560 on ps:0, 40 on ps:1: 19,456 and 18,984
    bytes, within one variable of half the model each. The chief writes its gradients to each and reads the
    parameters back; its loss rides to ps:0 (4 bytes), and its report, two indices and two losses, comes
    back from there (16)."""
    summary = train(MLP, DIGITS, tmp_path, "sync", num_ps=2, global_batch_size=120, train_steps=3)["summary"]
    assert summary["bytes_per_step_by_server"] == {
        "ps:0": {"sent": 19456 + 4, "received": 19456 + 16},
        "ps:1": {"sent": 18984, "received": 18984},
    }
    assert (summary["bytes_sent_per_step"], summary["bytes_received_per_step"]) == (38444, 38456)


def test_a_collective_it_cannot_count_is_refused_not_counted_as_nothing():
    """A broadcast (CollectiveBcastSend: a tree, not the ring) in a step: its bytes have no count here, so the walk
    names it instead of reporting the step's traffic short."""
    with tf.Graph().as_default():
        sent = tf.raw_ops.CollectiveBcastSend(input=tf.zeros([3]), group_size=2, group_key=1, instance_key=1, shape=[3])
        with pytest.raises(NotImplementedError, match=r"not of CollectiveBcastSend \(CollectiveBcastSend\)"):
            traffic.step_bytes(sent, ("worker", 0))
