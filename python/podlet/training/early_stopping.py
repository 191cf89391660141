"""flax.training.early_stopping: stop when a metric has not improved for a while.

    early_stop = EarlyStopping(min_delta=1e-3, patience=2)
    for epoch in range(num_epochs):
        ...
        early_stop = early_stop.update(eval_loss)
        if early_stop.should_stop:
            break
"""
import math

from .. import struct

__all__ = ["EarlyStopping"]


class EarlyStopping(struct.PyTreeNode):
    """Early stopping state (an immutable pytree; ``update`` returns a new one).

    Attributes:
      min_delta: the smallest decrease of the metric that counts as an improvement.
      patience: how many updates without improvement are tolerated before stopping.
      best_metric: the best (lowest) metric so far.
      patience_count: updates since the last improvement.
      should_stop: whether the patience ran out.
      has_improved: whether the last ``update`` improved on ``best_metric`` by more than
        ``min_delta``.
    """
    min_delta: float = 0
    patience: int = 0
    best_metric: float = float("inf")
    patience_count: int = 0
    should_stop: bool = False
    has_improved: bool = False

    def reset(self):
        return self.replace(best_metric=float("inf"), patience_count=0, should_stop=False, has_improved=False)

    def update(self, metric):
        """The state after observing `metric` (lower is better)."""
        if math.isinf(self.best_metric) or self.best_metric - metric > self.min_delta:
            return self.replace(best_metric=metric, patience_count=0, has_improved=True)
        should_stop = self.patience_count >= self.patience or self.should_stop
        return self.replace(patience_count=self.patience_count + 1, should_stop=should_stop, has_improved=False)
