"""The :class:`MiniBatch` that each pipeline stage fills in, and the per-layer :class:`Block`.

Local ids: in a mini-batch every vertex gets one local id, seeds first (``0..B-1``), then the
vertices each hop adds, in order of first appearance. Because every hop keeps the previous
vertices as a prefix, the dst vertices of a block are the first ``num_dst`` of its src
vertices (as in DGL and PyG), and ``input_nodes[i]`` is the global id of local vertex ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass
class Block:
    """One GNN layer's bipartite graph: ``num_src`` src vertices -> ``num_dst`` dst vertices.

    ``indptr`` (int64, num_dst+1) and ``indices`` (int64, E) are dst-major CSR over local src
    ids: the sampled neighbours of dst ``i`` are ``indices[indptr[i]:indptr[i+1]]``.
    ``src_deg`` / ``dst_deg`` (float32) are the full-graph degrees of the src / dst vertices
    (GCN's normalisation needs them; sampling rescales by full/sampled degree).
    ``num_neighbors`` (int64, num_dst; optional) is the number of neighbours each dst's
    aggregation is over when the block holds only some of them -- a tile of streamed exact
    inference, whose partial aggregations are summed -- and None when it is the block's own
    edge count (:meth:`sampled_deg`).
    ``edge_weight`` (float32, E; optional) is each edge's weight in its dst's mean when the
    sampler does not keep neighbours uniformly -- LABOR's inverse inclusion probabilities,
    normalised to sum to 1 over each dst's edges (:mod:`twopgraph.sampler.labor`) -- and None
    for a uniform sample or a whole neighbourhood (the mean is then ``1 / count``).

    Example::

        >>> b = Block(2, 1, torch.tensor([0, 1]), torch.tensor([1]),
        ...           torch.tensor([1., 1.]), torch.tensor([1.]))
        >>> b.edge_index.tolist(), b.size
        ([[1], [0]], (2, 1))
    """

    num_src: int
    num_dst: int
    indptr: torch.Tensor
    indices: torch.Tensor
    src_deg: torch.Tensor
    dst_deg: torch.Tensor
    num_neighbors: torch.Tensor | None = None
    edge_weight: torch.Tensor | None = None

    @property
    def num_edges(self) -> int:
        return int(self.indices.shape[0])

    @property
    def size(self) -> tuple[int, int]:
        """PyG-style ``(num_src, num_dst)``."""
        return (self.num_src, self.num_dst)

    @property
    def edge_index(self) -> torch.Tensor:
        """PyG-style ``2 x E`` int64 tensor: row 0 = local src id, row 1 = local dst id
        (messages flow source -> target)."""
        dst = torch.repeat_interleave(
            torch.arange(self.num_dst, device=self.indptr.device), self.indptr.diff())
        return torch.stack([self.indices, dst])

    def sampled_deg(self) -> torch.Tensor:
        """Number of sampled neighbours of each dst vertex (int64, num_dst): the edges each
        dst's aggregation is over -- ``num_neighbors`` when set, else its edges here."""
        return self.indptr.diff() if self.num_neighbors is None else self.num_neighbors

    def edge_counts(self) -> torch.Tensor:
        """Number of edges of each dst vertex in this block (int64, num_dst)."""
        return self.indptr.diff()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Block":
        return replace(self, **{f: _moved(getattr(self, f), device, non_blocking)
                                for f in _BLOCK_TENSORS})

    def pin_memory(self) -> "Block":
        """The block with its host tensors in pinned memory (tensors already on a device stay
        as they are), so that a ``non_blocking`` copy to a GPU is truly asynchronous."""
        return replace(self, **{f: _pinned(getattr(self, f)) for f in _BLOCK_TENSORS})

    def record_stream(self, stream: torch.Stream) -> None:
        """``Tensor.record_stream(stream)`` for every device tensor of the block."""
        for f in _BLOCK_TENSORS:
            _record(getattr(self, f), stream)


_BLOCK_TENSORS = ("indptr", "indices", "src_deg", "dst_deg", "num_neighbors", "edge_weight")


def _moved(t: torch.Tensor | None, device, non_blocking: bool) -> torch.Tensor | None:
    return None if t is None else t.to(device, non_blocking=non_blocking)


def _pinned(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None or t.device.type != "cpu" or t.is_pinned():
        return t
    return t.pin_memory()


def _record(t: torch.Tensor | None, stream) -> None:
    if t is not None and t.device.type != "cpu":
        t.record_stream(stream)


@dataclass
class MiniBatch:
    """Everything one training step needs.

    ``seeds`` and ``input_nodes`` hold global vertex ids (int64); ``blocks[0]`` consumes the
    input features (one block per GNN layer, input side first); ``labels`` (int64) of the
    seeds and ``features`` (rows of ``input_nodes``) are filled by later stages.
    ``batch_id`` is the position in the epoch.
    """

    seeds: torch.Tensor
    input_nodes: torch.Tensor
    blocks: list[Block]
    labels: torch.Tensor | None = None
    features: torch.Tensor | None = None
    batch_id: int = 0

    @property
    def num_seeds(self) -> int:
        return int(self.seeds.shape[0])

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "MiniBatch":
        """Copy tensors to ``device`` (ids stay where they are: the host needs them)."""
        return replace(
            self,
            blocks=[b.to(device, non_blocking) for b in self.blocks],
            labels=None if self.labels is None
            else self.labels.to(device, non_blocking=non_blocking),
            features=None if self.features is None
            else self.features.to(device, non_blocking=non_blocking),
        )

    def pin_memory(self) -> "MiniBatch":
        """The batch with the host tensors that go to the device (blocks, labels, features)
        in pinned memory; ids stay as they are (they stay on the host), tensors already on a
        device too. Pinning needs CUDA: the loader calls it only when training on a GPU."""
        return replace(self, blocks=[b.pin_memory() for b in self.blocks],
                       labels=_pinned(self.labels), features=_pinned(self.features))

    def record_stream(self, stream: torch.Stream) -> None:
        """``Tensor.record_stream(stream)`` for every device tensor the model reads (blocks,
        labels, features): tensors made on a side stream (copies, device sampling) are then
        not reused by the caching allocator before ``stream``'s work on them is done."""
        for b in self.blocks:
            b.record_stream(stream)
        _record(self.labels, stream)
        _record(self.features, stream)
