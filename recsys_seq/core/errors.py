"""The one kind of error a user can fix: reported as one paragraph and exit status 2.

Every command of the project raises :class:`UserError` (or a subclass) for a mistake in what
it was given (a path, a file's content, an option, a checkpoint) and lets anything else, a bug,
keep its traceback. The message says what is wrong, where (file, line, column or option), and
what to do about it.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import NoReturn, TypeVar

from recsys_seq.core import targets

USAGE_EXIT_CODE = 2
Task = TypeVar("Task", bound=Callable)
_TASK_STARTED: list[str] = []  # commands whose task function began (vs. Hydra's own errors)
_COMMAND: list[str] = []  # the command run_command is running
_CLEANUPS: list[Callable[[], None]] = []  # undo what was made for a run that is refused


def on_user_error(cleanup: Callable[[], None]) -> None:
    """Call ``cleanup`` if this command ends with a user error (e.g. remove the run folder
    Hydra created for a run that never started)."""
    _CLEANUPS.append(cleanup)


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
                exit_with(command, error)

        return run  # type: ignore[return-value]

    return decorate


def run_command(hydra_main: Callable[[], object], command: str) -> None:
    """Run a ``@hydra.main`` entry point with Hydra's own errors reported like every other
    user error: an invalid override, an unknown config choice or an unreadable config (raised
    before the task starts) is one paragraph and exit status 2. An exception from inside the
    task that is not a :class:`UserError` is a bug and keeps its full traceback.

    Before Hydra starts, the config the command line composes is checked for class names
    outside the fixed tables of :mod:`recsys_seq.core.targets`: Hydra instantiates its launcher,
    sweeper and callbacks before the task runs."""
    _TASK_STARTED.clear()
    _COMMAND[:] = [command]
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing and exiting 1
    try:
        problems = targets.command_line_problems(hydra_main, sys.argv[1:])
        if problems:
            raise UserError(" ".join(problems))
        hydra_main()
    except Exception as error:
        if _TASK_STARTED and not isinstance(error, UserError):
            raise
        exit_with(command, error)


def exit_with(command: str | None, error: BaseException) -> NoReturn:
    """Print ``error`` as the command's one-paragraph message and exit with status 2 (also
    from places where an exception would be swallowed, such as Hydra's callbacks)."""
    name = command or (_COMMAND[0] if _COMMAND else "recsys-seq")
    print(f"{name}: error: {_paragraph(error)}", file=sys.stderr)
    while _CLEANUPS:
        _CLEANUPS.pop()()
    sys.exit(USAGE_EXIT_CODE)


def _paragraph(error: BaseException) -> str:
    """Hydra's (and OmegaConf's) multi-line message as one paragraph."""
    text = str(error)
    override = getattr(error, "override", None)  # Hydra's OverrideParseException
    if isinstance(override, str):
        text = f"Cannot parse the override {override!r}: {text}"
    cause = error.__cause__
    if cause is not None and type(cause).__module__.startswith("omegaconf"):
        text += "\n" + str(cause)
    text = text.split("Config search path:")[0]  # Hydra's internals, not the user's problem
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def first_line(error: BaseException) -> str:
    """``<type>: <first line of the message>`` (at most 200 characters): what a refusal quotes
    of an exception raised deep inside a library reading a damaged file."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:200]}" if lines else type(error).__name__
