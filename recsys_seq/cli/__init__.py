"""Console entry points: each is a Hydra app composed from ``conf/`` (installed as
``recsys_seq.conf``) that parses, calls one function of :mod:`recsys_seq.workflows` (or the
prep job, the report, the benchmarks) and prints its outcome.

The modules here import no torch or Lightning at import time, so ``--help`` and every refusal
Hydra makes (an unknown key or config choice, a class name outside the table) come before the
deep-learning stack is loaded; a command imports its workflow inside its task function.
"""

from omegaconf import OmegaConf

from recsys_seq.tune.space import spaces_help

# conf/hydra/file_output.yaml: the run folder only when no explicit output names the result
OmegaConf.register_new_resolver(
    "run_folder_unless", lambda output, run_dir: "." if output is not None else run_dir
)
# conf/hydra/help/tune.yaml: the shipped search spaces, read from conf/search/
OmegaConf.register_new_resolver("search_spaces", spaces_help)
