"""One rank of an in-process gloo job (``torch.multiprocessing.spawn``), as the sharded tests run it: the
store's extraction (tests/store/test_store_distributed.py) and the storeless probes and their control cache
(tests/probes/test_storeless.py, test_control_cache.py)."""

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
import torch.distributed as dist

from dstg_interp.store.distributed import OtherRankFailed, PeerLost, Ranks


@contextlib.contextmanager
def gloo_rank(rank: int, world_size: int, rendezvous) -> Iterator[Ranks]:
    """This process as rank ``rank`` of a gloo group met through the file ``rendezvous``, on one thread (what
    torchrun gives each rank); the group is torn down however the body ends."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world_size)
    try:
        yield Ranks(rank=rank, world_size=world_size, grouped=True)
    finally:
        dist.destroy_process_group()


def report_rank_outcome(rank: int, world_size: int, rendezvous, report, work: Callable[[Ranks], None]) -> None:
    """Run ``work(ranks)`` as one rank (``gloo_rank``) and write how it ended to ``{report}.{rank}``: ok, other
    rank failed, peer lost, or own error: <the message>."""
    with gloo_rank(rank, world_size, rendezvous) as ranks:
        try:
            work(ranks)
            outcome = "ok"
        except OtherRankFailed:
            outcome = "other rank failed"
        except PeerLost:
            outcome = "peer lost"
        except RuntimeError as err:
            outcome = f"own error: {err}"
    Path(f"{report}.{rank}").write_text(outcome)
