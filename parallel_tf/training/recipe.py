"""What a recipe says: its name, its model, its data (and loss). The library does the rest."""

import dataclasses

from parallel_tf.graph.model import mean_cross_entropy


@dataclasses.dataclass(frozen=True)
class Recipe:
    name: str
    model_fn: object  # (features, num_classes) -> logits
    datasets: dict  # --dataset name -> (settings) -> data.Dataset; the first is the default
    augment: object = None  # optional (images, step, positions, settings) -> images, see data/sharding.py
    loss_fn: object = mean_cross_entropy  # (labels, logits) -> the mean loss over the fed examples
