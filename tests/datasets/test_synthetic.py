"""Tests of twopgraph.datasets.synthetic: structure, determinism and the public door of
generate()."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest

from twopgraph.datasets.synthetic import (
    SYNTHETIC_PRESETS,
    SyntheticSpec,
    edge_homophily,
    generate,
    spec_fingerprint,
    spec_summary,
)
from twopgraph.errors import ConfigError
from twopgraph.graph.data import GraphData

TINY = "synthetic-tiny"


@pytest.fixture(scope="module")
def tiny() -> GraphData:
    return generate(TINY)


def _arrays(d: GraphData) -> dict:
    return dict(indptr=d.graph.indptr, indices=d.graph.indices, feat=d.feat, label=d.label,
                train=d.train_idx, val=d.val_idx, test=d.test_idx)


def _nearest_centroid_acc(x, label, train, test, num_classes) -> float:
    cent = np.stack([x[train][label[train] == c].mean(0) for c in range(num_classes)])
    pred = ((x[test, None, :] - cent[None]) ** 2).sum(-1).argmin(1)
    return float((pred == label[test]).mean())


def test_presets_have_the_required_names_and_scales():
    assert {TINY, "synthetic-small", "synthetic-products"} <= set(SYNTHETIC_PRESETS)
    for name, spec in SYNTHETIC_PRESETS.items():
        assert isinstance(spec, SyntheticSpec) and spec.name == name and spec.description
    small, prod = SYNTHETIC_PRESETS["synthetic-small"], SYNTHETIC_PRESETS["synthetic-products"]
    assert (small.num_nodes, small.num_edges, small.num_features, small.num_classes) == (
        100_000, 1_200_000, 100, 47)
    assert abs(prod.num_nodes - 2_450_000) < 10_000 and abs(prod.num_edges - 62e6) < 1e6
    assert spec_summary(small)["num_classes"] == 47


def test_tiny_is_a_valid_symmetric_graph_with_the_spec_sizes(tiny):
    spec = SYNTHETIC_PRESETS[TINY]
    tiny.validate(check_symmetric=True)
    g = tiny.graph
    assert tiny.name == TINY and tiny.num_classes == spec.num_classes
    assert g.num_nodes == spec.num_nodes and g.num_edges == 2 * spec.num_edges
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int32
    assert tiny.feat.dtype == np.float32 and tiny.feat.shape == (spec.num_nodes, spec.num_features)
    assert tiny.label.dtype == np.int64 and set(np.unique(tiny.label)) == set(range(5))
    # Rows sorted (strictly: no duplicates), which validate() does not check.
    row_start = np.zeros(g.num_edges, dtype=bool)
    row_start[g.indptr[:-1][g.degrees() > 0]] = True
    assert np.all((np.diff(g.indices.astype(np.int64)) > 0) | row_start[1:])
    n = spec.num_nodes
    for idx, frac in ((tiny.train_idx, spec.train_frac), (tiny.val_idx, spec.val_frac)):
        assert idx.dtype == np.int64 and np.all(np.diff(idx) > 0)
        assert idx.shape[0] == round(frac * n)
    assert tiny.train_idx.shape[0] + tiny.val_idx.shape[0] + tiny.test_idx.shape[0] == n
    assert np.isfinite(tiny.feat).all()


def test_same_seed_gives_byte_identical_arrays(tiny):
    again = generate(TINY)
    for key, a in _arrays(tiny).items():
        b = _arrays(again)[key]
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), key


def test_different_seeds_differ_and_seed_overrides_the_spec():
    a, b = generate(TINY, seed=1), generate(TINY, seed=2)
    assert not np.array_equal(a.graph.indptr, b.graph.indptr)
    assert not np.array_equal(a.feat, b.feat) and not np.array_equal(a.train_idx, b.train_idx)
    c = generate(replace(SYNTHETIC_PRESETS[TINY], seed=1))
    for key, x in _arrays(a).items():
        assert np.array_equal(x, _arrays(c)[key]), key


def test_degrees_are_heavy_tailed(tiny):
    deg = tiny.graph.degrees()
    assert deg.max() >= 8 * deg.mean()
    assert np.median(deg) < deg.mean()  # right-skewed
    assert (deg == 0).mean() < 0.01


def test_edges_are_homophilous(tiny):
    h = edge_homophily(tiny.graph, tiny.label)
    assert h > 2.5 / tiny.num_classes  # 1/C would be no homophily at all
    assert h < 0.95  # label noise and cross-community edges keep it realistic


def test_vertex_ids_carry_no_locality(tiny):
    g, n = tiny.graph, tiny.num_nodes
    src = np.repeat(np.arange(n), g.degrees())
    near = np.abs(src - g.indices) <= n // 100
    assert near.mean() < 0.05  # a random graph gives ~2/100; contiguous communities ~1
    # Classes are spread over the whole id range, not in blocks.
    halves = [np.bincount(tiny.label[s], minlength=5) for s in (slice(0, n // 2),
                                                                 slice(n // 2, n))]
    assert np.all(np.minimum(*halves) > 0.5 * np.maximum(*halves))


def test_communities_are_found_by_metis(tiny):
    pymetis = pytest.importorskip("pymetis")
    g = tiny.graph
    if hasattr(pymetis, "CSRAdjacency"):  # pymetis >= 2025.2
        _, parts = pymetis.part_graph(20, pymetis.CSRAdjacency(g.indptr, g.indices))
    else:
        _, parts = pymetis.part_graph(20, xadj=g.indptr, adjncy=g.indices)
    parts = np.asarray(parts)
    src = np.repeat(np.arange(g.num_nodes), g.degrees())
    assert (parts[src] != parts[g.indices]).mean() < 0.4  # random graph: ~0.95


def test_neighbour_averaging_beats_raw_features(tiny):
    a = tiny.graph.to_scipy()
    deg = np.maximum(tiny.graph.degrees(), 1).astype(np.float32)
    x = tiny.feat
    ax = (a @ x) / deg[:, None]
    args = (tiny.label, tiny.train_idx, tiny.test_idx, tiny.num_classes)
    raw = _nearest_centroid_acc(x, *args)
    avg = _nearest_centroid_acc(np.hstack([x, ax]), *args)
    assert raw > 1.5 / tiny.num_classes  # features carry label signal...
    assert avg > raw + 0.05  # ...and neighbours add clearly more
    assert avg < 0.99  # but the task is not trivial


def test_scaled_down_spec_and_explicit_test_fraction():
    spec = replace(SYNTHETIC_PRESETS["synthetic-small"], num_nodes=3000, num_edges=20_000,
                   num_communities=60, test_frac=0.3, name="mini")
    d = generate(spec).validate(check_symmetric=True)
    assert d.name == "mini" and d.num_nodes == 3000 and d.graph.num_edges == 40_000
    assert d.num_features == 100 and d.num_classes == 47
    assert (d.train_idx.shape[0], d.val_idx.shape[0], d.test_idx.shape[0]) == (600, 300, 900)


def test_progress_bar_goes_to_stderr(capsys):
    generate(TINY, progress=True)
    out, err = capsys.readouterr()
    assert out == "" and TINY in err


def test_unknown_name_raises_config_error_listing_known_names():
    with pytest.raises(ConfigError) as e:
        generate("synthetic-huge")
    msg = str(e.value)
    assert "\n" not in msg and "synthetic-huge" in msg
    assert all(name in msg for name in SYNTHETIC_PRESETS)


@pytest.mark.parametrize("bad", [
    dict(train_frac=0.0), dict(train_frac=0.8, val_frac=0.3), dict(p_in=0.9, p_class=0.2),
    dict(num_communities=3), dict(num_edges=10**9), dict(degree_exponent=2.0),
    dict(num_nodes=2.5), dict(local_window=0.0), dict(label_noise=1.5),
])
def test_bad_specs_raise_config_error(bad):
    with pytest.raises(ConfigError):
        replace(SYNTHETIC_PRESETS[TINY], **bad)


def test_bad_arguments_raise():
    with pytest.raises(TypeError):
        generate(42)
    with pytest.raises(ConfigError):
        generate(TINY, seed=-1)


def test_spec_fingerprint_covers_every_field_that_changes_the_arrays(monkeypatch):
    from twopgraph.datasets import synthetic
    spec = SYNTHETIC_PRESETS[TINY]
    base = spec_fingerprint(spec)
    assert spec_fingerprint(replace(spec, name="x", description="y")) == base
    seen = {base}
    for f in fields(SyntheticSpec):
        if f.name in ("name", "description"):
            continue
        v = getattr(spec, f.name)
        other = 0.2 if v is None else (v + 1 if isinstance(v, int) else v * 0.9)
        fp = spec_fingerprint(replace(spec, **{f.name: other}))
        assert fp not in seen, f.name
        seen.add(fp)
    monkeypatch.setattr(synthetic, "GENERATOR_VERSION", synthetic.GENERATOR_VERSION + 1)
    assert spec_fingerprint(spec) not in seen
