"""What a recipe says: its name, its model, its data (and loss). The library does the rest."""

from __future__ import annotations  # the types name TensorFlow's, which is imported on first use (compat.py)

import dataclasses
from collections.abc import Callable

from parallel_tf.backports import Protocol
from parallel_tf.compat import tf
from parallel_tf.graph.model import mean_cross_entropy


class ModelFn(Protocol):
    def __call__(self, features: tf.Tensor, num_classes: int) -> tf.Tensor:
        """The logits of `features`, built from get_variable and tf.nn ops."""


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    model_fn: ModelFn
    datasets: dict  # --dataset name -> (settings) -> data.Dataset; the first is the default
    # optional (images, step, positions, settings) -> images, see data/sharding.py
    augment: Callable | None = None
    loss_fn: Callable[[tf.Tensor, tf.Tensor], tf.Tensor] = mean_cross_entropy  # (labels, logits) -> the mean loss
