"""recsys-eval: test a checkpoint on a prepared dataset.

    recsys-eval ckpt_path=outputs/train/runs/<run>/checkpoints/best.ckpt
    recsys-eval ckpt_path=<ckpt> data.path=<another prepared dir with the same items>
    recsys-eval ckpt_path=<ckpt> exclude_history=true   # rank without the user's history
    recsys-eval -m ckpt_path=<blended two-stage ckpt> stage=val blend=0.3,0.5,0.7   # choose w

The work is :func:`recsys_seq.workflows.evaluate.evaluate`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import exit_on_user_error, run_command


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="eval")
@exit_on_user_error("recsys-eval")
def _main(cfg: DictConfig) -> None:
    from recsys_seq.workflows import evaluate, runs  # torch only once Hydra has parsed

    metrics, objects = evaluate.evaluate(cfg)
    path = evaluate.record(cfg, metrics, objects)
    runs.print_results(metrics, model_name=objects["spec"].name, stage=cfg.stage)
    print(f"Results: {path}")


def main() -> None:
    run_command(_main, "recsys-eval")


if __name__ == "__main__":
    main()
