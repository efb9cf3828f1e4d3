"""Feature sources: :class:`HostFeatures` (a plain host table) and the GNN-layer-aware
:class:`FeatureCache` (a device buffer over the host table, driven by a cache policy), and the
offline optimum the policies are judged against.

Policies register in :data:`~twopgraph.core.protocols.CACHE_POLICIES` (name -> factory), one module
each: ``none`` (no cache), ``degree`` (PaGraph), ``presample`` (GNNLab PreSC), ``layer``
(2PGraph: layer-aware static rank + schedule lookahead window). A new policy is a new module
of this package. ``--cache-policy auto`` (the default) is ``layer`` on a CUDA device and
``none`` on the CPU (:func:`resolve_cache_policy`).

Every source reads the one host table as it is given (usually a read-only memory map of the
dataset's store; :class:`~twopgraph.cache.host.HostTable`): rows are converted per gathered
chunk, never the whole table, and a sampled batch's rows are read ahead from the store
(:mod:`~twopgraph.cache.readahead`). ``read``/``read_range`` serve exact evaluation (not
counted); ``rows`` maps a part's ids onto the shared table.

Example::

    >>> from twopgraph.graph.data import CSRGraph
    >>> g = CSRGraph.from_edges([0, 1, 2], [1, 2, 3], num_nodes=4)
    >>> ctx = PolicyContext(g, np.array([0, 1]), fanouts=[2, 2], batch_size=2)
    >>> cache = FeatureCache(torch.ones(4, 3), make_policy("degree", ctx), budget=2)
    >>> cache.gather(torch.tensor([0, 1, 3]))[0].shape
    torch.Size([3, 3])
"""

from twopgraph.cache.base import CachePolicy, PolicyContext
from twopgraph.cache.build import (
    AUTO_CACHE_POLICY,
    attach_host_cache,
    build_feature_source,
    make_policy,
    policy_lookahead,
    resolve_cache_policy,
)
from twopgraph.cache.directory import CacheDirectory, GatherPlan, replay
from twopgraph.cache.feature_cache import FEAT_DTYPES, FeatureCache, feat_dtype, resolve_budget
from twopgraph.cache.host import HostFeatures, HostTable, Staging, transfer_dtype
from twopgraph.cache.hostrows import HostRowCache, host_cache_rows
from twopgraph.cache.optimal import belady_min
from twopgraph.cache.readahead import Readahead, find_mmap
from twopgraph.core.metrics import CacheCounters
from twopgraph.core.protocols import CACHE_POLICIES

__all__ = ["CachePolicy", "PolicyContext", "CacheDirectory", "GatherPlan", "replay", "FEAT_DTYPES",
           "FeatureCache", "feat_dtype", "resolve_budget", "HostFeatures", "HostTable", "Staging",
           "HostRowCache", "host_cache_rows", "belady_min", "Readahead", "find_mmap",
           "CacheCounters", "CACHE_POLICIES", "make_policy", "build_feature_source",
           "attach_host_cache", "AUTO_CACHE_POLICY", "resolve_cache_policy",
           "policy_lookahead", "transfer_dtype"]
