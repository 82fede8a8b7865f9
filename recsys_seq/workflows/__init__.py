"""What the commands do, as library functions that tests and notebooks call directly: train
(:mod:`~recsys_seq.workflows.train`), evaluate, recommend, export, with the pieces they share
(building the datamodule and the Trainer, the retriever of a two-stage run, writing and
printing results). Each returns its results and the objects it built; the commands in
:mod:`recsys_seq.cli` only parse, call one of these and print."""
