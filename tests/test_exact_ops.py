"""A portable run executes only the ops of graph/exact_ops.py's allow-list, as TensorFlow runs them after its graph
optimizer: every training run of the suite checks its own (training/op_check.py, the pair test's configurations
included), and the runs here cover what the pair test does not (the recipes, the optimizers, the values at which
Grappler rewrites a quotient). Adagrad's update is exact, worked out by hand."""

import numpy as np
import pytest
from inprocess import train
from models import CIFAR10, CNN, DEFAULTS, DIGITS, MLP

from parallel_tf.compat import tf
from parallel_tf.data import datasets
from parallel_tf.graph import exact_math, exact_ops, layers, optimizers
from parallel_tf.training import op_check
from parallel_tf.training.recipe import Recipe

pytestmark = pytest.mark.inprocess

SYNTHETIC_CIFAR10 = datasets.synthetic_cifar10(DEFAULTS, num_train=16, num_eval=8)
ONE_STEP = {"train_steps": 1, "global_batch_size": 8, "learning_rate": 0.1, "log_every": 1}


@pytest.mark.parametrize("optimizer", sorted(optimizers.OPTIMIZERS))
@pytest.mark.parametrize(
    "recipe, data",
    [(MLP, DIGITS), (CNN, DIGITS), (Recipe(name="cifar10", model_fn=CIFAR10.model, datasets={}), SYNTHETIC_CIFAR10)],
    ids=["mlp", "cnn", "cifar10"],
)
def test_every_recipe_trains_with_every_optimizer_on_ops_of_the_list(tmp_path, recipe, data, optimizer):
    """The trainer's op check refuses a run that executes an op off the list (exit 2): these runs end."""
    summary = train(recipe, data, tmp_path, "single", optimizer=optimizer, **ONE_STEP)["summary"]
    assert summary["kernels"]["bits"] == "portable"


@pytest.mark.parametrize(
    "mode, flags",
    [
        ("sync", {"clip_norm": 1.0}),  # threshold / max(norm, threshold): 1 / y, which constant folding rewrites
        ("sync", {"gradient_compression": "qsgd:1"}),  # 1 / a bucket's norm
        ("async", {"adaptive_delay_compensation": 1.0}),  # 1 / sqrt(mean square + ε): both rewrites
        ("sync", {"lr_schedule": "cosine", "lr_decay_steps": 4}),
    ],
    ids=["clip 1", "qsgd 1", "adaptive DC 1", "cosine"],
)
def test_the_quotients_grappler_rewrites_into_approximations_stay_exact(tmp_path, mode, flags):
    summary = train(MLP, DIGITS, tmp_path, mode, **{**ONE_STEP, "train_steps": 2, **flags})["summary"]
    assert summary["kernels"]["bits"] == "portable"


def test_a_technique_that_divides_one_by_a_tensor_is_refused_naming_the_op(tmp_path, monkeypatch):
    """Made up: clipping with its quotient written `1 / y`, as a technique might be; at --clip_norm=1 constant
    folding makes it Reciprocal (RCPPS), and the run stops on its first step, naming the op and its node."""
    monkeypatch.setattr(exact_ops, "quotient", lambda x, y: x / y)
    with pytest.raises(AssertionError, match=r"--kernels=portable: this run executes Reciprocal \(node truediv"):
        train(MLP, DIGITS, tmp_path, "sync", clip_norm=1.0, **ONE_STEP)


def test_a_recipe_with_tensorflows_own_product_is_refused(tmp_path):
    """tf.matmul instead of parallel_tf.graph.layers: TensorFlow's product, whose order follows the CPU."""
    recipe = Recipe(
        name="own_product",
        model_fn=lambda x, n: tf.matmul(x, tf.get_variable("w", [x.shape[1], n], initializer=tf.zeros_initializer())),
        datasets={},
    )
    with pytest.raises(AssertionError, match=r"executes MatMul \(node model\w*/MatMul\): TensorFlow's own product"):
        train(recipe, DIGITS, tmp_path, "single", **ONE_STEP)


def test_tensorflows_bias_gradient_is_refused(tmp_path):
    """tf.nn.bias_add with TensorFlow's gradient: BiasAddGrad, whose sum the thread count cuts."""

    def model(x, n):
        weights = tf.get_variable("w", [x.shape[1], n], initializer=tf.zeros_initializer())
        return tf.nn.bias_add(layers.matmul(x, weights), tf.get_variable("b", [n], initializer=tf.zeros_initializer()))

    recipe = Recipe(name="own_bias", model_fn=model, datasets={})
    with pytest.raises(AssertionError, match=r"executes BiasAddGrad \(node \S+\): TensorFlow's bias gradient cuts"):
        train(recipe, DIGITS, tmp_path, "single", **ONE_STEP)


