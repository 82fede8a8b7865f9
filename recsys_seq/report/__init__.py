"""What recsys-report (:mod:`recsys_seq.cli.report`) is made of, one job per module.

* :mod:`~recsys_seq.report.files`: each file of a run folder read as plain data, checked for
  the shape runs write.
* :mod:`~recsys_seq.report.runs`: the run folders under a folder found and read into
  :class:`~recsys_seq.report.runs.Run` records.
* :mod:`~recsys_seq.report.table`: the runs as one table, and its markdown.
* :mod:`~recsys_seq.report.plots`: the report's images.
"""
