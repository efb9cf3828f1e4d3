"""torchrun environment detection and an explicitly managed process group (nanoGPT style).

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` for each worker; :func:`detect` reads them (no variables = one process,
rank 0 of 1). :func:`process_group` initialises the default group (NCCL for CUDA devices, gloo
for CPU) with a bounded ``timeout`` and always destroys it on exit: a collective that waits
longer than ``timeout`` for a rank that died or hung raises instead of blocking forever.

Example::

    >>> env = detect({})          # not under torchrun
    >>> env.rank, env.world_size, env.is_main
    (0, 1, True)
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from twopgraph.config import resolve_device
from twopgraph.errors import ConfigError

log = logging.getLogger("twopgraph")
# Longest collective timeout accepted (a week; ``timedelta`` overflows on huge values).
MAX_TIMEOUT_S = 7 * 24 * 3600


@dataclass(frozen=True)
class DistEnv:
    """This process' place in the job: ``rank`` of ``world_size``, ``local_rank`` of
    ``local_world_size`` on its machine."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect(environ: Mapping[str, str] | None = None) -> DistEnv:
    """The torchrun variables of ``environ`` (default ``os.environ``), validated."""
    env = os.environ if environ is None else environ
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return DistEnv()
    try:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local_rank = int(env.get("LOCAL_RANK", rank))
        local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    except (KeyError, ValueError):
        raise ConfigError("RANK and WORLD_SIZE must both be set to integers (as torchrun "
                          "does)") from None
    if not (world >= 1 and 0 <= rank < world and 0 <= local_rank < local_world):
        raise ConfigError(f"inconsistent torchrun environment: RANK={rank} WORLD_SIZE={world} "
                          f"LOCAL_RANK={local_rank} LOCAL_WORLD_SIZE={local_world}")
    return DistEnv(rank, world, local_rank, local_world)


def rank_device(name: str, env: DistEnv) -> torch.device:
    """The device of this rank: ``auto``/``cuda`` -> ``cuda:LOCAL_RANK`` when CUDA is there
    (``auto`` falls back to cpu); ``cpu`` and ``cuda:N`` are taken as given (names are
    checked by :func:`~twopgraph.config.resolve_device`)."""
    device = resolve_device(name)
    if device.type == "cuda" and device.index is None:  # one GPU per local rank
        if env.local_rank >= torch.cuda.device_count():
            raise ConfigError(f"local rank {env.local_rank} but only "
                              f"{torch.cuda.device_count()} CUDA devices")
        return torch.device("cuda", env.local_rank)
    return device


@contextlib.contextmanager
def process_group(env: DistEnv, device: torch.device, timeout_s: float) -> Iterator[str]:
    """Initialise the default process group for ``env`` (``nccl`` on CUDA, ``gloo`` on CPU)
    and destroy it on exit, whatever happens. Yields the backend name."""
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not (0 < timeout_s <= MAX_TIMEOUT_S):  # NaN and inf fail too
        raise ConfigError(f"dist-timeout must be a positive number of seconds (at most a week), "
                          f"got {timeout_s!r}")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kwargs = {}
    if "MASTER_ADDR" not in os.environ:  # one process outside torchrun: a private store
        kwargs["store"] = dist.HashStore()
    dist.init_process_group(backend, rank=env.rank, world_size=env.world_size,
                            timeout=datetime.timedelta(seconds=timeout_s),
                            **({"device_id": device} if backend == "nccl" else {}), **kwargs)
    try:
        yield backend
        dist.barrier()  # leave together: no rank tears down while a peer still talks to it
    finally:
        dist.destroy_process_group()
