"""recsys-export: a trained model as one self-contained program for serving.

    recsys-export ckpt_path=<ckpt> output=model.pt2     # torch.export (sasrec)
    recsys-export ckpt_path=<ckpt> output=model.pt      # TorchScript trace (sasrec, gru)

The work, the program's inputs and outputs and the formats are
:mod:`recsys_seq.workflows.export`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import exit_on_user_error, run_command


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="export")
@exit_on_user_error("recsys-export")
def _main(cfg: DictConfig) -> None:
    from recsys_seq.workflows.export import export, summary  # torch once Hydra has parsed

    print(summary(export(cfg)))


def main() -> None:
    run_command(_main, "recsys-export")


if __name__ == "__main__":
    main()
