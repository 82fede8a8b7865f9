"""Near misses answered with the nearest valid name: ``trainer.max_epoch`` -> "did you mean
trainer.max_epochs?". One rule for every place that refuses a name (an option, a config key,
a config group's choice), so they all answer alike."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.75  # difflib's similarity ratio: max_epoch/max_epochs 0.95, lr/wd 0.0


def nearest(name: str, choices: Iterable[str]) -> str | None:
    """The choice closest to ``name``, if one is close enough to be a typo of it."""
    found = difflib.get_close_matches(name, list(choices), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def unknown_names(names: Iterable[str], accepted: Iterable[str], where: str = "") -> str:
    """``Unknown option(s) trainer.max_epoch (did you mean trainer.max_epochs?)``: ``names``
    and ``accepted`` are keys inside ``where`` (a section such as ``trainer``, or empty)."""
    accepted = list(accepted)
    shown = []
    for name in names:
        guess = nearest(name, accepted)
        shown.append(
            _key(where, name) + (f" (did you mean {_key(where, guess)}?)" if guess else "")
        )
    return f"Unknown option(s) {', '.join(shown)}"


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
