import numpy as np

from parallel_tf.training.outputs import params_sha256


def test_fingerprint_follows_names_not_insertion_order():
    a = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.zeros(3, np.float32)}
    b = {"b": a["b"].copy(), "w": a["w"].copy()}
    assert params_sha256(a) == params_sha256(b)


def test_fingerprint_sees_a_one_ulp_change():
    params = {"w": np.ones(4, np.float32)}
    nudged = {"w": params["w"].copy()}
    nudged["w"][2] = np.nextafter(np.float32(1), np.float32(2))
    assert params_sha256(params) != params_sha256(nudged)
