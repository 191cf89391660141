"""podlet.optim.contrib: optax.contrib's optimizers (optax 0.2.8).

    import podlet.optim as optax
    tx = optax.contrib.schedule_free_adamw(1e-3, warmup_steps=100)
    eval_params = optax.contrib.schedule_free_eval_params(opt_state, params)
    tx = optax.chain(optax.adam(1e-3), optax.contrib.reduce_on_plateau(patience=5))
"""
from ._reduce_on_plateau import ReduceLROnPlateauState, reduce_on_plateau
from ._schedule_free import (ScheduleFreeState, schedule_free, schedule_free_adamw, schedule_free_eval_params,
                             schedule_free_sgd)

__all__ = ["ReduceLROnPlateauState", "reduce_on_plateau", "ScheduleFreeState", "schedule_free",
           "schedule_free_adamw", "schedule_free_eval_params", "schedule_free_sgd"]
