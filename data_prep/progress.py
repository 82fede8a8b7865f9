"""Stage-by-stage progress for long prep jobs: one line per finished stage with its duration,
on stderr (stdout stays for the summary table), so a log shows where the time went.

In a terminal a spinner names the running stage; elsewhere (a log, a pipe) only the finished
lines are written, as plain text. Lines are never wrapped or decorated by rich (no time or
``file:line`` columns): a narrow terminal wraps them itself, a log keeps them whole.

The duration is the wall time of the work inside the stage's block. The job's stages each
collect their Polars plans inside their own block (nothing lazy is handed on to be run by a
later stage), so each line times the work it names. Hashing the input and, for a temporal
split without ``split_cut``, finding the cut run between stages and are in no line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import TextIO

from rich.console import Console
from rich.text import Text


def quiet(_name: str) -> nullcontext:
    """The progress reporter of library calls: silent."""
    return nullcontext()


def console_stages(file: TextIO | None = None):
    """A progress reporter writing to ``file`` (stderr): ``stage(name)`` is a context manager
    that shows a spinner while its block runs (terminals only) and then prints
    ``<name>: <duration>``."""
    file = sys.stderr if file is None else file
    console = Console(file=file, highlight=False)

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        start = time.perf_counter()
        if console.is_terminal:
            spinner = Text(f"{name} ...")  # one line, so that it is redrawn in place
            spinner.truncate(max(console.width - 2, 8), overflow="ellipsis")
            with console.status(spinner):
                yield
        else:
            yield
        file.write(f"{name}: {duration(time.perf_counter() - start)}\n")
        file.flush()

    return stage


def duration(seconds: float) -> str:
    """``0.042`` -> ``42 ms``, ``3.14`` -> ``3.1 s``, ``125`` -> ``2 min 05 s``: short
    stages are not shown as ``0.0 s``."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
