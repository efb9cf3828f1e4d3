"""Streaming ingestion: raw graph files read chunk by chunk straight into a dataset store.

Three kinds of input; the first two take one path into the store (:func:`ingest`):

* **OGB node-property datasets in OGB's own raw layout** (:func:`ogb_raw`), the files ogb
  downloads, never through ogb's in-memory processing (which needs ~224 GB for
  ogbn-papers100M):

  - binary (ogbn-papers100M): ``raw/data.npz`` with ``edge_index`` (2 x E, int64),
    ``node_feat`` (N x F), ``num_nodes_list``, ``num_edges_list`` (``node_year`` and other
    keys are ignored); ``raw/node-label.npz`` with ``node_label`` (N x 1, float; NaN =
    unlabelled);
  - CSV (ogbn-arxiv, ogbn-products): ``raw/edge.csv.gz`` (E rows ``src,dst``),
    ``raw/node-feat.csv.gz`` (N rows), ``raw/node-label.csv.gz``, ``raw/num-node-list.csv.gz``,
    ``raw/num-edge-list.csv.gz``;
  - the split: ``split/<kind>/{train,valid,test}.csv.gz`` (or ogb's ``split_dict.pt``).

* **the COO exchange format** (:func:`coo_npz`): one ``.npz`` with ``edge_index`` (2 x E or
  E x 2, integer ids, directed or not), ``feat`` (N x F), ``label`` (N; integer class ids, -1
  or NaN = unlabelled), ``train_idx``, ``val_idx``, ``test_idx`` and optionally
  ``num_nodes`` and ``num_classes`` (docs/formats.md).

* **the Planetoid citation graphs' raw files** (:func:`read_planetoid`: Cora, CiteSeer,
  PubMed; ``ind.NAME.{x,tx,allx,y,ty,ally,graph,test.index}``, read as PyG's ``Planetoid``
  reads them, in memory: they are small) into a :class:`~twopgraph.graph.data.GraphData`, which
  :func:`~twopgraph.store.writer.write_store` writes.

Every array is read in chunks of about :data:`~twopgraph.store.reader.CHUNK_BYTES`: an uncompressed
(stored) ``.npz`` member is memory-mapped in place; a compressed one is inflated chunk by
chunk (the edge list into a scratch file inside the store being written, removed before it
is committed). The graph is symmetrised, deduplicated and freed of self loops by the bounded
memory CSR builder (:mod:`twopgraph.graph.csrbuild`), and one log line says what changed. Labels
NaN become -1 (outside every split); a fractional or negative label, an edge id
``>= num_nodes``, a feature table of another row count, a split id out of range, a missing or
truncated file: one line (:class:`~twopgraph.errors.GraphFormatError`) naming the file, and
no store (the half-written one is a temporary folder, removed). Memory: the CSR builder's
per-vertex counters (24 bytes per vertex) plus a few chunks; the labels and splits are read
whole (N and split-sized).

The package: :mod:`.npz` (one array of an ``.npz`` read without loading it), :mod:`.raw`
(:class:`RawDataset` and the checks of its arrays), :mod:`.ogb` (OGB's raw layouts),
:mod:`.coo` (the COO exchange format), :mod:`.planetoid` (the Planetoid files), :mod:`.write`
(:func:`ingest` into the store).

Example::

    >>> raw = ogb_raw("ogbn-arxiv", "datasets/ogbn_arxiv", split="time")   # doctest: +SKIP
    >>> ingest(raw, "datasets/stores/ogbn-arxiv-1a2b3c4d", source=None)   # doctest: +SKIP
"""

from twopgraph.ingest.coo import coo_npz, is_coo_npz
from twopgraph.ingest.npz import READ_ERRORS, NpzMember, members
from twopgraph.ingest.ogb import OGB_SPLIT_FILES, ogb_raw, read_ogb_split
from twopgraph.ingest.planetoid import PLANETOID_FILES, planetoid_files, read_planetoid
from twopgraph.ingest.raw import RawDataset, labels_from
from twopgraph.ingest.write import SCATTER_MIN_BYTES, SCATTER_SHARE, ingest, source_record

__all__ = ["OGB_SPLIT_FILES", "PLANETOID_FILES", "READ_ERRORS", "SCATTER_MIN_BYTES",
           "SCATTER_SHARE", "NpzMember", "RawDataset", "coo_npz", "ingest", "is_coo_npz",
           "labels_from", "members", "ogb_raw", "planetoid_files", "read_ogb_split",
           "read_planetoid", "source_record"]
