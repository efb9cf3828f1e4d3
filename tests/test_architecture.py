"""The architecture the docs promise: no import cycle in ``twopgraph/``, the layers import one
way, every pipeline component implements its protocol, registries discover new modules."""

from __future__ import annotations

import ast
import importlib
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import twopgraph
from twopgraph.core.registry import Registry
from twopgraph.errors import ConfigError

PKG = Path(twopgraph.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(path: Path, modules: set[str]) -> set[str]:
    """twopgraph modules imported anywhere in ``path`` (functions included; ``if
    TYPE_CHECKING`` blocks excluded: they never run)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out: set[str] = set()

    def resolve(base: str) -> str | None:
        while base and base not in modules:  # an attribute import: the module holding it
            base = base.rsplit(".", 1)[0] if "." in base else ""
        return base or None

    def visit(node):
        if isinstance(node, ast.If) and _is_type_checking(node):
            for n in node.orelse:
                visit(n)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("twopgraph"):
                    m = resolve(a.name)
                    if m:
                        out.add(m)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.startswith("twopgraph"):
                for a in node.names:  # "from . import x" may name a submodule
                    sub = f"{mod}.{a.name}"
                    m = sub if sub in modules else resolve(mod)
                    if m:
                        out.add(m)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    graph = {_module_name(f): _imports(f, modules) for f in files}
    # importing a submodule runs its package's __init__ first: those edges are implied, and
    # an __init__ that imports its own submodules is not a cycle through them
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state:
                found = dfs(w)
                if found:
                    return found
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state:
            found = dfs(v)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = _find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_planted_cycle():
    g = import_graph()
    g["twopgraph.graph.data"] = set(g["twopgraph.graph.data"]) | {"twopgraph.run.train"}
    assert _find_cycle(g) is not None


# Layers, bottom first; a module may import its own layer and the ones below, never above.
# A package stands for all its modules (docs/architecture.md draws these layers).
LAYERS = [
    {"twopgraph", "twopgraph.imports", "twopgraph.errors"},
    {"twopgraph.runtime"},
    {"twopgraph.core"},
    {"twopgraph.graph"},
    {"twopgraph.store"},
    {"twopgraph.ingest"},
    {"twopgraph.datasets"},
    {"twopgraph.models", "twopgraph.sampler", "twopgraph.cache"},
    {"twopgraph.locality"},
    {"twopgraph.config"},
    {"twopgraph.pipeline"},
    {"twopgraph.inference"},
    {"twopgraph.pyg"},
    {"twopgraph.run"},
    {"twopgraph.distributed"},
    {"twopgraph.bench"},
    {"twopgraph.cli", "twopgraph.__main__"},
]


def _layer(mod: str) -> int:
    for i, names in enumerate(LAYERS):
        for n in names:
            if mod == n or (n != "twopgraph" and mod.startswith(n + ".")):
                return i
    raise AssertionError(f"{mod} is in no layer: add it to LAYERS")


def test_imports_go_one_way():
    bad = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
           for a, deps in import_graph().items() for b in deps
           if a not in ("twopgraph", "twopgraph.__main__") and _layer(b) > _layer(a)]
    assert not bad, "\n".join(bad)


def test_protocols_are_implemented():
    from twopgraph.cache import FeatureCache, HostFeatures, PolicyContext, make_policy
    from twopgraph.core.protocols import FeatureSource, Sampler, Scheduler
    from twopgraph.distributed.trainer import FixedSteps
    from twopgraph.graph.data import CSRGraph
    from twopgraph.locality import LocalityScheduler, RandomScheduler
    from twopgraph.sampler import NeighborSampler

    g = CSRGraph.from_edges([0, 1, 2, 3], [1, 2, 3, 0], num_nodes=4)
    train = np.arange(4)
    assert isinstance(NeighborSampler(g, [2]), Sampler)
    rs = RandomScheduler(train, 2)
    for s in (rs, LocalityScheduler(train, 2, parts=np.array([0, 0, 1, 1])), FixedSteps(rs, 3)):
        assert isinstance(s, Scheduler)
    feat = torch.ones(4, 2)
    ctx = PolicyContext(g, train, [2], 2)
    for src in (HostFeatures(feat), FeatureCache(feat, make_policy("degree", ctx), 2)):
        assert isinstance(src, FeatureSource)


def test_registry_discovers_a_new_module(tmp_path, monkeypatch):
    """Adding an entry = adding one module to the registry's package, nothing else."""
    pkg = tmp_path / "plugpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "reg.py").write_text("from twopgraph.core.registry import Registry\n"
                                "THINGS = Registry('thing', 'plugpkg')\n")
    (pkg / "mine.py").write_text(textwrap.dedent("""
        from plugpkg.reg import THINGS

        @THINGS.register("mine")
        def make():
            return "made"
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reg = importlib.import_module("plugpkg.reg").THINGS
        assert reg.names() == ["mine"]
        assert reg.get("mine")() == "made"
        with pytest.raises(ConfigError, match="unknown thing 'mien' \\(did you mean 'mine'"):
            reg.get("mien")
    finally:
        for m in [m for m in sys.modules if m.startswith("plugpkg")]:
            del sys.modules[m]


def test_registry_declares_its_names_without_importing(tmp_path, monkeypatch):
    """``Registry.declared`` (what ``--help`` lists) reads the names from the sources: the
    modules stay unimported, a new module's name is in it, and it equals ``names()``."""
    pkg = tmp_path / "declpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "reg.py").write_text("from twopgraph.core.registry import Registry\n"
                                "THINGS = Registry('thing', 'declpkg', 'THINGS')\n")
    for name in ("b", "a"):
        (pkg / f"mod_{name}.py").write_text(textwrap.dedent(f"""
            import declpkg.imported_{name}  # noqa: F401 (importing it is visible)
            from declpkg.reg import THINGS

            @THINGS.register("{name}")
            def make():
                return "{name}"
        """))
        (pkg / f"imported_{name}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        reg = importlib.import_module("declpkg.reg").THINGS
        assert reg.declared() == ["a", "b"]
        assert not [m for m in sys.modules if m.startswith("declpkg.mod_")
                    or m.startswith("declpkg.imported_")]
        assert sorted(reg.names()) == ["a", "b"]
    finally:
        for m in [m for m in sys.modules if m.startswith("declpkg")]:
            del sys.modules[m]


def test_builtin_registries_declare_what_they_register():
    from twopgraph.core.protocols import CACHE_POLICIES, MODELS, SAMPLERS, SCHEDULERS
    for reg in (SCHEDULERS, SAMPLERS, CACHE_POLICIES, MODELS):
        fresh = Registry(reg.kind, reg.package, reg.symbol)  # nothing discovered yet
        assert sorted(fresh.declared()) == sorted(reg.names()), reg.kind
    assert MODELS.names()[:2] == ["sage", "gcn"]  # the default first


def test_registry_refuses_two_factories_for_one_name():
    reg = Registry("thing")
    reg.register("a")(int)
    with pytest.raises(RuntimeError, match="registered twice"):
        reg.register("a")(float)


def test_builtin_registries_list_their_modules():
    from twopgraph.core.protocols import CACHE_POLICIES, SAMPLERS, SCHEDULERS
    assert set(SCHEDULERS.names()) >= {"random", "locality"}
    assert set(SAMPLERS.names()) >= {"neighbor"}
    assert set(CACHE_POLICIES.names()) >= {"none", "degree", "presample", "layer"}


def _docs_example(k: int = 0) -> str:
    """The ``k``-th python block of docs/architecture.md."""
    text = (PKG.parent / "docs" / "architecture.md").read_text()
    start = -1
    for _ in range(k + 1):
        start = text.index("```python\n", start + 1)
    start += len("```python\n")
    return text[start:text.index("```", start)]


def test_docs_worked_example_policy_plugs_in(tmp_path):
    """The LRU policy of docs/architecture.md, added as one module, trains and is measured."""
    import importlib.util

    from twopgraph.cache import CacheDirectory, replay
    from twopgraph.config import TrainConfig
    from twopgraph.core.protocols import CACHE_POLICIES
    from twopgraph.run.train import train

    path = tmp_path / "lru.py"
    path.write_text(_docs_example())
    spec = importlib.util.spec_from_file_location("twopgraph.cache.lru", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        assert CACHE_POLICIES.get("lru") is mod.make
        # accounting: an LRU cache of 2 rows over a known stream
        d = CacheDirectory(6, 2, mod.LRUCache(6))
        c = replay([np.array([0, 1]), np.array([1, 2]), np.array([0, 1]), np.array([3])], d)
        assert (c.feature_rows, c.cache_hits, c.h2d_rows) == (7, 2, 5)
        res = train(TrainConfig.of(dataset="synthetic-tiny", data_root=str(tmp_path / "data"),
                                   out=str(tmp_path / "run"), epochs=1, fanouts=[5, 5], batch_size=100,
                                   hidden=16, cache_policy="lru", cache_ratio=0.2,
                                   progress=False, device="cpu"))
        ep = res.epochs[0]
        assert ep["cache_budget_rows"] == 400 and 0 < ep["cache_hits"] < ep["feature_rows"]
    finally:
        CACHE_POLICIES._entries.pop("lru", None)


def test_docs_worked_example_sampler_trains_by_name(tmp_path, monkeypatch):
    """The capped sampler of docs/architecture.md, added as one module, is reached by
    ``--sampler capped`` (the CLI's parser and the training loop): every sampled vertex of
    every layer keeps at most 5 neighbours, where neighbor keeps 8."""
    import importlib.util

    from twopgraph.cli import build_parser
    from twopgraph.config import TrainConfig
    from twopgraph.core.protocols import SAMPLERS
    from twopgraph.run.train import train
    from twopgraph.sampler.neighbor import NeighborSampler

    path = tmp_path / "capped.py"
    path.write_text(_docs_example(1))
    spec = importlib.util.spec_from_file_location("twopgraph.sampler.capped", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    widest = []
    real = NeighborSampler.sample

    def recording(self, seeds, key=None, **kw):
        mb = real(self, seeds, key, **kw)
        widest.append(max(int(b.edge_counts().max()) for b in mb.blocks))
        return mb

    monkeypatch.setattr(NeighborSampler, "sample", recording)
    try:
        assert SAMPLERS.get("capped") is mod.CappedSampler
        args = build_parser().parse_args(
            ["train", "--dataset", "synthetic-tiny", "--data-root", str(tmp_path / "data"),
             "--out", str(tmp_path / "run"), "--epochs", "1", "--fanouts", "8,8",
             "--batch-size", "100", "--hidden", "16", "--no-progress", "--device", "cpu",
             "--sampler", "capped", "--schedule", "random"])
        cfg = TrainConfig.from_args(args)
        assert cfg.sampling.sampler == "capped"
        res = train(cfg)
        assert res.epochs[0]["num_batches"] > 0 and max(widest) == 5
        assert "sampler" in cfg.result_params()
        widest.clear()
        cfg = TrainConfig.of(dataset="synthetic-tiny", data_root=str(tmp_path / "data"),
                             out=str(tmp_path / "run2"), epochs=1, fanouts=[8, 8],
                             batch_size=100, hidden=16, progress=False, device="cpu",
                             schedule="random")
        train(cfg)
        assert max(widest) == 8
        assert "sampler" not in cfg.result_params()  # the default: old fingerprints hold
    finally:
        SAMPLERS._entries.pop("capped", None)


def test_no_reference_to_a_design_document_outside_the_repository():
    """docs/formats.md and docs/architecture.md are the reference; DESIGN.md is not in the
    repository, so no docstring, script or doc may send a reader there."""
    repo = PKG.parent
    files = [*PKG.rglob("*.py"), *(repo / "scripts").glob("*.py"), *(repo / "docs").glob("*.md")]
    bad = [str(f.relative_to(repo)) for f in files if "DESIGN.md" in f.read_text()]
    assert not bad, bad


# -- the layout: packages by layer, each with its public names ------------------------------
PACKAGES = sorted({m.split(".")[1] for m in import_graph() if m.count(".") >= 1
                   and (PKG / m.split(".")[1]).is_dir()})


def test_at_most_six_plain_modules_at_the_top_and_none_over_600_lines():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 6, top
    long = {str(p.relative_to(PKG)): n for p in PKG.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert not long, long


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_declares_its_public_names(package):
    """Each layer package says what it offers (``__all__``), every name of it imports, and
    its docstring says what the package holds."""
    mod = importlib.import_module(f"twopgraph.{package}")
    assert (mod.__doc__ or "").strip(), package
    names = getattr(mod, "__all__", None)
    assert names, f"twopgraph.{package} has no __all__"
    for name in names:
        assert getattr(mod, name) is not None, f"twopgraph.{package}.{name}"


def _private_imports_across_packages() -> list[str]:
    def package(mod: str) -> str:
        return ".".join(mod.split(".")[:2])

    bad = []
    for f in sorted(PKG.rglob("*.py")):
        me = _module_name(f)
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level \
                    and node.module.startswith("twopgraph"):
                bad += [f"{me} imports {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                        and package(node.module) != package(me)]
    return bad


def test_no_private_name_is_imported_from_another_package():
    bad = _private_imports_across_packages()
    assert not bad, "\n".join(bad)


def test_old_module_paths_still_import():
    """User code that imports a module by its path before the layer packages keeps working:
    the old path is the new module itself. (As before the move, importing the old module
    ``twopgraph.train`` binds that name of the package to the module.)"""
    from twopgraph import GraphData, train
    assert callable(train) and GraphData.__module__ == "twopgraph.graph.data"
    from twopgraph.imports import MOVED
    try:
        for old, new in MOVED.items():
            assert importlib.import_module(old) is importlib.import_module(new), old
        from twopgraph.core.protocols import SAMPLERS
        from twopgraph.protocols import SAMPLERS as old_samplers  # as old docs show
        assert old_samplers is SAMPLERS
    finally:
        for name in ("train", "predict"):
            if not callable(vars(twopgraph).get(name)):
                vars(twopgraph).pop(name, None)  # the lazy API name again
    assert callable(twopgraph.train)


def _docs_block_after(heading: str) -> str:
    """The first python block of docs/architecture.md after the line ``heading``."""
    text = (PKG.parent / "docs" / "architecture.md").read_text()
    start = text.index("```python\n", text.index(heading)) + len("```python\n")
    return text[start:text.index("```", start)]


def test_docs_own_sampler_and_cache_policy_objects_train(tmp_path, monkeypatch, capsys):
    """The example of docs/architecture.md: a sampler and a cache policy of the user's own,
    passed to NodeLoader as objects (nothing registered, nothing of the package touched),
    train a model on a real graph to a sound held-out accuracy, and both are really used: the
    sampler saw every batch, the policy's rows were the cache's (hits counted)."""
    from conftest import shared_datasets_dir
    if not (shared_datasets_dir() / "cora.npz").is_file():
        pytest.skip("shared dataset cora not available")
    monkeypatch.setenv("TWOPGRAPH_DATASET_PATH", str(shared_datasets_dir()))
    monkeypatch.setenv("TWOPGRAPH_DATA", str(tmp_path / "data"))
    scope: dict = {}
    exec(compile(_docs_block_after("## Your own components"), "architecture.md", "exec"), scope)
    out = capsys.readouterr().out
    assert "test accuracy" in out
    assert scope["test_acc"] > 0.75, out  # a 2-layer SAGE on cora: ~0.8
    loader, sampler = scope["loader"], scope["sampler"]
    assert loader.sampler is sampler and len(sampler.inputs) == 20 * len(loader)
    stats = loader.stats
    assert stats.cache_budget_rows == int(0.2 * scope["data"].num_nodes)
    assert 0 < stats.cache_hits < stats.feature_rows
