"""Stage-by-stage progress for long prep jobs: a rich spinner while a stage runs, and a line
with its duration when it ends (so logs of non-interactive runs show where time went)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext


def quiet(_name: str) -> nullcontext:
    """The progress reporter of library calls: silent."""
    return nullcontext()


def console_stages():
    """A progress reporter writing to stderr (stdout stays for the summary table)."""
    from rich.console import Console

    console = Console(stderr=True)

    @contextmanager
    def stage(name: str) -> Iterator[None]:
        start = time.perf_counter()
        with console.status(f"[bold]{name}[/] ..."):
            yield
        console.log(f"{name}: {time.perf_counter() - start:.1f} s")

    return stage
