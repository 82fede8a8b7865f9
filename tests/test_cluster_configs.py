"""Cluster configurations compose and resolve into the right Lightning set-up, without a cluster."""

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.plugins.environments import SLURMEnvironment, TorchElasticEnvironment
from lightning.pytorch.utilities import rank_zero_only

from recsys_seq import configs
from recsys_seq.workflows.trainer import build_trainer

SLURM_2_NODES_2_TASKS = {
    "SLURM_NTASKS": "4",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_JOB_NAME": "recsys",
    "SLURM_JOB_ID": "1234",
    "SLURM_NODELIST": "node[1-2]",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "3",
    "SLURM_LOCALID": "1",
}
TORCHRUN_2_NODES_2_PROCS = {
    "TORCHELASTIC_RUN_ID": "abc",
    "WORLD_SIZE": "4",
    "RANK": "2",
    "LOCAL_RANK": "0",
    "GROUP_RANK": "1",
    "MASTER_ADDR": "node1",
    "MASTER_PORT": "29500",
}


def trainer_for(overrides):
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    cfg.trainer.default_root_dir = "."
    return build_trainer(cfg.trainer, logger=False)


@pytest.mark.parametrize(
    ("env", "environment", "global_rank"),
    [
        (SLURM_2_NODES_2_TASKS, SLURMEnvironment, 3),
        (TORCHRUN_2_NODES_2_PROCS, TorchElasticEnvironment, 2),
    ],
    ids=["slurm", "torchrun"],
)
def test_multi_node_ddp_reads_the_cluster_environment(monkeypatch, env, environment, global_rank):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    # the Trainer records its global rank process-wide; later tests must run as rank zero again
    monkeypatch.setattr(rank_zero_only, "rank", rank_zero_only.rank)
    trainer = trainer_for(["trainer=ddp_cpu", "trainer.devices=2", "trainer.num_nodes=2"])
    assert isinstance(trainer.strategy.cluster_environment, environment)
    assert trainer.world_size == 4
    assert trainer.global_rank == global_rank
    assert not trainer.strategy.launcher.is_interactive_compatible  # no re-spawning under a cluster


def test_slurm_sweep_launcher_composes():
    with initialize_config_dir(configs.CONF_DIR, version_base="1.3"):
        cfg = compose(
            "train",
            overrides=["hydra/launcher=slurm", "hydra.launcher.gpus_per_node=4", "trainer=ddp"],
            return_hydra_config=True,
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.tasks_per_node == 4  # one DDP process per GPU
    assert cfg.trainer.strategy == "ddp" and cfg.trainer.use_distributed_sampler is False
