"""The dataset store: one folder of memory-mappable arrays per dataset, shared by every process.
Opened with :func:`open_store` (:mod:`.reader`), written by :func:`write_store` (:mod:`.writer`),
converted from and to ``.npz`` (:mod:`.npz`); files that change under a running process are
reported in one line instead of a SIGBUS (:mod:`.mapped`).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "open_store": "reader", "is_store": "reader", "read_store_meta": "reader",
    "disk_bytes": "reader", "files_changed": "reader", "STORE_VERSION": "reader",
    "write_store": "writer", "permuted_store": "writer",
    "convert_npz": "npz", "export_npz": "npz",
    "StoreChanged": "mapped",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
