"""The halo exchange of distributed exact evaluation across machines: which hidden rows each
rank receives from which other rank (:func:`halo_plan` -> :class:`HaloPlan`), and the
exchange itself (:meth:`HaloPlan.exchange`).

Layer ``i + 1`` of a rank reads the layer-``i`` rows of the vertices it computes (its
``readers``, owned) and of all their neighbours in the store's CSR. The rows it owns it
computed itself; the others -- its *halo* for that layer -- are owned by exactly one other
rank. The plan, made once per evaluation setting (collective):

1. each rank finds its halo of every hidden layer from the store's CSR (in ranges of about
   ``batch_edges`` edges; memory: the halo's ids);
2. owners are found by asking: in round ``k = 1 .. W-1`` a rank sends the ids still
   unresolved to rank ``rank + k`` (the count first, then the ids, int64) and gets back
   one flag per id (owned there or not); every id must be owned by some rank. This costs
   ids (at most ``W - 1`` times the halo's, 8 bytes each; a resolved id is not asked
   again), once per run, never hidden rows;
3. the ranks share how many rows each sends each (one ``all_gather`` of ``layers x W``
   counts), so every rank knows how many exchange rounds a layer takes and the bytes moved.

:meth:`HaloPlan.exchange` then sends each rank exactly the rows it asked for with
``all_to_all_single`` (gloo and NCCL both have it; on NCCL the buffers go through the
device), in rounds of at most :data:`EXCHANGE_CHUNK_BYTES` sent (and received) per rank, so
its buffers stay bounded whatever the halo's size. A rank's table of layer ``i`` holds only
the rows of :attr:`HaloPlan.ids` (its own rows of the layer plus its halo), sorted by global
id, not N.

A table named in ``local`` (:func:`halo_plan`) has the same rows, but its halo rows are not
exchanged: every rank computes them itself (exact evaluation does so for layer 0, whose input,
the store's features and CSR, every machine has). Its owners are not asked (step 2 is skipped),
it sends and receives nothing, and :meth:`HaloPlan.halo_at` names the rows the rank must
compute besides its own (:meth:`HaloPlan.local_rows` counts them over the ranks).

Example (inside a process group of W ranks; ``owned`` sorted global ids of this rank)::

    >>> plan = halo_plan(graph, owned, [owned] * 2, batch_edges=1 << 20)  # doctest: +SKIP
    >>> table = np.zeros((plan.ids[0].shape[0], 16), np.float32)         # doctest: +SKIP
    >>> table[plan.own_at[0]] = my_rows                                  # doctest: +SKIP
    >>> sent = plan.exchange(0, table, "cpu")  # halo rows filled in     # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np
import torch
import torch.distributed as dist

from twopgraph.distributed.partition.selfdep import _gather_rows
from twopgraph.errors import ConfigError
from twopgraph.graph.data import CSRGraph
from twopgraph.inference.rows import edge_balanced_ranges

#: Bytes of hidden rows one rank sends (and receives) in one exchange round at most.
EXCHANGE_CHUNK_BYTES = 64 << 20
#: Bytes of one float32 value of a hidden row.
ROW_VALUE_BYTES = 4


def _member(ids: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """Whether each of ``ids`` is in ``sorted_set`` (sorted int64; bool mask)."""
    if sorted_set.shape[0] == 0:
        return np.zeros(ids.shape[0], dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_set, ids), sorted_set.shape[0] - 1)
    return sorted_set[pos] == ids


def _halo(graph: CSRGraph, readers: np.ndarray, owned_sorted: np.ndarray,
          batch_edges: int) -> np.ndarray:
    """Sorted global ids of the vertices ``readers`` or their neighbours are, minus the owned
    ones, gathered in ranges of about ``batch_edges`` edges."""
    indptr, indices = graph.indptr, graph.indices
    cum = np.zeros(readers.shape[0] + 1, dtype=np.int64)
    np.cumsum(indptr[readers + 1] - indptr[readers], out=cum[1:])
    found = []
    bounds = edge_balanced_ranges(cum, max(1, batch_edges)) if readers.shape[0] else [0]
    for a, b in pairwise(bounds):
        rows = readers[a:b]
        _, ent = _gather_rows(indptr, indices, rows)
        cand = np.unique(np.concatenate([ent.astype(np.int64, copy=False), rows]))
        found.append(cand[~_member(cand, owned_sorted)])
    return np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def _comm_device(device: torch.device | str) -> torch.device:
    """Where collective buffers live: the rank's device under NCCL, else the host."""
    return torch.device(device) if dist.get_backend() == "nccl" else torch.device("cpu")


