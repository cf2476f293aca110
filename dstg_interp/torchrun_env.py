"""What torchrun tells a rank through its environment, read in one place for every command that can run as ranks.

    from dstg_interp.torchrun_env import torchrun_environment
    placement = torchrun_environment()      # None: one plain process; else (rank, world_size)

torchrun sets ``RANK`` and ``WORLD_SIZE`` together with its own ``TORCHELASTIC_RUN_ID``.  ``RANK`` /
``WORLD_SIZE`` without it are leftovers (an exported shell, a job script) that made a plain ``dstg-cache`` join
a process group and wait for a peer that never comes, deaf to Ctrl-C and SIGTERM (round 4, ENV2): they are
refused in one line, as is a value that is not a number (ENV3, naming the variable).
"""

from __future__ import annotations

import os

RUN_ID = "TORCHELASTIC_RUN_ID"  # set by torchrun's agent for every rank it starts


def _integer(name: str, least: int) -> int:
    value = os.environ[name]
    try:
        number = int(value)
    except ValueError:
        number = least - 1
    if number < least:
        raise ValueError(f"environment variable {name}={value!r} is not a whole number of at least {least}; "
                         f"it is set by torchrun (dstg-launch), so unset it to run as one process")
    return number


def torchrun_environment() -> tuple[int, int] | None:
    """(rank, world_size) of a rank started by torchrun; None for a plain process.  ValueError (one line) for
    torchrun variables without torchrun, or ones that are not numbers."""
    present = [name for name in ("WORLD_SIZE", "RANK") if name in os.environ]
    if not present:
        return None
    if RUN_ID not in os.environ:
        shown = " ".join(f"{name}={os.environ[name]}" for name in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")
                         if name in os.environ)
        raise ValueError(f"{shown} are set but this process was not started by torchrun ({RUN_ID} is not set): "
                         "leftovers of another job would make it wait for ranks that never come; unset them to run "
                         "as one process, or start the ranks with dstg-launch")
    world_size, rank = _integer("WORLD_SIZE", 1), _integer("RANK", 0)
    if rank >= world_size:
        raise ValueError(f"environment variable RANK={rank} is not below WORLD_SIZE={world_size}")
    return rank, world_size
