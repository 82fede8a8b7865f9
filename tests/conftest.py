"""Shared fixtures: the real datasets, and the material the command-line tests run on."""

import os
from pathlib import Path

import pytest

from recsys_seq.data.shared import SHARED_DATA_ENV, shared_data_dir


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real public datasets (``$RECSYS_SEQ_DATA``, else ``../shared/data``).

    Missing data skips the test on a developer machine but FAILS it in CI (``CI=true``), so a
    broken data mount can never turn the integration tests silently green.
    """
    folder = shared_data_dir()
    if not folder.is_dir():
        message = f"real datasets not found at {folder} (set {SHARED_DATA_ENV})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    return folder


@pytest.fixture(scope="session")
def materials(tmp_path_factory):
    """A raw log, two prepared datasets and a checkpoint trained on one of them, made once per
    session with the real commands (:func:`tests.test_cli_hostile.make_materials`)."""
    from tests.test_cli_hostile import make_materials

    return make_materials(tmp_path_factory.mktemp("materials"))
