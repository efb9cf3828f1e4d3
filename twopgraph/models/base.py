"""The GNN of every model: :class:`Conv` (the base of the registered convolutions, with the
defaults of the conv contract) and :class:`BlockGNN` (a stack of convs over a mini-batch's
blocks, ReLU and dropout between them).

A model is one conv class registered in :data:`~twopgraph.core.protocols.MODELS` (a module of
``twopgraph/models/``) or a user's own (:mod:`twopgraph.models.imported`; :func:`as_conv`
makes a plain ``nn.Module`` layer a :class:`Conv`); :func:`build_model` and
:func:`model_from_config` stack it. The conv
contract (what training, exact inference and the cache budget call) is written in
:class:`~twopgraph.core.protocols.Conv` and docs/architecture.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from twopgraph.core.minibatch import Block, MiniBatch
from twopgraph.core.protocols import MODELS
from twopgraph.models.dropout import relu_dropout

if TYPE_CHECKING:
    class _ModelSection(Protocol):
        """What :func:`model_from_config` reads of a model config section (``ModelConfig``,
        a layer above this one)."""

        model: str
        hidden: int
        dropout: float

        def conv_options(self) -> dict: ...


class Conv(nn.Module):
    """Base of the graph convolutions in :data:`~twopgraph.core.protocols.MODELS`: ``in_dim`` ->
    ``out_dim`` columns, called as ``conv(block, h_src, h_dst)``.

    A subclass names in :attr:`options` the fields of the model config section it reads
    besides the sizes (``gat``: ``heads``); :meth:`build` receives them, and the checkpoint
    records them (the model spec) so that ``predict`` rebuilds the same model."""

    #: fields of the model config section (``ModelConfig``) this conv is built from
    options: tuple[str, ...] = ()
    in_dim: int
    out_dim: int

    @classmethod
    def build(cls, in_dim: int, out_dim: int, *, last: bool, **options: Any) -> "Conv":
        """Layer ``in_dim`` -> ``out_dim``; ``last``: the output layer; ``options``: the
        section's values of :attr:`options`."""
        return cls(in_dim, out_dim)

    @classmethod
    def check_options(cls, hidden: int, **options: Any) -> None:
        """Raise :class:`~twopgraph.errors.ConfigError` (one line) when ``options`` cannot
        build this conv with ``hidden`` columns (called when the config is validated)."""

    @classmethod
    def activation_width(cls, out_dim: int, fanout: int, *, last: bool,
                         **options: Any) -> int:
        """float32 values a training step keeps per *input* row of the mini-batch for one
        layer of ``out_dim`` columns over ``fanout`` neighbours per dst (``last``: the output
        layer; ``options``: :attr:`options`' values): what autograd keeps (gradients and
        temporaries are the caller's factor). An upper estimate for the default CUDA cache
        budget's activation reserve; here ``out_dim``, the output of a SAGE/GCN layer."""
        return out_dim

    @classmethod
    def edge_values(cls, **options: Any) -> int:
        """float32 values the layer computes per edge besides the edge weights (exact
        inference's chunks are sized in edges): 0 here."""
        return 0


