"""podlet.training: flax.training's train state (``from podlet.training import train_state``)."""
from . import train_state  # noqa: F401
