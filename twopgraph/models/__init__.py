"""The GNN models: one graph convolution per module, registered in
:data:`~twopgraph.core.protocols.MODELS`, stacked by :class:`~twopgraph.models.base.BlockGNN`.

- ``sage`` (:class:`~twopgraph.models.sage.SAGEConv`): GraphSAGE, mean aggregator;
- ``gcn`` (:class:`~twopgraph.models.gcn.GCNConv`): GCN, symmetric normalisation;
- and every other module of this package that registers a conv (e.g. ``gat``).

A new model is one new module here, found by the registry: nothing else changes
(docs/architecture.md: the conv contract, and the diff that added GAT). A model of your own
needs no module here: ``module.path:ClassName`` (``--model``, ``ModelConfig(model=...)``,
``build_model``) imports it (:mod:`twopgraph.models.imported`).

Example::

    >>> m = build_model("sage", in_dim=16, hidden=32, num_classes=5, num_layers=2)
    >>> sum(p.numel() for p in m.parameters()) > 0
    True
"""

from twopgraph.core.protocols import MODELS
from twopgraph.models.base import BlockGNN, Conv, as_conv, build_model, model_from_config
from twopgraph.models.imported import ModelImportError, import_conv

# registration order = the order models are listed in: the default first
from twopgraph.models.sage import SAGEConv  # isort: skip
from twopgraph.models.gcn import GCNConv  # isort: skip

MODELS.import_specs(import_conv)  # "module.path:Class": a user's model, imported

__all__ = ["MODELS", "BlockGNN", "Conv", "GCNConv", "ModelImportError", "SAGEConv", "as_conv",
           "build_model", "import_conv", "model_from_config"]
