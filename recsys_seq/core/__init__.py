"""The torch-free foundation both packages stand on: user errors and their one exit path
(:mod:`~recsys_seq.core.errors`), option checking (:mod:`~recsys_seq.core.options`,
:mod:`~recsys_seq.core.option_checks`), atomic publishing of the project's own artifacts
(:mod:`~recsys_seq.core.publish` with its markers, refusals and temporaries), run folders, the
configs' location and the classes a config may name. Nothing here imports torch or
Lightning, so preparing data, ``--help`` and refusing a wrong option need neither."""
