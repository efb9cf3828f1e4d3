"""The provenance fingerprint: its documented encoding, what changes it and what does not."""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass

import numpy as np
import pytest

from twopgraph.core import fingerprint as fp_mod
from twopgraph.core.fingerprint import canonical, fingerprint, run_fingerprint


def reference(kind: str, params: dict, *arrays, leaf_bytes: int = fp_mod.LEAF_BYTES) -> str:
    """The encoding as the module docstring states it, written out independently."""
    h = hashlib.blake2b(digest_size=16, person=b"twopgraph-fp-v1")

    def field(b: bytes) -> None:
        h.update(struct.pack("<Q", len(b)) + b)
    field(kind.encode())
    field(json.dumps(params, sort_keys=True, separators=(",", ":")).encode())
    for a in arrays:
        if a is None:
            field(b"none")
            continue
        field(json.dumps({"dtype": a.dtype.str, "shape": list(a.shape)},
                         separators=(",", ":")).encode())
        raw = a.tobytes(order="C")
        step = max(1, leaf_bytes // a.dtype.itemsize) * a.dtype.itemsize
        for s in range(0, len(raw), step):
            h.update(hashlib.blake2b(raw[s:s + step]).digest())
    return h.hexdigest()


@pytest.fixture
def small_leaves(monkeypatch):
    """Leaves of 64 bytes, so that small arrays span many leaves (and the thread pool)."""
    monkeypatch.setattr(fp_mod, "LEAF_BYTES", 64)
    return 64


def arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 1000, 301).astype(np.int64),
            rng.standard_normal((37, 11)).astype(np.float32),
            rng.integers(0, 5, 90).astype(np.int32))


def test_matches_the_documented_encoding(small_leaves):
    a = arrays()
    params = {"k": 4, "name": "x", "f": 0.5, "flags": [True, None]}
    for threads in (1, 3):
        assert fingerprint("demo", params, *a, None, threads=threads) == \
            reference("demo", params, *a, None, leaf_bytes=small_leaves)


def test_matches_the_documented_encoding_with_real_leaves():
    a = arrays()
    assert fingerprint("demo", {"k": 4}, *a) == reference("demo", {"k": 4}, *a)  # one leaf each
    big = np.arange((fp_mod.LEAF_BYTES // 8) * 2 + 5, dtype=np.int64)  # three leaves
    assert fingerprint("big", None, big) == reference("big", {}, big)


def test_equal_content_equal_fingerprint_whatever_the_layout(small_leaves, tmp_path):
    ip, feat, lab = arrays()
    base = fingerprint("g", {"k": 1}, ip, feat, lab)
    np.save(tmp_path / "feat.npy", feat)
    mm = np.load(tmp_path / "feat.npy", mmap_mode="r")
    big = np.zeros((37, 22), dtype=np.float32)
    big[:, ::2] = feat  # a strided view with the same content
    for f in (feat.copy(), np.asfortranarray(feat), mm, big[:, ::2]):
        assert fingerprint("g", {"k": 1}, ip, f, lab) == base
    for threads in (1, 2, 8):
        assert fingerprint("g", {"k": 1}, ip, feat, lab, threads=threads) == base
    # parameters: key order, tuples and NumPy scalars do not matter
    assert fingerprint("g", {"a": (1, 2), "b": np.int64(3)}) == \
        fingerprint("g", {"b": 3, "a": [1, 2]})


@pytest.mark.parametrize("leaves", ["one", "many"])
def test_any_change_of_content_or_parameters_changes_it(leaves, monkeypatch):
    if leaves == "many":
        monkeypatch.setattr(fp_mod, "LEAF_BYTES", 64)
    ip, feat, lab = arrays()
    base = fingerprint("g", {"k": 1}, ip, feat, lab)
    seen = {base}

    def differs(*args, **kw) -> None:
        f = fingerprint(*args, **kw)
        assert f not in seen
        seen.add(f)
    # one element of any array, at its start, middle or end
    for i, a in enumerate((ip, feat, lab)):
        for pos in (0, a.size // 2, a.size - 1):
            changed = a.copy()
            changed.reshape(-1)[pos] += 1
            args = [ip, feat, lab]
            args[i] = changed
            differs("g", {"k": 1}, *args)
    differs("g", {"k": 1}, ip.astype(np.int32), feat, lab)  # dtype
    differs("g", {"k": 1}, ip, feat.reshape(11, 37), lab)  # shape
    differs("g", {"k": 1}, ip, lab, feat)  # order
    differs("g", {"k": 1}, ip, feat)  # an array fewer
    differs("g", {"k": 1}, ip, feat, lab, None)  # an absent optional array ...
    differs("g", {"k": 1}, ip, feat, lab, np.empty(0))  # ... is not an empty one
    differs("h", {"k": 1}, ip, feat, lab)  # kind
    for params in ({"k": 2}, {"k": 1.0}, {"k": True}, {"k": "1"}, {"k": 1, "j": 0}, {}):
        differs("g", params, ip, feat, lab)


def test_canonical_refuses_what_has_no_canonical_form():
    @dataclass
    class Spec:
        n: int
        frac: float

    assert canonical(Spec(3, 0.5)) == {"n": 3, "frac": 0.5}
    assert canonical({"x": np.float32(0.5), "y": (np.bool_(True),)}) == {"x": 0.5, "y": [True]}
    for bad in ({"a": np.arange(3)}, {"a": object()}, {1: "int key"}, {"s": {1, 2}}):
        with pytest.raises(TypeError):
            fingerprint("g", bad)
    with pytest.raises(TypeError, match="object array"):
        fingerprint("g", None, np.array([1, "a"], dtype=object))
    with pytest.raises(TypeError, match="kind"):
        fingerprint("", None)


def test_run_fingerprint_follows_config_and_data():
    class Data:
        def __init__(self, fp: str):
            self.fp = fp

        def fingerprint(self) -> str:
            return self.fp

    cfg = {"lr": 0.01, "fanouts": [15, 10]}
    a = run_fingerprint(cfg, Data("x"))
    assert a == run_fingerprint(dict(cfg), "x")  # a fingerprint string stands for the data
    assert a != run_fingerprint(dict(cfg, lr=0.02), Data("x"))
    assert a != run_fingerprint(dict(cfg, fanouts=[15, 5]), Data("x"))
    assert a != run_fingerprint(cfg, Data("y"))
    assert a != run_fingerprint(cfg)
