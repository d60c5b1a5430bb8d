"""The distributed launch: one process group for ``python script.py`` and for the ``deepspeed`` launcher alike
(``init_distributed``: gloo on CPUs, nccl on GPUs), and the small collectives the trainers run across ranks
(``all_reduce_sum``, ``all_reduce_max``, ``all_reduce_fmax``, ``all_reduce_mean``)."""
from __future__ import annotations

import logging
import os
import socket

import torch

from trainlib import runlog

log = logging.getLogger("webagent")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def uses_cuda() -> bool:
    """Whether the models go to CUDA: ``WEBAGENT_DEVICE`` (``policy.decide_device``'s override) or availability."""
    choice = os.environ.get("WEBAGENT_DEVICE")
    return choice.startswith("cuda") if choice else torch.cuda.is_available()


def collective_timeout_s(episode_timeout: float) -> float:
    """How long a collective waits for the slowest rank: a step's rollouts run in parallel, each bounded by
    ``episode_timeout``, so ranks can reach the next collective up to about that far apart (and a round of
    dynamic sampling more); twice that, at least 30 minutes. DeepSpeed's default, 10 minutes, is shorter than
    the default episode timeout (15 minutes)."""
    return max(1800.0, 2.0 * episode_timeout)


def init_distributed(timeout_s: float = 1800.0) -> tuple[int, int, int]:
    """Initialise torch.distributed through DeepSpeed; returns (rank, local_rank, world_size).

    Under the ``deepspeed`` launcher the variables are already set; a plain ``python`` run gets a
    one-process group. Backend: nccl when the models go to CUDA, gloo otherwise (``WEBAGENT_DEVICE=cpu`` on a
    GPU machine included: NCCL has no CPU tensors). ``timeout_s``: how long a collective waits for the slowest
    rank (DeepSpeed's default is 10 minutes, shorter than one rollout phase can be).

    On gloo, DeepSpeed's shared-memory op is skipped: its CPU backend compiles one (C++, ~45 s and a compiler on
    a machine's first run, a load and a shared-memory segment per process after) that only its inference
    all-reduce uses, never training.
    """
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    os.environ.setdefault("LOCAL_RANK", "0")
    import datetime
    import importlib

    import deepspeed
    if not uses_cuda():      # (the module by name: the attribute deepspeed.comm.torch is torch itself)
        importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if uses_cuda() else "gloo",
                                   timeout=datetime.timedelta(seconds=timeout_s))
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    if uses_cuda():
        torch.cuda.set_device(local_rank)
    if rank == 0:
        log.info("machine: %s", runlog.machine())
    return rank, local_rank, world


def collective_device() -> torch.device:
    """Where a collective's tensors must live for the default process group's backend: this rank's GPU under
    NCCL (which has no CPU path), the CPU otherwise (gloo)."""
    if torch.distributed.is_initialized() and torch.distributed.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def all_reduce(value: torch.Tensor, op, group=None) -> torch.Tensor:
    """All-reduce a small CPU tensor across ranks; it travels on the device the backend needs (NCCL: the GPU; a
    ``side_group``: the CPU, gloo)."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        on = value.to(collective_device() if group is None else torch.device("cpu"))
        torch.distributed.all_reduce(on, op=op, group=group)
        return on.cpu()
    return value


def all_reduce_sum(x: int, group=None) -> int:
    """The sum of ``x`` over the ranks (on ``group``: the default process group, or a ``side_group``)."""
    return int(all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.SUM, group).item())


def side_group():
    """A second process group over every rank (gloo, CPU tensors), for collectives that run while the default group's
    run in another thread (trainlib/overlap.py: the rollouts' beside the update's), so that the two never interleave
    differently on two ranks; None with one rank. Collective: every rank creates it at the same point."""
    if torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1:
        return torch.distributed.new_group(backend="gloo")
    return None


def all_reduce_max(x: int) -> int:
    """The largest ``x`` of the ranks."""
    return int(all_reduce(torch.tensor([x], dtype=torch.long), torch.distributed.ReduceOp.MAX).item())


def all_reduce_fmax(x: float) -> float:
    """The largest ``x`` of the ranks (a float)."""
    return float(all_reduce(torch.tensor([x], dtype=torch.float64), torch.distributed.ReduceOp.MAX).item())


def all_reduce_mean(stats: dict[str, float]) -> dict[str, float]:
    """Each statistic averaged over the ranks, in one collective (every rank must hold the same keys)."""
    keys = sorted(stats)
    t = all_reduce(torch.tensor([stats[k] for k in keys], dtype=torch.float64), torch.distributed.ReduceOp.SUM)
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    return {k: float(v) / world for k, v in zip(keys, t)}
