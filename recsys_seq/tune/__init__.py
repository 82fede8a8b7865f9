"""recsys-tune's parts: an Optuna study over recsys-train's options, kept in a database.

* :mod:`~recsys_seq.tune.space`: the search space (``conf/search/<name>.yaml``) checked, and
  a trial's values as recsys-train overrides.
* :mod:`~recsys_seq.tune.folder`: the sweep folder, claimed for the study, and its files.
* :mod:`~recsys_seq.tune.study`: the persistent study (storage, heartbeats, resume) and the
  loop that works it until it has its trials.
* :mod:`~recsys_seq.tune.objective`: one trial: its config composed, recsys-train run quietly
  in its own run folder.
* :mod:`~recsys_seq.tune.summary`: the markdown summary and ``best.yaml``.
* :mod:`~recsys_seq.tune.plots`: Optuna's plots as PNG files.

Only :mod:`~recsys_seq.tune.space` and :mod:`~recsys_seq.tune.folder` import without Optuna
(the ``sweeps`` extra); the command checks for it first.
"""
