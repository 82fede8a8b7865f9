"""The prepared-dataset contract: the one place that names its files and columns.

A prepared dataset is a folder::

    sequences.parquet   one row per user, sorted by ``user``
    items.parquet       item index -> original id (+ training count, category, item attributes)
    users.parquet       user index -> original id
    meta.json           schema version, prep config, fingerprints, counts, length statistics
    length_histogram.png

``sequences.parquet`` holds whole (truncated) histories as parallel lists; splits are positions
into those lists, so every split is a view of the same data::

    user  items            timestamps        val_index  test_index
    0     [7, 3, 9, 4]     [t0, t1, t2, t3]  2          3          <- LOO: train on [7, 3],
    1     [5, 8, 2]        [...]             1          2             validate on 9, test on 4

* Item index 0 is PAD; real items are 1..N. Users are 0..U-1.
* ``original_id`` in ``items.parquet`` / ``users.parquet`` is the canonical id of
  :mod:`data_prep.ids` (``" 014"`` and ``14.0`` in the log are ``14``): Int64 when the log's
  column holds integers (or integral floats), else text. Compare ids given later through
  :func:`data_prep.ids.canonical_series` and :func:`data_prep.ids.read_id_list`.
* Lists are time ordered (ties broken by original row order) and keep the MOST RECENT events.
* The validation target is ``items[val_index]`` (its input is ``items[:val_index]``), the test
  target is ``items[test_index]`` (input ``items[:test_index]``); training uses
  ``items[:val_index]`` only. A null index means the user has no such target. A target always
  has at least one input event (an index is never 0).
* Side-feature lists (``category``, ``event``, ``gap``) have the same length as ``items``; their
  index 0 is PAD/unknown too. ``gap`` codes the time since the user's previous event in
  log2-second buckets (code 1 = first event; see ``meta.json`` ``vocab.gap`` for the labels).
* Item attributes (``items=<table>``, see :mod:`data_prep.item_attributes`) are columns of
  ``items.parquet`` named as the table's columns, described in ``meta.json``
  ``item_attributes`` (kind, vocabulary, bucket edges); code 0 is PAD/missing, as for side
  features::

      item  original_id  count  brand  genres  price
      1     2858         3428   2      [1, 4]  9      categorical: one code (0 = missing)
      2     260          2991   0      [2, 6]  0      multi: a list of codes, 0 never inside
      3     1210         2883   1      []      8        ([] = no value, or no table row)
                                                      numeric-bucketed: a bucket code

Splits (``meta.json`` ``split``):

* ``leave_one_out``: test target = the last event, validation target = the one before it
  (``test_index = n - 1`` if n >= 2, ``val_index = n - 2`` if n >= 3).
* ``temporal`` (one global cut time ``split_cut`` in ``meta.json``, in the log's clock unit):
  every list holds the user's events strictly before the cut, then at most ONE event at/after
  it, the user's first such event, which is the test target (``test_index = n - 1``, set only
  when that event exists and n >= 2). The validation target is the last event before the cut
  (``val_index``, set when it has at least one event before it). Training reads
  ``items[:val_index]`` (else ``items[:test_index]``, else the whole list), so nothing at or
  after the cut, and not even the last event before it, reaches training. Users with no
  event before the cut are dropped (no history to train on or to predict from); later
  events of a user after the test target are dropped too.
"""

SCHEMA_VERSION = 1

PAD = 0
PAD_TOKEN = "<pad>"  # position 0 of every vocabulary in meta.json

SEQUENCES_FILE = "sequences.parquet"
ITEMS_FILE = "items.parquet"
USERS_FILE = "users.parquet"
META_FILE = "meta.json"
HISTOGRAM_FILE = "length_histogram.png"

# sequences.parquet
USER = "user"
ITEMS = "items"
TIMESTAMPS = "timestamps"
VAL_INDEX = "val_index"
TEST_INDEX = "test_index"
SIDE_FEATURES = ("category", "event", "gap")

# items.parquet also holds ``category``: the item's most frequent category code (0 = unknown).
# ``count`` is the item's number of occurrences in the TRAINING part of the sequences
# (``items[:val_index]``), so a popularity baseline built from it does not see val/test targets.

# items.parquet / users.parquet
ITEM = "item"
ORIGINAL_ID = "original_id"
COUNT = "count"

# canonical columns of a raw log after a format reader has mapped it
RAW_USER = "user_id"
RAW_ITEM = "item_id"
RAW_TIMESTAMP = "timestamp"
RAW_EVENT = "event_type"
RAW_CATEGORY = "category"
RAW_RATING = "rating"  # optional; only read by the min_rating filter
# the raw row number (0-based, in the reader's order) that the prep job adds: ties in time keep
# the file order, and data_prep.lines.where turns it into the file's line in messages
ROW = "_row"

# side-feature list in sequences.parquet -> the raw column it is mapped from
# (``gap`` is derived from the timestamps, not read from a column)
SIDE_FEATURE_SOURCES = {"category": RAW_CATEGORY, "event": RAW_EVENT}
DERIVED_SIDE_FEATURES = ("gap",)

# meta.json keys other components read
META_SCHEMA_VERSION = "schema_version"
META_FINGERPRINT = "fingerprint"
META_ITEM_FINGERPRINT = "item_fingerprint"
META_SIDE_FEATURES = "side_features"  # {name: vocabulary size including PAD}
META_VOCAB = "vocab"  # {name: [values]}, list position = code, position 0 is "<pad>"
META_BUCKETS = "suggested_buckets"  # ascending upper edges of length buckets, last = max length
META_SPLIT = "split"  # "leave_one_out" | "temporal"
META_SPLIT_CUT = "split_cut"  # temporal split: the cut time (log clock units), else null
META_INPUT_SHA256 = "input_sha256"  # hash of the raw input bytes
# item attributes: {name: {"kind": ..., "size": vocabulary size including PAD, "vocab":
# [values], list position = code, position 0 is "<pad>"; numeric-bucketed also "edges"}}
META_ITEM_ATTRIBUTES = "item_attributes"
META_ITEM_TABLE = "item_table"  # the item table: file, format, sha256 and how its rows joined

# kinds of item attribute columns in items.parquet
CATEGORICAL = "categorical"  # Int64 code, one value per item
MULTI = "multi"  # list of Int64 codes, values in the table's order, each once
NUMERIC_BUCKETED = "numeric-bucketed"  # Int64 quantile-bucket code
ATTRIBUTE_KINDS = (CATEGORICAL, MULTI, NUMERIC_BUCKETED)
# items.parquet columns an item attribute may not be named after
ITEM_COLUMNS = (ITEM, ORIGINAL_ID, COUNT, RAW_CATEGORY)
