"""Prep on a tiny file written in the test's folder."""

from pathlib import Path

import polars as pl
import pytest

from data_prep import prepare, schema
from recsys_seq.core.errors import UserError

# (tests/test_prep_log_values.py, tests/test_prep_option_values.py)


def write(tmp_path: Path, name: str, content: str | bytes | pl.DataFrame) -> Path:
    path = tmp_path / name
    if isinstance(content, pl.DataFrame):
        content.write_parquet(path)
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def run(tmp_path: Path, src: Path, **cfg) -> dict:
    return prepare({"input": src, "output": tmp_path / "out", "min_user_events": 1, **cfg})


def history(tmp_path: Path) -> tuple[list, list[int]]:
    """The first user's items (original ids) and timestamps, in time order."""
    items = pl.read_parquet(tmp_path / "out" / schema.ITEMS_FILE)
    back = dict(zip(items[schema.ITEM], items[schema.ORIGINAL_ID], strict=True))
    seqs = pl.read_parquet(tmp_path / "out" / schema.SEQUENCES_FILE)
    return [back[i] for i in seqs[schema.ITEMS][0]], seqs[schema.TIMESTAMPS][0].to_list()


def refused(tmp_path: Path, src: Path, fragments: list[str], **cfg) -> str:
    """The job's one-paragraph refusal (a PrepError for the log, an OptionError for an
    option), naming every fragment, with nothing written."""
    with pytest.raises(UserError) as err:
        run(tmp_path, src, **cfg)
    message = str(err.value)
    assert "\n" not in message.strip(), message  # one paragraph
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert not (tmp_path / "out").exists()
    return message
