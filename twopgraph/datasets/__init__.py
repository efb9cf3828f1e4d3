"""Dataset registry behind ``--dataset``: synthetic presets, ``.npz`` files, OGB graphs and the
Planetoid citation graphs.

Names resolve in this order (:func:`load_dataset`):

1. a synthetic preset (``twopgraph.datasets.synthetic.SYNTHETIC_PRESETS``, e.g. ``synthetic-tiny``):
   generated once, straight into its store ``<root>/stores/<name>-<hash of its spec>/`` in
   chunks (see :func:`load_preset`; an older twopgraph's ``<root>/<name>.npz`` cache is no
   longer needed);
2. a path to an existing ``.npz`` file (also tried relative to the data root): the dataset
   format (CSR) or the COO exchange format (``edge_index``; symmetrised while ingested);
3. ``ogbn-arxiv``, ``ogbn-products``, ``ogbn-papers100M``: OGB's raw files in ogb's own
   folder ``<root>/ogbn_<x>/`` (so an existing OGB download is used as is; downloaded by
   ogb's download code when absent) are ingested once, streaming, into the store
   ``<root>/stores/<name>-<hash>/`` (:mod:`twopgraph.ingest`; never through ogb's in-memory
   processing); later runs read only the store, again ingested when the raw files change
   (an older twopgraph's ``<root>/ogbn_<x>/twopgraph.npz`` cache is still read);
4. a name of a dataset file or store (:func:`named_dataset`): ``<root>/<name>.npz`` or the
   store folder ``<root>/<name>/``, else the same in a folder of ``$TWOPGRAPH_DATASET_PATH``
   (folders separated by ``:``, like ``PATH``: e.g. a shared, read-only folder of real
   graphs or stores), else the store an earlier
   run converted from a ``<name>.npz`` (``<root>/stores/<name>-<hash>/``: read through its
   file while that exists, as the store it is once the file is gone);
5. ``cora``, ``citeseer``, ``pubmed`` (:data:`PLANETOID_DATASETS`; only when step 4 finds no
   file or store of that name: a user's own ``cora.npz`` wins): the Planetoid citation graphs,
   their raw files in ``<root>/planetoid/<name>/raw/`` (downloaded from
   :data:`PLANETOID_URL` when missing, as PyG's ``Planetoid`` does) read once, PyG's way with
   the public split, into the store ``<root>/stores/<name>-<hash>/`` (:mod:`.planetoid`).

:func:`list_datasets` (``twopgraph datasets``) lists all of them.

The data root is ``--data-root``, else ``$TWOPGRAPH_DATA``, else ``~/.cache/twopgraph``
(:func:`resolve_data_root`). Every failure a user can fix raises a one-line
:class:`~twopgraph.errors.TwopgraphError` (an unknown name, or a ``.npz`` not found, names the
closest known datasets: "did you mean"); malformed files raise
:class:`~twopgraph.errors.GraphFormatError`. Only exceptions of the kinds a download or a
damaged file produces, raised inside ogb, are turned into such a line; any other exception
(a bug, in twopgraph or in ogb) keeps its traceback.

The package: :mod:`.load` (:func:`load_dataset`), :mod:`.builtin` (the built-in names),
:mod:`.paths` (the data root, store folders, OGB's folders), :mod:`.names` (plain names and
``$TWOPGRAPH_DATASET_PATH``), :mod:`.dtype` (``--store-dtype``), :mod:`.sourcestore` (the
store of a source file, kept fresh), :mod:`.presets` (the synthetic datasets), :mod:`.ogb` and
:mod:`.download` (the OGB datasets; ogb's download code), :mod:`.planetoid` (cora,
citeseer, pubmed), :mod:`.identity` (a dataset's identity without loading it; partitions'
datasets), :mod:`.catalogue` (:func:`list_datasets`, "did you mean").

Example::

    >>> data = load_dataset("synthetic-tiny", data_root="/tmp/data")   # doctest: +SKIP
    >>> [d["name"] for d in list_datasets("/tmp/data")][:1]              # doctest: +SKIP
    ['synthetic-tiny']
"""

from twopgraph.datasets.builtin import OGB_BINARY, OGB_DATASETS, PLANETOID_DATASETS
from twopgraph.datasets.catalogue import list_datasets
from twopgraph.datasets.download import OGB_NET_TIMEOUT_S, ogb_session
from twopgraph.datasets.dtype import (
                                      AUTO_HALF_SHARE,
                                      STORE_DTYPE_CHOICES,
                                      STORE_DTYPES,
                                      float32_feature_bytes,
                                      resolve_store_dtype,
                                      store_dtype_of,
)
from twopgraph.datasets.identity import (
                                      dataset_identity,
                                      dataset_path,
                                      partition_dataset,
                                      same_dataset,
                                      source_dataset,
)
from twopgraph.datasets.load import load_dataset
from twopgraph.datasets.names import dataset_search_path, named_dataset
from twopgraph.datasets.paths import (
                                      DATA_ROOT_ENV,
                                      DATASET_PATH_ENV,
                                      DEFAULT_DATA_ROOT,
                                      OGB_CACHE_FILE,
                                      STORES_DIR,
                                      resolve_data_root,
                                      store_folder,
)
from twopgraph.datasets.planetoid import (
                                      PLANETOID_NET_TIMEOUT_S,
                                      PLANETOID_URL,
                                      download_planetoid,
                                      load_planetoid,
                                      planetoid_raw_folder,
)
from twopgraph.datasets.presets import load_papers, load_preset, load_synthetic, preset_store

__all__ = ["AUTO_HALF_SHARE", "DATASET_PATH_ENV", "DATA_ROOT_ENV", "DEFAULT_DATA_ROOT",
           "OGB_BINARY", "OGB_CACHE_FILE", "OGB_DATASETS", "OGB_NET_TIMEOUT_S",
           "PLANETOID_DATASETS", "PLANETOID_NET_TIMEOUT_S", "PLANETOID_URL", "STORES_DIR",
           "STORE_DTYPES", "STORE_DTYPE_CHOICES", "dataset_identity", "dataset_path",
           "dataset_search_path", "download_planetoid", "float32_feature_bytes", "list_datasets",
           "load_dataset", "load_papers", "load_planetoid", "load_preset", "load_synthetic",
           "named_dataset", "ogb_session", "partition_dataset", "planetoid_raw_folder",
           "preset_store", "resolve_data_root", "resolve_store_dtype", "same_dataset",
           "source_dataset", "store_dtype_of", "store_folder"]
