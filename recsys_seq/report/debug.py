"""Whether a run was a debug run, and why: such runs are left out of a report by default.

A debug run measured on a few batches (``debug=fast``: ``trainer.fast_dev_run``; or
``trainer.limit_*_batches`` / ``overfit_batches`` set, as the trainer config suggests for a
shorter run), so its metrics are not comparable with a real run's. What makes it one is read
from the run's own files: the ``debug=...`` override (``.hydra/overrides.yaml``), Hydra's
config choice (``.hydra/hydra.yaml``), or the trainer values in the run's config.
"""

from __future__ import annotations

# a limit that keeps everything: None (not set) or the float 1.0 (all batches); the int 1
# means one batch
LIMITS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
)
NONE_CHOSEN = ("null", "none", "")


def debug_reason(config: dict, overrides: list[str], debug_choice: object) -> str | None:
    """The first sign that the run was a debug run, as ``key=value``; None for a real run.

    Args:
        config: the run's config.yaml (plain data).
        overrides: the Hydra overrides that made the run.
        debug_choice: Hydra's choice for the ``debug`` config group (``.hydra/hydra.yaml``),
            None when the run has no such file or chose none.
    """
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        if key == "debug" and value.strip().lower() not in NONE_CHOSEN:
            return override.lstrip("+~")
    if isinstance(debug_choice, str) and debug_choice.strip().lower() not in NONE_CHOSEN:
        return f"debug={debug_choice}"
    trainer = config.get("trainer")
    if not isinstance(trainer, dict):
        return None
    fast = trainer.get("fast_dev_run")
    if fast is True or (type(fast) is int and fast > 0):
        return f"trainer.fast_dev_run={_shown(fast)}"
    overfit = trainer.get("overfit_batches")
    if type(overfit) in (int, float) and overfit > 0:
        return f"trainer.overfit_batches={overfit}"
    for limit in LIMITS:
        value = trainer.get(limit)
        if value is not None and not (type(value) is float and value == 1.0):
            return f"trainer.{limit}={_shown(value)}"
    return None


def _shown(value: object) -> str:
    return "true" if value is True else str(value)
