"""One array of an ``.npz`` read without loading it.

:class:`NpzMember` reads a member's shape, dtype and memory order from its header only, then
gives its values memory-mapped where they lie in the zip file (a stored, uncompressed member)
or inflated chunk by chunk (about :data:`~twopgraph.store.reader.CHUNK_BYTES` bytes each; a
compressed member, into a scratch ``.npy`` file when it is needed whole). :func:`members` lists
a file's arrays; :data:`READ_ERRORS` is what reading a damaged or truncated raw file raises.
"""

from __future__ import annotations

import contextlib
import os
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from twopgraph.core.files import map_new_npy
from twopgraph.errors import GraphFormatError
from twopgraph.store.npz import npy_chunks, read_npy_header
from twopgraph.store.reader import CHUNK_BYTES

#: What reading a damaged or truncated raw file raises (zip, gzip, zlib, pandas' parser).
READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error, KeyError,
               IndexError, UnicodeDecodeError)


class NpzMember:
    """Member ``key`` of the ``.npz`` at ``path``: ``shape``, ``dtype``, ``fortran`` (memory
    order), ``stored`` (uncompressed: memory-mappable in place) -- read from its header only."""

    def __init__(self, path: str | os.PathLike, key: str) -> None:
        self.path, self.key = Path(path), key
        self.where = f"{self.path}: '{key}'"
        try:
            with zipfile.ZipFile(self.path) as zf:
                self.info = zf.getinfo(f"{key}.npy")
                with zf.open(self.info) as f:
                    self.shape, self.fortran, self.dtype = read_npy_header(f, self.where)
                    self._header = f.tell() if self.info.compress_type == zipfile.ZIP_STORED \
                        else None
        except KeyError:
            raise GraphFormatError(f"{self.path} has no '{key}' array") from None
        except READ_ERRORS as e:
            raise GraphFormatError(f"{self.where}: unreadable, damaged or truncated "
                                   f"({type(e).__name__}: {e})") from None
        self.shape = tuple(int(x) for x in self.shape)
        if self.dtype.hasobject:
            raise GraphFormatError(f"{self.where} holds Python objects (a pickled object "
                                   f"array); save it as a numeric array")
        self.stored = self._header is not None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def _mapped_in_place(self) -> np.ndarray:
        """The member's data memory-mapped where it lies in the zip file (stored only)."""
        with open(self.path, "rb") as f:
            f.seek(self.info.header_offset)
            local = f.read(30)
            if len(local) < 30 or local[:4] != b"PK\x03\x04":
                raise GraphFormatError(f"{self.where}: damaged zip entry")
            name_len = int.from_bytes(local[26:28], "little")
            extra_len = int.from_bytes(local[28:30], "little")
        start = self.info.header_offset + 30 + name_len + extra_len + self._header
        if start + self.size * self.dtype.itemsize > self.path.stat().st_size:
            raise GraphFormatError(f"{self.where}: truncated (the file ends inside it)")
        order = "F" if self.fortran else "C"
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=start,
                         shape=self.shape or (1,), order=order)

    def flat(self, scratch: Path | None = None) -> np.ndarray:
        """The member's values in memory order as a 1-D read-only array: memory-mapped in
        place when stored, else inflated chunk by chunk into ``scratch`` (a ``.npy`` path)."""
        if self.stored:
            m = self._mapped_in_place()
            return m.reshape(-1, order="F" if self.fortran else "C")
        if scratch is None:
            raise ValueError("a compressed member needs a scratch file")
        out = map_new_npy(scratch, self.dtype.newbyteorder("="), (self.size,))
        a = 0
        with _open_member(self) as f:
            for c in npy_chunks(f, (self.size,), self.dtype, self.where):
                out[a:a + c.shape[0]] = c
                a += c.shape[0]
        out.flush()
        del out
        return np.load(scratch, mmap_mode="r")

    def rows(self, rows_per_chunk: int) -> Iterator[np.ndarray]:
        """The member (C order) in chunks of whole rows along axis 0."""
        if self.fortran and len(self.shape) == 2 and self.shape[1] > 1:
            raise GraphFormatError(f"{self.where} is stored column-major (Fortran order); "
                                   f"save it in C order (np.ascontiguousarray)")
        n = self.shape[0] if self.shape else 1
        if self.stored:
            m = self._mapped_in_place()
            for a in range(0, n, rows_per_chunk):
                yield np.asarray(m[a:a + rows_per_chunk])
            return
        with _open_member(self) as f:
            shape = self.shape or (1,)
            yield from npy_chunks(f, shape, self.dtype, self.where)

    def read(self) -> np.ndarray:
        """The whole member in memory (small arrays: counts, labels, splits); a scalar comes
        back as one value."""
        if self.size == 0:
            return np.empty(self.shape, self.dtype)
        row = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
        return np.concatenate(list(self.rows(max(1, CHUNK_BYTES // max(1, row)))))


@contextlib.contextmanager
def _open_member(m: NpzMember):
    try:
        with zipfile.ZipFile(m.path) as zf, zf.open(m.info) as f:
            read_npy_header(f, m.where)
            yield f
    except GraphFormatError:
        raise
    except READ_ERRORS as e:
        raise GraphFormatError(f"{m.where}: damaged or truncated ({type(e).__name__}: "
                               f"{e})") from None


def members(path: str | os.PathLike) -> set[str]:
    """The array names of the ``.npz`` at ``path``."""
    try:
        with zipfile.ZipFile(path) as zf:
            return {n[:-4] for n in zf.namelist() if n.endswith(".npy")}
    except READ_ERRORS as e:
        raise GraphFormatError(f"{path}: not a readable .npz file, damaged or truncated "
                               f"({type(e).__name__}: {e})") from None
