"""The one kind of error a user can fix: reported as one paragraph and exit status 2.

Every command of the project raises :class:`UserError` (or a subclass) for a mistake in what
it was given (a path, a file's content, an option, a checkpoint) and lets anything else, a bug,
keep its traceback. The message says what is wrong, where (file, line, column or option), and
what to do about it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

USAGE_EXIT_CODE = 2
Task = TypeVar("Task", bound=Callable)
_TASK_STARTED: list[str] = []  # commands whose task function began (vs. Hydra's own errors)


class UserError(Exception):
    """A mistake in a command's input, reported without a traceback (exit status 2)."""


def exit_on_user_error(command: str) -> Callable[[Task], Task]:
    """Decorate a command's Hydra task function: a :class:`UserError` becomes one paragraph on
    stderr (``<command>: error: ...``) and exit status 2; any other exception keeps its
    traceback (it is a bug)."""

    def decorate(task: Task) -> Task:
        @functools.wraps(task)
        def run(*args, **kwargs):
            _TASK_STARTED.append(command)
            try:
                return task(*args, **kwargs)
            except UserError as error:
                print(f"{command}: error: {error}", file=sys.stderr)
                sys.exit(USAGE_EXIT_CODE)

        return run  # type: ignore[return-value]

    return decorate


def run_command(hydra_main: Callable[[], object]) -> None:
    """Run a ``@hydra.main`` entry point; an invalid override or config choice (Hydra prints
    it and exits 1 before the task starts) exits 2 like every other user error."""
    _TASK_STARTED.clear()
    try:
        hydra_main()
    except SystemExit as exit:
        if exit.code == 1 and not _TASK_STARTED:
            sys.exit(USAGE_EXIT_CODE)
        raise
