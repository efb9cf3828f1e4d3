"""Self-dependence partitions (2PGraph): each worker holds what its L-layer sampling reaches, so
data-parallel training needs no feature traffic. Written by :func:`partition_selfdep`
(:mod:`.selfdep`, from the split of :mod:`.split`), in the folder format of :mod:`.format`, read
and checked by :mod:`.load` and :mod:`.check`; :mod:`.orphans` cleans up after killed writers
and :mod:`.config` is the ``twopgraph partition`` verb's config. :mod:`.halo` plans and runs the
exchange of halo rows between ranks on several machines (distributed exact evaluation).
"""

from twopgraph.imports import lazy_exports

_EXPORTS = {
    "partition_selfdep": "selfdep",
    "Part": "load", "load_part": "load", "read_meta": "load", "verify_partition": "load",
    "PartitionError": "format", "FORMAT_VERSION": "format",
    "PartitionConfig": "config",
    "HaloPlan": "halo", "halo_plan": "halo",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