def _a2a(inp: torch.Tensor, in_splits: list[int], out_splits: list[int],
         on: torch.device) -> torch.Tensor:
    """``all_to_all_single`` of the rows of ``inp`` (``in_splits[s]`` rows to rank ``s``);
    returns the rows received (``out_splits[s]`` from rank ``s``), on the host."""
    out = torch.empty((sum(out_splits), *inp.shape[1:]), dtype=inp.dtype, device=on)
    dist.all_to_all_single(out, inp.to(on), out_splits, in_splits)
    return out.cpu()


@dataclass
class HaloPlan:
    """Which rows of every hidden table this rank holds and exchanges (see the module
    docstring). Per hidden table ``i`` (layer ``i``'s output, read by layer ``i + 1``):
    ``ids[i]`` sorted global ids of the rows this rank holds (its own rows of the layer and
    its halo), ``own_at[i]`` the positions in ``ids[i]`` of the rows it computes (in the
    order given to :func:`halo_plan`), ``send[i][s]`` / ``recv[i][s]`` the positions in
    ``ids[i]`` of the rows it sends to / receives from rank ``s`` (in the order they travel),
    ``counts[i]`` (W x W) the rows rank ``a`` sends rank ``b`` (the same on every rank),
    ``halo[i]`` (W) the halo rows each rank holds, ``local[i]`` whether every rank computes
    its halo rows of table ``i`` itself (nothing exchanged: ``counts[i]`` is zero)."""

    ids: list[np.ndarray]
    own_at: list[np.ndarray]
    send: list[list[np.ndarray]]
    recv: list[list[np.ndarray]]
    counts: np.ndarray
    halo: np.ndarray
    local: list[bool]

    def rows(self, i: int | None = None) -> int:
        """Rows all ranks send each other for table ``i`` (None: every table)."""
        return int(self.counts.sum() if i is None else self.counts[i].sum())

    def local_rows(self, i: int | None = None) -> int:
        """Halo rows all ranks compute themselves for table ``i`` (None: every table)."""
        tables = range(len(self.local)) if i is None else [i]
        return int(sum(self.halo[t].sum() for t in tables if self.local[t]))

    def halo_at(self, i: int) -> np.ndarray:
        """Positions in ``ids[i]`` of this rank's halo rows of table ``i`` (sorted)."""
        mask = np.ones(self.ids[i].shape[0], dtype=bool)
        mask[self.own_at[i]] = False
        return np.flatnonzero(mask)

    def bytes(self, widths: list[int]) -> int:
        """Bytes of float32 hidden rows all ranks send each other in one evaluation, the
        table ``i`` being ``widths[i]`` wide."""
        return sum(self.rows(i) * w * ROW_VALUE_BYTES for i, w in enumerate(widths))

    def exchange(self, i: int, table: np.ndarray, device: torch.device | str = "cpu",
                 chunk_bytes: int | None = None) -> int:
        """Fill the halo rows of ``table`` (this rank's table ``i``: ``ids[i]`` rows, its own
        rows written) with the other ranks' rows, in rounds of at most ``chunk_bytes``
        (default :data:`EXCHANGE_CHUNK_BYTES`) sent per rank (at least one row per peer).
        Returns the bytes this rank sent. Collective (every rank, same ``i`` and
        ``chunk_bytes``)."""
        chunk_bytes = EXCHANGE_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
        counts = self.counts[i]
        world, width = counts.shape[0], int(table.shape[1])
        per = max(1, chunk_bytes // (ROW_VALUE_BYTES * max(width, 1) * max(world - 1, 1)))
        rounds = -(-int(counts.max(initial=0)) // per) if width else 0
        on, sent = _comm_device(device), 0
        for k in range(rounds):
            lo, hi = k * per, (k + 1) * per
            out_pos = [p[lo:hi] for p in self.send[i]]
            in_pos = [p[lo:hi] for p in self.recv[i]]
            rows = torch.from_numpy(np.ascontiguousarray(table[np.concatenate(out_pos)]))
            got = _a2a(rows, [p.shape[0] for p in out_pos], [p.shape[0] for p in in_pos], on)
            table[np.concatenate(in_pos)] = got.numpy()
            sent += rows.numel() * ROW_VALUE_BYTES
        return sent


def _resolve(halo: np.ndarray, owned_sorted: np.ndarray, on: torch.device
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Ask the other ranks, round by round, which of them owns each of ``halo``; returns
    (``from_[s]``: the ids rank ``s`` sends here, ``to[s]``: the ids asked of this rank by
    rank ``s`` that it owns, both sorted). Collective."""
    world, me = dist.get_world_size(), dist.get_rank()
    empty = np.zeros(0, dtype=np.int64)
    from_, to = [empty] * world, [empty] * world
    open_ = halo
    for k in range(1, world):
        dst, src = (me + k) % world, (me - k) % world
        ask = [0] * world
        ask[dst] = int(open_.shape[0])
        asked = _a2a(torch.tensor(ask, dtype=torch.int64).reshape(world, 1), [1] * world,
                     [1] * world, on).reshape(-1).tolist()  # counts first
        got = _a2a(torch.from_numpy(open_), ask, asked, on).numpy()
        mine = _member(got, owned_sorted)
        to[src] = got[mine]
        answer = _a2a(torch.from_numpy(mine.astype(np.uint8)), asked, ask, on).numpy() \
            .astype(bool)
        from_[dst] = open_[answer]
        open_ = open_[~answer]
    if open_.shape[0]:
        raise ConfigError(f"rank {me}: vertex {int(open_[0])} (and {open_.shape[0] - 1} more) "
                          f"is owned by no rank (damaged partition); re-run "
                          "`twopgraph partition`")
    return from_, to


def halo_plan(graph: CSRGraph, owned: np.ndarray, readers: list[np.ndarray],
              computed: list[np.ndarray] | None = None, batch_edges: int = 4_000_000,
              device: torch.device | str = "cpu", local: Sequence[int] = ()) -> HaloPlan:
    """The :class:`HaloPlan` of this rank (global ids ``owned``) for hidden tables
    ``0 .. len(readers) - 1``: table ``i`` is written with this rank's rows ``computed[i]``
    (default ``readers[i]``: owned vertices) and read by layer ``i + 1`` for its vertices
    ``readers[i]`` (owned), which read their own rows and their neighbours' in ``graph`` (the
    store's whole CSR). Tables given the very same ``computed`` and ``readers`` arrays (the
    whole-graph scope) share their entries: the ids and positions are kept once. The tables
    in ``local`` (indices) hold their halo rows too but exchange none: every rank computes
    them itself. Collective: every rank calls it with the same tables and ``local``, in the
    same order."""
    computed = readers if computed is None else computed
    owned_sorted = np.sort(np.asarray(owned, dtype=np.int64))
    on, world = _comm_device(device), dist.get_world_size()
    local = set(local)
    is_local = [i in local for i in range(len(readers))]
    agreed = _a2a_gather(torch.tensor(is_local, dtype=torch.int64), on)
    if (agreed != agreed[0]).any():  # the steps below must be the same collectives everywhere
        raise ConfigError(f"the ranks disagree on the hidden layers whose halo rows they "
                          f"compute themselves: {agreed.astype(bool).tolist()} (one setting "
                          "on every rank)")
    ids, own_at, send, recv = [], [], [], []
    counts = np.zeros((len(readers), world + 1), dtype=np.int64)  # + the halo's rows
    nobody = [np.zeros(0, dtype=np.int64)] * world
    made: dict = {}  # tables written and read by the same vertex sets share one entry
    halos: dict = {}  # ... and one halo and ids, whether exchanged or computed locally
    for i, (mine, read) in enumerate(zip(computed, readers)):
        if (key := (id(mine), id(read), is_local[i])) in made:  # e.g. a whole-graph plan
            j = made[key]
            ids.append(ids[j]), own_at.append(own_at[j]), send.append(send[j])
            recv.append(recv[j])
            counts[i] = counts[j]
            continue
        made[key] = i
        mine = np.asarray(mine, dtype=np.int64)
        if (hkey := key[:2]) not in halos:
            halo = _halo(graph, np.asarray(read, dtype=np.int64), owned_sorted, batch_edges)
            held = np.union1d(mine, halo)
            halos[hkey] = halo, held, np.searchsorted(held, mine)
        halo, held, at = halos[hkey]
        from_, to = (nobody, nobody) if is_local[i] else _resolve(halo, owned_sorted, on)
        mine_sorted = np.sort(mine)
        if held.shape[0] != mine.shape[0] + halo.shape[0] or \
                not all(_member(t, mine_sorted).all() for t in to):
            raise ConfigError(f"rank {dist.get_rank()}: layer {i}'s rows asked of it are not "
                              "among those it computes (inconsistent evaluation plan)")
        ids.append(held)
        own_at.append(at)
        send.append([np.searchsorted(held, t) for t in to])
        recv.append([np.searchsorted(held, f) for f in from_])
        counts[i] = [*(t.shape[0] for t in to), halo.shape[0]]
    every = _a2a_gather(torch.from_numpy(counts), on)  # (W, tables, W + 1): sender first
    return HaloPlan(ids, own_at, send, recv, every[:, :, :world].transpose(1, 0, 2).copy(),
                    every[:, :, world].T.copy(), is_local)


def _a2a_gather(t: torch.Tensor, on: torch.device) -> np.ndarray:
    """Every rank's ``t`` (same shape everywhere), stacked by rank."""
    parts = [torch.empty_like(t, device=on) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.to(on))
    return torch.stack([p.cpu() for p in parts]).numpy()
