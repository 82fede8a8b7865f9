"""Train and test one configuration: prepare (if needed), fit, test the best checkpoint, compare
baselines; the library behind ``recsys-train``:

recsys-train                                  # the bundled demo log, end to end
recsys-train data.path=<prepared dir> model=sasrec trainer.max_epochs=50
recsys-train -m model.encoder.num_layers=1,2  # a Hydra sweep
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary, ProgressBar
from omegaconf import DictConfig

from recsys_seq import configs
from recsys_seq.checkpoint import check_resume
from recsys_seq.core.options import OptionError, as_plain
from recsys_seq.core.publish import check_run_folder, claim_run_folder, output_errors
from recsys_seq.data import SequenceDataModule
from recsys_seq.models import ModelSpec, NextItemTask, build_model, rerank_spec
from recsys_seq.models.spec import RerankOptions, check_ranker
from recsys_seq.workflows import runs
from recsys_seq.workflows.retriever import RetrieverPlan, obtain_retriever, plan_retriever
from recsys_seq.workflows.run_spec import train_run
from recsys_seq.workflows.run_summary import summary_lines
from recsys_seq.workflows.trainer import build_trainer, trainer_errors


def resolve_resume(ckpt_path: str | None, run_dir: Path) -> str | None:
    """The checkpoint to resume from: ``ckpt_path``; ``"last"`` means this run folder's most
    recent checkpoint (``last.ckpt`` at epoch ends, ``step.ckpt`` every N steps); with none
    given, that checkpoint is used when it exists, so re-running an interrupted command with
    the same ``hydra.run.dir`` continues it."""
    saved = [p for p in (run_dir / "checkpoints").glob("*.ckpt") if p.stem in ("last", "step")]
    if ckpt_path == "last" or (ckpt_path is None and saved):
        if not saved:
            raise OptionError(f"ckpt_path=last, but {run_dir / 'checkpoints'} has none.")
        latest = max(saved, key=lambda p: p.stat().st_mtime)
        print(f"Resuming from {latest}")
        return str(latest)
    return ckpt_path


def check_windows(datamodule: SequenceDataModule) -> None:
    """Refuse data that would train on nothing or validate on nobody (and report an
    untrained model's metrics as a result)."""
    for stage, needs in (
        ("train", "3 events (two to train on, one to hold out)"),
        ("val", "a validation event"),
    ):
        if len(datamodule.dataset(stage)) == 0:
            raise OptionError(
                f"{datamodule.path} has no {stage} windows: no user has {needs}. Prepare it "
                "with more events per user (recsys-prep min_user_events=3 or more)."
            )


def in_sweep() -> bool:
    """Whether this run is one job of a Hydra multirun, whose summary table comes at the end
    (:mod:`recsys_seq.cli.sweep_summary`): each job then says one line, not a table."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def history_line(excluded: bool) -> str:
    """What ``model.exclude_history=auto`` decided, and why."""
    if excluded:
        return (
            "Rankings leave out each user's history: no user repeats an item in this log's "
            "training events (model.exclude_history=auto; false keeps it)."
        )
    return (
        "Rankings include each user's history: users repeat items in this log "
        "(model.exclude_history=auto; true leaves it out)."
    )


def result_line(metrics: dict[str, Any], spec: ModelSpec, label: str) -> str:
    """One job's outcome: its best optimised metric, the test value of that metric, time."""
    metric = spec.optimized_metric.removeprefix("val/")
    return (
        f"{label}: {spec.best_key} {metrics.get(spec.best_key, float('nan')):.4f}, "
        f"test/{metric} {metrics.get(f'test/{metric}', float('nan')):.4f}, "
        f"{metrics['fit/epochs']} epochs in {metrics['fit/seconds']:.0f} s"
    )


def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train and test one configuration.

    Every option is checked before any work, once, into the run's fields
    (:func:`~recsys_seq.workflows.run_spec.train_run`); the model is built by the project's
    one builder (:func:`~recsys_seq.models.build_model`) from the checked spec and the data's
    facts, and every checkpoint stores the spec. Besides that, ``cfg`` is read only for what
    is built from it: its callbacks and loggers (by name, through the fixed table:
    :func:`~recsys_seq.workflows.runs.instantiate_group`) and a retriever experiment's config
    (:func:`~recsys_seq.workflows.retriever.plan_retriever`).

    Returns:
        ``(metrics, objects)``: the flat metrics written to ``metrics.json`` and the objects
        built on the way (datamodule, model, trainer), for tests and notebooks.
    """
    runs.quiet_console()
    run = train_run(cfg)
    rerank = run.rerank
    run_dir = check_run_folder(run.output_dir, task=run.task)
    datamodule = runs.build_datamodule(run.data)
    check_run_folder(run_dir, [datamodule.path], task=run.task)  # not in the data; before Lightning
    spec = configs.spec_for_data(run.model, datamodule)
    configs.check_max_len(spec, run.data.max_len)
    if rerank is not None:
        check_ranker(spec, rerank.options)
    check_windows(datamodule)
    resume = resolve_resume(run.ckpt_path, run_dir)
    if resume is not None:
        check_resume(resume, spec, datamodule.path, rerank and rerank.options)
    sweep_job = in_sweep()
    callbacks = runs.instantiate_group(cfg, "callbacks")
    if sweep_job:  # no bar or summary per job: one line each, the table at the end
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar | ModelSummary)]
        runs.quiet_lightning()
    # a bar redraws in place: a log file (a SLURM job's, `> log`) would keep only its last
    # frames, beside the epoch lines that say the same
    no_bar = sweep_job or not sys.stdout.isatty()
    if no_bar:
        callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
    trainer = build_trainer(
        run.trainer,
        callbacks=callbacks,
        logger=runs.instantiate_group(cfg, "logger"),
        **({"enable_progress_bar": False} if no_bar else {}),
        **({"enable_model_summary": False} if sweep_job else {}),
    )
    if rerank is None:
        claim_run_folder(run_dir, [datamodule.path], task=run.task)  # all checked: the run writes
        L.seed_everything(run.seed, workers=True)  # checks first: nothing printed before an error
        model = build_model(spec, datamodule.facts())
    else:
        options = rerank.options
        plans = [
            plan_retriever(rerank.retriever, cfg, datamodule, run_dir, options.holdout, fold)
            for fold in [None, *((k, options.cross_fit) for k in range(options.cross_fit))]
        ]
        claim_run_folder(run_dir, [datamodule.path], task=run.task)
        model = two_stage_model(spec, plans, options, run.seed, datamodule, run.data.max_len)
    if trainer.is_global_zero and not sweep_job:
        print("\n".join(summary_lines(spec, run.data, datamodule, trainer, run_dir)))
        if run.model.get("exclude_history", configs.AUTO) == configs.AUTO:
            print(history_line(spec.exclude_history))
    started = time.perf_counter()
    with output_errors(run_dir), trainer_errors():  # a full disk names the run folder
        trainer.fit(model, datamodule=datamodule, ckpt_path=resume, weights_only=True)
    fit_time = {"fit/seconds": time.perf_counter() - started, "fit/epochs": trainer.current_epoch}
    checkpoint = next(
        (c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor), None
    )  # the best-model checkpoint, not the step checkpoint
    best = checkpoint.best_model_path if checkpoint and checkpoint.best_model_path else None
    metrics = runs.to_floats(trainer.callback_metrics)
    metrics = {k: v for k, v in metrics.items() if k.startswith("val/") or k.startswith("train/")}
    metrics |= fit_time  # this invocation's training (with validation), not a resumed part
    tested = trainer.test(
        model, datamodule=datamodule, ckpt_path=best, weights_only=True, verbose=False
    )
    for result in tested:
        metrics.update(runs.to_floats(result))
    if run.baselines and trainer.is_global_zero:
        metrics |= runs.popularity_metrics(
            datamodule, list(spec.evaluated_ks), spec.exclude_history, evaluated_batches(trainer)
        )
    metrics["checkpoint"] = best
    if trainer.is_global_zero:
        path = runs.write_results(run_dir, metrics)
        if sweep_job:
            print(result_line(metrics, spec, f"job {HydraConfig.get().job.num} ({spec.name})"))
        else:
            runs.print_results(metrics, model_name=spec.name)
            print(f"Results: {path}")
            if best is not None:  # debug=fast and checkpointing=null write none
                print(f"Checkpoints: {Path(best).parent}")
    return metrics, {"datamodule": datamodule, "model": model, "trainer": trainer}


def evaluated_batches(trainer: L.Trainer) -> dict[str, int | None]:
    """How many batches of each stage the model was evaluated on, over all processes (the
    whole loader unless a limit or ``fast_dev_run`` cut it short; None: not counted)."""
    counted = {"val": trainer.num_val_batches, "test": trainer.num_test_batches}
    return {
        stage: int(sum(n) * trainer.world_size) if math.isfinite(sum(n)) else None
        for stage, n in counted.items()
    }


def two_stage_model(
    spec: ModelSpec,
    plans: list[RetrieverPlan],
    options: RerankOptions,
    seed: int,
    datamodule: SequenceDataModule,
    max_len: int,
) -> NextItemTask:
    """The ranker ``spec`` over the planned retrievers (trained first if need be): the
    serving one, then the fold ones of ``rerank.cross_fit``; their weights loaded, frozen."""
    (retriever, weights), *folds = (obtain_retriever(plan, train) for plan in plans)
    configs.check_max_len(retriever, max_len)
    for plan, (fold_spec, _) in zip(plans[1:], folds, strict=True):
        if fold_spec != retriever:
            raise OptionError(
                f"The fold retriever of {plan.folder} is not the serving retriever's model "
                "(another spec): cross-fitting scores training windows with the same model "
                "trained on other users."
            )
    chosen = rerank_spec(retriever, as_plain(options), spec)
    L.seed_everything(seed, workers=True)  # the ranker starts as a one-stage run would
    model = build_model(spec, datamodule.facts(), chosen)
    model.retriever.load_state_dict(weights)
    for network, (_, fold_weights) in zip(model.fold_retrievers, folds, strict=True):
        network.load_state_dict(fold_weights)
    attributes = model.retriever.embedder.attributes
    differing = (
        [] if attributes is None else attributes.differing(datamodule.data.catalogue.attributes)
    )
    if differing:
        raise OptionError(
            f"The retriever embeds the item attribute(s) {differing} coded otherwise than "
            f"{datamodule.path} codes them (prepared with another item table): train the "
            "retriever on this prepared folder."
        )
    if options.init_from_retriever:
        model.start_from_retriever()
    return model
