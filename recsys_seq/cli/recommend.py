"""recsys-recommend: top-K next items per user from a checkpoint, in ORIGINAL user and item ids.

    recsys-recommend ckpt_path=<ckpt> users=all k=10 output=recs.parquet
    recsys-recommend ckpt_path=<ckpt> users=ids.txt output=recs.csv exclude_history=false
    recsys-recommend ckpt_path=<ckpt> stage=test      # the windows recsys-eval ranks

The work, and what each option means, is :mod:`recsys_seq.workflows.recommend`.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from recsys_seq.core.conf import CONF_SEARCH_PATH
from recsys_seq.core.errors import exit_on_user_error, run_command


@hydra.main(version_base="1.3", config_path=CONF_SEARCH_PATH, config_name="recommend")
@exit_on_user_error("recsys-recommend")
def _main(cfg: DictConfig) -> None:
    from recsys_seq.workflows.recommend import recommend  # torch only once Hydra has parsed

    _, info = recommend(cfg)
    options = info["options"]
    print(
        f"Top-{options.k} for {info['users']:,} users ({options.stage} windows, history "
        f"{'excluded' if info['exclude_history'] else 'included'}) in {info['seconds']:.2f} s on "
        f"{info['device']}: {info['users_per_second']:,.0f} users/s\nRecommendations: "
        f"{info['output']}"
    )


def main() -> None:
    run_command(_main, "recsys-recommend")


if __name__ == "__main__":
    main()
