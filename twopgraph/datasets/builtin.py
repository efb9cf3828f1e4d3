"""The built-in datasets: the OGB names (:data:`OGB_DATASETS`, with a line about each;
:data:`OGB_BINARY`: those downloaded in OGB's binary layout), the Planetoid citation graphs
(:data:`PLANETOID_DATASETS`: cora, citeseer, pubmed), the synthetic presets of
:mod:`twopgraph.datasets.synthetic` and the ``synthetic-papers[:SCALE]`` presets of
:mod:`twopgraph.datasets.papers` (both imported lazily: they pull in numba).
"""

from __future__ import annotations

OGB_DATASETS = {
    "ogbn-arxiv": "OGB citation graph: 169,343 nodes, 1.17M edges, 128 features, 40 classes",
    "ogbn-products": "OGB co-purchase graph: 2.45M nodes, 61.9M edges, 100 features, "
                     "47 classes",
    "ogbn-papers100M": "OGB citation graph: 111M nodes, 1.6B edges, 128 features, 172 classes "
                       "(57 GB of features; ingested streaming from OGB's raw files)",
}


#: The Planetoid citation graphs (public split, as PyG's ``Planetoid``): name -> a line about
#: it. Loaded after a user's own file or store of that name (:mod:`.planetoid`).
PLANETOID_DATASETS = {
    "cora": "Planetoid citation graph (PyG's Planetoid, public split): 2,708 nodes, 5,278 "
            "undirected edges, 1,433 features, 7 classes",
    "citeseer": "Planetoid citation graph (PyG's Planetoid, public split): 3,327 nodes, 4,552 "
                "undirected edges, 3,703 features, 6 classes",
    "pubmed": "Planetoid citation graph (PyG's Planetoid, public split): 19,717 nodes, 44,324 "
              "undirected edges, 500 features, 3 classes",
}


#: OGB datasets whose download is in the binary layout (``raw/data.npz``).
OGB_BINARY = frozenset({"ogbn-papers100M"})


def _synthetic_presets() -> dict:
    """The preset table of :mod:`twopgraph.datasets.synthetic` (imported lazily: it pulls in
    numba)."""
    from twopgraph.datasets.synthetic import SYNTHETIC_PRESETS
    return SYNTHETIC_PRESETS


def _papers_spec(name: str):
    """The :class:`~twopgraph.datasets.papers.PapersSpec` of ``synthetic-papers[:SCALE]``, else
    None."""
    if not name.startswith("synthetic-papers"):
        return None
    from twopgraph.datasets.papers import parse_preset
    return parse_preset(name)


def _describe_preset(preset) -> str:
    """One-line description of a preset, whatever shape the preset table uses."""
    if isinstance(preset, str):
        return preset
    if isinstance(preset, dict):
        return str(preset.get("description", "synthetic graph"))
    return str(getattr(preset, "description", "synthetic graph"))
