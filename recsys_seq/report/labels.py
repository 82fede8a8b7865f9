"""What tells the runs of a figure apart: each run's label shows only the overrides in which
it differs from the other runs of its panel; overrides shared by a whole panel are said once in
the panel's title, and those shared by every run once in the figure's caption.

Overrides that do not say what a run is are left out everywhere: the model choice (each label
starts with the model's name), the dataset (each panel is one dataset), where files go
(``paths.``, ``hydra.``), the logger and the console's callbacks.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from recsys_seq.report.runs import Run

SKIPPED = (
    "model=",
    "data=",
    "data.path=",
    "paths.",
    "hydra.",
    "logger",
    "callbacks.progress_bar",
    "callbacks.model_summary",
)
CAPTION_WIDTH = 110  # characters per caption line (one override is never split)


def shown_overrides(run: Run) -> list[str]:
    """The run's overrides that say what it is (not :data:`SKIPPED`), ``+`` prefixes kept."""
    return [o for o in run.overrides if not o.lstrip("+~").startswith(SKIPPED)]


def shared(runs: Sequence[Run]) -> list[str]:
    """The shown overrides every one of ``runs`` has, in the first run's order."""
    if not runs:
        return []
    rest = [set(shown_overrides(r)) for r in runs[1:]]
    return [o for o in shown_overrides(runs[0]) if all(o in s for s in rest)]


def labels(runs: Sequence[Run], known: Sequence[str]) -> list[str]:
    """One label per run, one line per item: the model, then the run's overrides not in
    ``known`` (said in a title already). Runs that would look alike also get their folder
    name; a debug run not made by an override says why it is one."""
    lines = [
        [r.model, *(o for o in shown_overrides(r) if o not in known)]
        + ([f"[debug: {r.debug}]"] if r.debug and r.debug not in r.overrides else [])
        for r in runs
    ]
    seen = [tuple(line) for line in lines]
    return [
        "\n".join(line + ([f"({r.name})"] if seen.count(tuple(line)) > 1 else []))
        for r, line in zip(runs, lines, strict=True)
    ]


def caption(overrides: Sequence[str], prefix: str) -> str:
    """``prefix`` and the overrides, wrapped between overrides (never inside one)."""
    if not overrides:
        return ""
    text = f"{prefix}: " + "  ".join(overrides)
    return "\n".join(textwrap.wrap(text, CAPTION_WIDTH, break_long_words=False))