def test_a_bias_gradient_is_summed_in_order():
    """Upstream gradients 1e8, 1, -1e8, 1 at four positions (2 images x 2 pixels) of one channel: in order,
    1e8 + 1 rounds to 1e8 (float32's spacing there is 8), + -1e8 gives 0, + 1 gives 1. Summed in two halves
    (a tree or a cut by threads), (1e8 + 1) + (-1e8 + 1) = 1e8 - 1e8 = 0. The second channel's 1, 2, 3, 4 are 10."""
    upstream = np.float32([1e8, 1, 1, 2, -1e8, 3, 1, 4]).reshape(2, 2, 1, 2)
    with tf.Graph().as_default(), tf.Session() as sess:
        outputs, biases = tf.zeros([2, 2, 1, 2]), tf.zeros([2])
        biased = layers.add_bias(outputs, biases)
        gradient = sess.run(tf.gradients(biased, biases, grad_ys=tf.constant(upstream))[0])
    assert gradient.tolist() == [1.0, 10.0]


def test_the_list_names_what_it_refuses_and_why():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [16])
        tf.math.rsqrt(tf.math.reciprocal(x), name="r")
    assert exact_ops.off_the_list([graph.as_graph_def()]) == {"Reciprocal": "Reciprocal", "Rsqrt": "r"}
    with pytest.raises(op_check.ConfigError, match=r"executes Reciprocal \(node Reciprocal\) \(and Rsqrt\): Eigen's "):
        op_check.refuse_off_the_list([graph.as_graph_def()])
    assert set(exact_ops.REFUSED) & exact_ops.ALLOWED == exact_ops.IN_FLOAT64_ONLY  # refused in float32 alone


def test_adagrad_under_portable_kernels_divides_by_the_square_root_bit_for_bit():
    """Adagrad (accumulator from 0.1, TensorFlow's default): accum ← accum + g², w ← w − lr·g / √accum, each
    operation rounded once in float32, the square root correctly rounded (exact_math.sqrt), every op on the list.
    By hand for g = 0.5, lr = 0.02, w = 1: accum = 0.1 + 0.25 = 0.35, w = 1 − 0.01 / √0.35 = 0.98309691...; here
    on 64 values (Eigen vectorises 8 and more), against numpy."""
    rng = np.random.RandomState(0)
    w0, g = rng.randn(64).astype(np.float32), rng.randn(64).astype(np.float32)
    g[0], w0[0] = 0.5, 1.0
    lr = np.float32(0.02)
    with tf.Graph().as_default(), tf.Session() as sess:
        w = tf.get_variable("w", initializer=w0)
        step = optimizers.make_optimizer("adagrad", 0.02).apply_gradients([(tf.constant(g), w)])
        sess.run(tf.global_variables_initializer())
        sess.run(step)
        got = sess.run(w)
        op_check.refuse_off_the_list([tf.get_default_graph().as_graph_def()])
    accum = np.float32(0.1) + g * g
    expected = w0 - (g * lr) / np.sqrt(accum)
    assert got[0] == np.float32(1) - np.float32(0.01) / np.sqrt(np.float32(0.35))
    assert got.tobytes() == expected.tobytes()


def test_exact_exp_is_within_2_ulp_and_the_square_root_is_correctly_rounded():
    """exp: e^0 = 1 and e^(k ln 2) = 2^k exactly where the reduction leaves r = 0 (k = 0, 1, -3, 10); over [-87, 88]
    within 2 ulp of the float64 value. sqrt: numpy's float32 sqrt is IEEE's, correctly rounded: the same bits."""
    xs = np.concatenate([np.linspace(-87, 88, 20001, dtype=np.float32), np.float32([0, -1e-7, 1e-7])])
    positives = np.abs(np.random.RandomState(1).randn(4096).astype(np.float32)) * 1e3
    with tf.Graph().as_default(), tf.Session() as sess:
        got_exp, got_sqrt = sess.run([exact_math.exp(tf.constant(xs)), exact_math.sqrt(tf.constant(positives))])
        powers = sess.run(exact_math.exp(tf.constant(np.float32([0, 0.693359375 - 2.12194440e-4]))))
    truth = np.exp(xs.astype(np.float64))
    ulps = np.abs(got_exp.astype(np.float64) - truth) / np.spacing(truth.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 2, ulps.max()
    assert got_sqrt.tobytes() == np.sqrt(positives).tobytes()
    assert powers[0] == 1.0 and abs(powers[1] - 2.0) <= np.spacing(np.float32(2))


def test_the_cross_entropy_s_gradient_is_softmax_minus_the_label():
    """Logits [[0, ln 3]] of 2 classes, label 1: softmax = [1/4, 3/4], so the gradient is [1/4, -1/4] (3/4 − 1), the
    loss −ln(3/4) = 0.28768..., both within float32's rounding."""
    with tf.Graph().as_default(), tf.Session() as sess:
        logits = tf.constant([[0.0, np.log(3.0)]], tf.float32)
        loss = exact_math.sparse_softmax_cross_entropy(tf.constant([1], tf.int64), logits)
        value, gradient = sess.run([loss, tf.gradients(loss, logits)[0]])
    assert value[0] == pytest.approx(-np.log(0.75), rel=1e-6)
    assert gradient == pytest.approx(np.array([[0.25, -0.25]]), abs=1e-7)
