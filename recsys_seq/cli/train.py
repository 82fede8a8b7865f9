"""recsys-train: prepare (if needed), train, test with the best checkpoint, compare baselines.

    recsys-train                                  # the bundled demo log, end to end
    recsys-train data.path=<prepared dir> model=sasrec trainer.max_epochs=50
    recsys-train -m model.encoder.num_layers=1,2  # a Hydra sweep

The work is :func:`recsys_seq.workflows.train.train`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import exit_on_user_error, run_command


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="train")
@exit_on_user_error("recsys-train")
def _main(cfg: DictConfig) -> float | None:
    from recsys_seq.workflows.train import train  # torch only once Hydra has parsed and checked

    metrics, objects = train(cfg)
    return metrics.get(objects["model"].spec.best_key)  # what sweeps maximise


def main() -> None:
    run_command(_main, "recsys-train")


if __name__ == "__main__":
    main()
