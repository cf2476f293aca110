"""Sharded extraction under torchrun: every rank runs a share of the batches into one store.

    dstg-launch --nproc-per-node 2 dstg-cache --model dstg --corpus en-mix --out runs/store-dstg
    torchrun --nproc_per_node 2 -m dstg_interp.cli.cache ...     # the same; torchrun's own end is a traceback on Ctrl-C

    from dstg_interp.store.distributed import torchrun_ranks
    with torchrun_ranks("cpu") as ranks:          # gloo on CPU, nccl on CUDA; one plain rank outside torchrun
        store = extract(model.to(ranks.device), sequences, out, ranks=ranks)

How: every rank plans the same length-sorted batches (``encoders.length_sorted_batches``) and runs batches
rank, rank + N, rank + 2N, ...; rank 0 creates the temporary store folder and reserves every file at its
final size, each rank pwrites its own rows into those files (the rows of two ranks never overlap), and
rank 0 writes the manifest and renames the folder. A batch's states do not depend on the rank that ran
it, so on CPU the store is bit-identical to a one-process run at the same thread count (torchrun sets
OMP_NUM_THREADS=1 unless told otherwise). Attention summaries are merged from per-rank partial sums:
equal to the one-process ones up to float rounding. Ranks must share a filesystem (one node, or NFS).

Failure: each step that can fail on some ranks only is run through ``Ranks.together``, which tells every
rank whether all of them succeeded, so a failing rank never leaves the others waiting in a collective.
Teardown never raises from cleanup: an interruption (Ctrl-C, or torchrun's SIGTERM after a peer died)
skips the collectives, and a collective that finds a peer gone becomes ``PeerLost``, one line per rank.
"""

from __future__ import annotations

import contextlib
import os
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dstg_interp.torchrun_env import torchrun_environment

from .manifest import StoreError


class OtherRankFailed(StoreError):
    """This rank's step succeeded but another rank's failed (that rank reports its own error)."""


class PeerLost(StoreError):
    """A collective found another rank gone (killed, crashed): this rank stops with one line."""


def _collective(rank: int, operation, *args):
    """Run a torch.distributed collective; a dead peer (gloo: 'Connection closed by peer', nccl: a
    DistBackendError, both RuntimeErrors) becomes PeerLost instead of a traceback."""
    try:
        return operation(*args)
    except RuntimeError as err:
        # gloo: "[.../pair.cc:553] Read error [127.0.0.1]:43740: Connection reset by peer. This is typically ..."
        reason = (str(err).strip().splitlines() or [type(err).__name__])[-1].split("] ", 1)[-1].split(". ")[0]
        raise PeerLost(f"rank {rank}: another rank stopped ({reason}); no store was written; "
                       "the previous store (if any) is untouched: run the command again") from None


@dataclass
class Ranks:
    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    grouped: bool = False  # a torch.distributed process group is up: steps and results are shared

    @property
    def first(self) -> bool:
        return self.rank == 0

    def share(self, items: list) -> list:
        """This rank's share of ``items`` (round robin, so long and short batches spread evenly)."""
        return items[self.rank::self.world_size]

    def together(self, step):
        """``step()`` on every rank; raises on every rank if it raised on any.  An interruption is re-raised
        at once: every rank gets the signal (torchrun forwards it), and a peer may already be gone."""
        if not self.grouped:
            return step()
        try:
            result = step()
        except KeyboardInterrupt:
            raise
        except BaseException:
            with contextlib.suppress(PeerLost):  # telling the others is a courtesy; a dead peer cannot hear it
                self._all_succeeded(False)
            raise
        if not self._all_succeeded(True):
            raise OtherRankFailed(f"rank {self.rank}: another rank failed (its error is printed above); "
                                  "no store was written")
        return result

    def broadcast(self, value):
        """Rank 0's ``value`` on every rank."""
        if not self.grouped:
            return value
        box = [value]
        _collective(self.rank, dist.broadcast_object_list, box, 0)
        return box[0]

    def gather(self, value) -> list:
        """Every rank's ``value``, in rank order (on every rank: all_gather works on gloo and nccl alike)."""
        if not self.grouped:
            return [value]
        values = [None] * self.world_size
        _collective(self.rank, dist.all_gather_object, values, value)
        return values

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` added up over every rank, in place (gloo: CPU tensors; nccl: CUDA ones)."""
        if self.grouped:
            _collective(self.rank, dist.all_reduce, tensor)
        return tensor

    def _all_succeeded(self, succeeded: bool) -> bool:
        # nccl reduces CUDA tensors only; gloo reduces CPU ones
        failures = torch.tensor([0 if succeeded else 1], device=self.device if self.device.type == "cuda" else "cpu")
        _collective(self.rank, dist.all_reduce, failures)
        return int(failures.item()) == 0


@contextmanager
def torchrun_ranks(device: str = "cpu"):
    """The Ranks of this process: from torchrun's environment (process group up for the duration), or one rank."""
    if device not in ("cpu", "cuda"):
        raise StoreError(f"device {device!r} is not supported; use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise StoreError("device cuda: no CUDA device is available here; use --device cpu")
    try:
        placement = torchrun_environment()
    except ValueError as err:  # leftovers of another job (round 4, ENV2, ENV3)
        raise StoreError(str(err)) from None
    if placement is None:  # not started by torchrun
        yield Ranks(device=torch.device(device))
        return
    rank, world_size = placement
    torch_device = torch.device("cpu")
    if device == "cuda":
        torch_device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(torch_device)  # the object collectives of nccl use the current device
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=world_size)
    try:
        yield Ranks(rank=rank, world_size=world_size, device=torch_device, grouped=True)
    finally:
        with contextlib.suppress(Exception):  # a group with a dead peer may refuse to shut down cleanly
            dist.destroy_process_group()