class BlockGNN(nn.Module):
    """A stack of conv layers with ReLU and dropout between them (not after the last).

    ``conv``: a :class:`Conv` subclass (built by :meth:`Conv.build` with ``options``) or any
    callable ``conv(in_dim, out_dim)`` returning a module of the conv contract."""

    def __init__(self, conv: Callable[..., nn.Module], in_dim: int, hidden: int,
                 num_classes: int, num_layers: int, dropout: float = 0.5,
                 **options: Any) -> None:
        super().__init__()
        dims = [in_dim] + [hidden] * (num_layers - 1) + [num_classes]
        if isinstance(conv, type) and issubclass(conv, Conv):
            layers = (conv.build(dims[i], dims[i + 1], last=i == num_layers - 1, **options)
                      for i in range(num_layers))
        else:
            layers = (conv(dims[i], dims[i + 1]) for i in range(num_layers))
        self.convs = nn.ModuleList(layers)
        self.dropout = nn.Dropout(dropout)  # applied through relu_dropout

    @property
    def num_layers(self) -> int:
        return len(self.convs)

    def layer(self, i: int, block: Block, h_src: torch.Tensor,
              h_dst: torch.Tensor) -> torch.Tensor:
        """Layer ``i`` alone, with its activation (used by layer-wise inference)."""
        return self.activate(i, self.convs[i](block, h_src, h_dst))

    def activate(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """What follows conv ``i``: ReLU and dropout (the identity in eval mode) between
        layers, nothing after the last. Exact inference, which runs the convs in pieces of
        its own, calls this too, so a model with another activation is evaluated as it
        trains, on one process or on several."""
        if i < self.num_layers - 1:
            h = relu_dropout(h, self.dropout)
        return h

    def forward(self, mb: MiniBatch) -> torch.Tensor:
        if len(mb.blocks) != self.num_layers:
            raise ValueError(f"model has {self.num_layers} layers, mini-batch "
                             f"{len(mb.blocks)} blocks")
        h = mb.features.to(torch.float32)
        for i, block in enumerate(mb.blocks):
            h = self.layer(i, block, h, h[:block.num_dst])
        return h


def build_model(name: str | type[nn.Module], in_dim: int, hidden: int, num_classes: int,
                num_layers: int, dropout: float = 0.5, **options: Any) -> BlockGNN:
    """A GNN of the conv registered as ``name`` in :data:`~twopgraph.core.protocols.MODELS`
    ("sage", "gcn", ...; an unknown name is a one-line :class:`ConfigError`), of the class a
    ``module.path:ClassName`` spec imports, or of the class ``name`` itself (a user's
    layer: :mod:`twopgraph.models.imported`); ``options``: the conv's own options
    (:attr:`Conv.options`, e.g. ``heads=4`` for gat; defaults when left out). ``in_dim``,
    ``hidden``, ``num_classes``: columns; ``num_layers``: convs."""
    if isinstance(name, type):
        conv = name if issubclass(name, Conv) else as_conv(name)
    else:
        conv = MODELS.get(name)
    return BlockGNN(conv, in_dim, hidden, num_classes, num_layers, dropout, **options)


def model_from_config(section: _ModelSection, num_features: int, num_classes: int,
                      num_layers: int) -> BlockGNN:
    """The GNN a model config section (``ModelConfig``) describes: ``model``, ``hidden``,
    ``dropout`` and the conv's :attr:`Conv.options` (``section.conv_options()``)."""
    return build_model(section.model, num_features, section.hidden, num_classes, num_layers,
                       section.dropout, **section.conv_options())


_ADAPTED: dict[type, type] = {}  # a plain nn.Module class -> its Conv subclass
_LOCK = threading.Lock()


def as_conv(cls: type[nn.Module]) -> type[Conv]:
    """``cls`` (an ``nn.Module`` subclass taking ``(in_dim, out_dim)``) as a :class:`Conv`
    subclass: built as ``cls(in_dim, out_dim)``, ``in_dim``/``out_dim`` set on the layer when
    it has none, the contract's defaults for the rest. Its weights' names are ``cls``'s.
    The same class for the same ``cls``."""
    with _LOCK:
        have = _ADAPTED.get(cls)
        if have is not None:
            return have

        def build(klass, in_dim: int, out_dim: int, *, last: bool, **options: Any) -> nn.Module:
            layer = klass(in_dim, out_dim)
            for key, value in (("in_dim", in_dim), ("out_dim", out_dim)):
                if not hasattr(layer, key):
                    setattr(layer, key, value)
            return layer

        adapted = type(cls.__name__, (cls, Conv), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__, "build": classmethod(build)})
        _ADAPTED[cls] = adapted
        return adapted
