"""The GPU path (issue 12), tested on CPU; CUDA cases are parametrised and skipped without a GPU.

- ``--sampler-device auto|cpu|cuda`` and ``--sampler-memory-share``: resolution, refusals,
  the device sampler driven through the config path trains exactly like the numba one;
- no host synchronisation inside a training step (loss/accuracy read every ``READ_EVERY``
  steps), the divergence check at those reads with the exact step;
- ``--amp bf16`` trains (CPU autocast too), exact evaluation stays float32;
- the default CUDA cache budget leaves the estimated activations free
  (``activation_reserve_bytes``), checked with a fake ``torch.cuda.mem_get_info``;
- ``metrics.json`` epoch records carry ``sampler_device``, ``amp``, ``activation_reserve_bytes``.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import community_data, run_cli

import twopgraph
import twopgraph.pipeline.assemble as pl
import twopgraph.pipeline.epoch as ep
from twopgraph.cache.feature_cache import (
    ACTIVATION_FACTOR,
    EVAL_BYTES_PER_EDGE,
    activation_reserve_bytes,
    eval_bytes,
    input_rows_estimate,
    resolve_budget,
    train_step_bytes,
)
from twopgraph.cache.host import HostFeatures
from twopgraph.config import TrainConfig
from twopgraph.errors import ConfigError, TrainingDiverged
from twopgraph.models import SAGEConv
from twopgraph.pipeline.assemble import device_sampler_bytes, make_loader, resolve_sampler_device
from twopgraph.pipeline.epoch import READ_EVERY, train_epoch
from twopgraph.run.checkpoint import build_training
from twopgraph.run.train import train
from twopgraph.sampler import make_sampler
from twopgraph.sampler.device import TorchNeighborSampler
from twopgraph.sampler.labor_device import TorchLaborSampler

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.cuda  # skipped without a GPU (conftest), selected by -m cuda
no_cuda = pytest.mark.skipif(CUDA, reason="checks the behaviour without a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_cuda)]


@pytest.fixture(scope="module")
def cdata():
    return community_data()


_ROOT: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _data_root(tmp_path_factory):
    """One data root (the METIS clusters of the community graph) for the module's runs."""
    _ROOT["path"] = str(tmp_path_factory.mktemp("data"))


def cfg(out, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=2, hidden=16, fanouts=[5, 5], batch_size=64,
                lr=0.01, dropout=0.1, seed=0, device="cpu", out=str(out), progress=False,
                prefetch=2, threads=2, data_root=_ROOT["path"], sampler="neighbor")
    base.update(kw)  # neighbor: these tests hold it against its device twin
    return TrainConfig.of(**base)




def error_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.startswith("twopgraph:")]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------------------------
# --sampler-device
# ----------------------------------------------------------------------------------------------


def test_sampler_flags_in_train_help_only(capsys):
    rc, out, _ = run_cli(["train", "--help"], capsys)
    assert rc == 0
    text = " ".join(out[out.index("options:"):].split())  # the options' help, not the usage
    for flag, default in (("--sampler-device", "auto"), ("--sampler-memory-share", "0.25"),
                          ("--amp", "off")):
        i = text.index(flag + " ")
        assert f"(default: {default})" in text[i:i + 600], flag
    for verb in (["bench", "sampler"], ["bench", "cache"]):  # sampling only: not theirs
        rc, out, _ = run_cli([*verb, "--help"], capsys)
        assert rc == 0 and "--sampler-device" not in out and "--sampler-memory-share" not in out


@no_cuda
def test_sampler_device_cuda_refused_without_cuda(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--sampler-device cuda requested but torch sees no "
                                          "CUDA GPU"):
        cfg(tmp_path / "o", sampler_device="cuda").validate()
    rc, o, err = run_cli(["train", "--dataset", "synthetic-tiny", "--sampler-device", "cuda",
                          "--out", tmp_path / "o", "--data-root", tmp_path / "data"], capsys)
    assert rc == 2 and o == ""
    assert error_line(err) == ("twopgraph: error: --sampler-device cuda requested but torch "
                               "sees no CUDA GPU")
    assert not (tmp_path / "o").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize("kw, msg", [
    (dict(sampler_device="gpu"), "unknown sampler device 'gpu'; known: auto, cpu, cuda"),
    (dict(sampler_memory_share=0.0), "sampler-memory-share must be in \\(0, 1\\]"),
    (dict(sampler_memory_share=1.5), "sampler-memory-share must be in \\(0, 1\\]"),
    (dict(amp="fp16"), "unknown amp 'fp16'; known: off, bf16"),
])
def test_bad_values_refused(tmp_path, kw, msg):
    with pytest.raises(ConfigError, match=msg):
        cfg(tmp_path / "o", **kw).validate()


@needs_cuda
def test_sampler_device_cuda_needs_cuda_training(tmp_path):
    with pytest.raises(ConfigError, match="needs --device cuda"):
        cfg(tmp_path / "o", sampler_device="cuda", device="cpu").validate()
    with pytest.raises(ConfigError, match="not available with --partitions"):
        cfg(tmp_path / "o", sampler_device="cuda", device="cuda",
            partitions=str(tmp_path)).validate()


def test_resolve_sampler_device(cdata):
    g = cdata.graph
    need = device_sampler_bytes(g)
    n = g.num_nodes
    # what TorchNeighborSampler.nbytes() reports, plus the relabelling map (8 N)
    assert need == TorchNeighborSampler(g, [5, 5]).nbytes() + 8 * n
    assert need == 8 * (n + 1) + g.indices.dtype.itemsize * g.num_edges + 12 * n
    cpu, cuda = torch.device("cpu"), torch.device("cuda:0")
    assert resolve_sampler_device("cpu", cuda, g)[0] == cpu
    assert resolve_sampler_device("cuda", cuda, g)[0] == cuda
    with pytest.raises(ConfigError, match="needs --device cuda"):
        resolve_sampler_device("cuda", cpu, g)
    dev, why = resolve_sampler_device("auto", cpu, g)
    assert dev == cpu and "training on cpu" in why
    # auto on CUDA: the graph fits in `share` of the device's total memory, or not
    assert resolve_sampler_device("auto", cuda, g, 0.25, total_bytes=4 * need)[0] == cuda
    dev, why = resolve_sampler_device("auto", cuda, g, 0.25, total_bytes=4 * need - 4)
    assert dev == cpu and "exceed --sampler-memory-share 0.25" in why
    assert resolve_sampler_device("auto", cuda, g, 0.5, total_bytes=2 * need)[0] == cuda


def test_resolve_sampler_device_reads_total_memory(cdata, monkeypatch):
    need = device_sampler_bytes(cdata.graph)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 4 * need))
    assert resolve_sampler_device("auto", "cuda", cdata.graph)[0].type == "cuda"
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (0, 4 * need - 1))
    assert resolve_sampler_device("auto", "cuda", cdata.graph)[0].type == "cpu"


def records(out) -> list[dict]:
    return json.loads((out / "metrics.json").read_text())["epochs"]


def test_auto_samples_where_training_runs(cdata, tmp_path):
    res = train(cfg(tmp_path / "o", epochs=1, device="cpu"), data=cdata)
    assert res.epochs[0]["sampler_device"] == "cpu"
    rec = records(tmp_path / "o")[0]
    assert rec["sampler_device"] == "cpu" and rec["amp"] == "off"
    assert rec["activation_reserve_bytes"] > 0 and rec["cache_budget_rows"] == 0


def _device_sampler_on_cpu(monkeypatch, twin="device"):
    """make_loader's samplers replaced by the device twin ``twin`` on CPU torch (the config
    path picks the host sampler; its twin on CPU is what CI can run)."""
    made = []
    real = pl.make_sampler

    def device_instead(name, graph, fanouts, **kw):
        s = real(twin, graph, fanouts, device="cpu", **kw)
        made.append(s)
        return s
    monkeypatch.setattr(pl, "make_sampler", device_instead)
    return made


def test_device_sampler_trains_exactly_like_neighbor(cdata, tmp_path, monkeypatch):
    a = train(cfg(tmp_path / "a", epochs=3), data=cdata)
    made = _device_sampler_on_cpu(monkeypatch)
    b = train(cfg(tmp_path / "b", epochs=3), data=cdata)
    assert len(made) == 1 and isinstance(made[0], TorchNeighborSampler)
    for ea, eb in zip(a.epochs, b.epochs):
        for k in ("loss", "train_acc", "feature_rows", "num_batches", "val_acc"):
            assert ea[k] == eb[k], k
    assert a.test_acc == b.test_acc
    ma = torch.load(tmp_path / "a" / "checkpoint.pt", weights_only=False)["model"]
    mb = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=False)["model"]
    assert all(torch.equal(ma[k], mb[k]) for k in ma)
    m = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert m["threads"]["sample_workers"] == 1  # a torch sampler samples in one worker
    assert all(e["sampler_device"] == "cpu" for e in m["epochs"])


def test_labor_device_trains_exactly_like_labor(cdata, tmp_path, monkeypatch):
    opts = dict(epochs=2, sampler="labor", labor_iterations=1, labor_batch_dependency=3)
    a = train(cfg(tmp_path / "a", **opts), data=cdata)
    made = _device_sampler_on_cpu(monkeypatch, "labor-device")
    b = train(cfg(tmp_path / "b", **opts), data=cdata)
    assert len(made) == 1 and isinstance(made[0], TorchLaborSampler)
    assert made[0].iterations == 1 and made[0].batch_dependency == 3
    for ea, eb in zip(a.epochs, b.epochs):
        for k in ("loss", "train_acc", "feature_rows", "num_batches", "val_acc"):
            assert ea[k] == eb[k], k
    assert a.test_acc == b.test_acc


@pytest.mark.parametrize("policy", ["none", "presample"])
@pytest.mark.parametrize("device", DEVICES)
def test_loader_batches_of_both_samplers_agree(cdata, tmp_path, device, policy):
    # presample pre-samples with the run's sampler (host ids: HostIdSampler)
    c = cfg(tmp_path / "o", device=device, schedule="random", cache_policy=policy,
            cache_ratio=0.3 if policy != "none" else None)
    host = make_loader(c, cdata, device)
    dev = make_loader(c, cdata, device, sampler=make_sampler(
        "device", cdata.graph, c.sampling.fanouts, seed=c.run.seed, device=device))
    assert host.sampler_device.type == "cpu" and dev.sampler_device.type == device
    assert dev.plan.workers == 1
    n = 0
    for x, y in zip(host.epoch(1), dev.epoch(1)):
        for mb in (x, y):  # ids on the host (the feature source and labels take host ids)
            assert mb.seeds.device.type == "cpu" and mb.input_nodes.device.type == "cpu"
            assert mb.features.device.type == device and mb.labels.device.type == device
            assert all(b.indices.device.type == device for b in mb.blocks)
        assert torch.equal(x.seeds, y.seeds) and torch.equal(x.input_nodes, y.input_nodes)
        assert torch.equal(x.labels, y.labels) and torch.equal(x.features, y.features)
        for bx, by in zip(x.blocks, y.blocks):
            assert (bx.num_src, bx.num_dst) == (by.num_src, by.num_dst)
            for f in ("indptr", "indices", "src_deg", "dst_deg"):
                assert torch.equal(getattr(bx, f), getattr(by, f).to(getattr(bx, f).dtype)), f
        n += 1
    assert n == len(host) and host.stats.feature_rows == dev.stats.feature_rows
    assert host.stats.cache_hits == dev.stats.cache_hits
    assert (host.stats.cache_hits > 0) == (policy != "none")


# ----------------------------------------------------------------------------------------------
# no host synchronisation inside a step
# ----------------------------------------------------------------------------------------------

SYNCING = ("item", "tolist", "cpu", "__float__", "__int__", "__bool__", "__index__")


def _count_syncs(monkeypatch) -> list:
    """Calls of the tensor methods that wait for the device, made from twopgraph's code in
    this (the training) thread; the prefetch thread may synchronise, the step may not."""
    pkg = str(Path(twopgraph.__file__).parent)
    me = threading.get_ident()
    calls = []
    for name in SYNCING:
        real = getattr(torch.Tensor, name)

        def spy(self, *a, _real=real, _name=name, **k):
            if threading.get_ident() == me:
                f = sys._getframe(1)
                if f.f_code.co_filename.startswith(pkg):
                    calls.append((_name, Path(f.f_code.co_filename).name, f.f_lineno))
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, spy)
    return calls


@pytest.mark.parametrize("device", DEVICES)
def test_no_host_sync_inside_the_step(cdata, tmp_path, monkeypatch, device):
    # batch 8: 38 steps. dropout 0: the fused CPU dropout draws its key with one .item() of
    # a host tensor per layer (no device involved; on CUDA torch's dropout runs).
    c = cfg(tmp_path / "o", batch_size=8, dropout=0.0, device=device, schedule="random")
    model, opt, _, _ = build_training(c, cdata, torch.device(device))
    loader = make_loader(c, cdata, device)
    steps = len(loader)
    assert steps >= 2 * READ_EVERY - 2
    calls = _count_syncs(monkeypatch)
    rec = train_epoch(model, opt, loader, 0, progress=False)
    monkeypatch.undo()
    reads = -(-steps // READ_EVERY)
    assert rec["num_batches"] == steps
    # one device->host copy per read, none per step (the old loop had 2 per step)
    assert [c[0] for c in calls] == ["cpu"] * reads, calls
    assert np.isfinite(rec["loss"]) and 0 <= rec["train_acc"] <= 1
    assert rec["num_seeds"] == cdata.train_idx.shape[0]


class _Poison:
    """``train.F`` whose cross_entropy is NaN from step ``at`` on, counting its calls."""

    def __init__(self, at: int):
        self.at, self.calls = at, 0

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)

    def cross_entropy(self, logits, labels):
        loss = torch.nn.functional.cross_entropy(logits, labels)
        self.calls += 1
        return loss * float("nan") if self.calls - 1 >= self.at else loss


def test_divergence_found_at_the_read_with_its_exact_step(cdata, tmp_path, monkeypatch):
    poison = _Poison(at=7)
    monkeypatch.setattr(ep, "F", poison)
    out = tmp_path / "o"
    with pytest.raises(TrainingDiverged, match=r"training diverged at epoch 0 step 7 "
                                               r"\(loss nan\)") as e:
        train(cfg(out, batch_size=8), data=cdata)
    assert e.value.step == 7 and e.value.epoch == 0
    assert poison.calls == READ_EVERY  # found at the first read, after step READ_EVERY - 1
    m = json.loads((out / "metrics.json").read_text())
    assert m["status"] == "diverged" and m["diverged"]["step"] == 7


def test_nonfinite_recorded_with_its_step_without_stopping(cdata, tmp_path, monkeypatch):
    c = cfg(tmp_path / "o", batch_size=8, schedule="random")
    model, opt, _, _ = build_training(c, cdata, torch.device("cpu"))
    loader = make_loader(c, cdata, "cpu")
    poison = _Poison(at=23)
    monkeypatch.setattr(ep, "F", poison)
    rec = train_epoch(model, opt, loader, 0, progress=False, stop_on_nonfinite=False)
    assert poison.calls == len(loader) == rec["num_batches"]
    assert rec["nonfinite"]["step"] == 23 and np.isnan(rec["nonfinite"]["loss"])


def test_step_tally_sums_like_the_host():
    t = ep.StepTally("cpu", rows=3)
    losses, correct, n = [0.5, 0.25, 1.0, 2.0], [3, 4, 5, 6], [4, 8, 8, 2]
    for i in range(4):
        if t.full:
            assert t.read() == 3
        t.add(torch.tensor(losses[i]), torch.tensor(correct[i]), n[i])
    assert t.read() == 1 and t.read() == 0
    assert t.loss_sum == pytest.approx(sum(a * b for a, b in zip(losses, n)))
    assert (t.correct, t.seen, t.steps, t.reads, t.nonfinite) == (18, 22, 4, 2, None)


# ----------------------------------------------------------------------------------------------
# --amp bf16
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_amp_bf16_trains_and_evaluates_in_float32(cdata, tmp_path, monkeypatch, device):
    seen = []
    real = ep.F.cross_entropy

    class Spy:
        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)

        def cross_entropy(self, logits, labels):
            seen.append(torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                        else torch.float32)
            return real(logits, labels)
    monkeypatch.setattr(ep, "F", Spy())
    base = train(cfg(tmp_path / "f32", epochs=4, device=device), data=cdata)
    n32 = len(seen)
    res = train(cfg(tmp_path / "bf16", epochs=4, device=device, amp="bf16"), data=cdata)
    assert set(seen[:n32]) == {torch.float32} and set(seen[n32:]) == {torch.bfloat16}
    assert res.logits.dtype == torch.float32  # exact evaluation: float32
    assert all(e["amp"] == "bf16" for e in records(tmp_path / "bf16"))
    assert res.test_acc >= 0.8 and abs(res.test_acc - base.test_acc) <= 0.05
    assert res.epochs[-1]["loss"] < res.epochs[0]["loss"]


# ----------------------------------------------------------------------------------------------
# cache budget: the model's activations stay free
# ----------------------------------------------------------------------------------------------


def test_input_rows_estimate():
    assert input_rows_estimate(1024, [15, 10, 5], 10 ** 9, 50.0) == 1024 * 16 * 11 * 6
    assert input_rows_estimate(1024, [15, 10, 5], 100_000, 50.0) == 100_000  # capped at N
    assert input_rows_estimate(10, [-1], 1000, 3.0) == 40  # all neighbours: mean degree
    assert input_rows_estimate(10, [15], 1000, 2.5) == 35  # min(f, mean degree)
    assert input_rows_estimate(5000, [5], 1000, 2.0) == 1000  # batch larger than the graph


def test_activation_reserve_arithmetic():
    # 4 bytes x rows_in x (factor x (F + hidden x L) + prefetch x F)
    assert ACTIVATION_FACTOR == 3 and EVAL_BYTES_PER_EDGE == 24
    assert train_step_bytes(1000, 100, 256, 3, prefetch=2) == 4 * 1000 * (3 * 868 + 200)
    # 4 bytes x N x (F + 3 max(hidden, C)) + 24 x min(E, batch_edges)
    assert eval_bytes(1000, 5000, 100, 256, 47, 4_000_000) == 4 * 1000 * 868 + 24 * 5000
    assert eval_bytes(1000, 10 ** 8, 100, 16, 47, 1000) == 4 * 1000 * 241 + 24 * 1000
    kw = dict(num_nodes=10 ** 6, num_edges=5 * 10 ** 7, num_features=100, hidden=256,
              num_classes=47, fanouts=[15, 10, 5], batch_size=1024)
    rows_in = input_rows_estimate(1024, [15, 10, 5], 10 ** 6, 50.0)
    train_b = train_step_bytes(rows_in, 100, 256, 3, 2)
    eval_b = eval_bytes(10 ** 6, 5 * 10 ** 7, 100, 256, 47)
    assert activation_reserve_bytes(**kw) == max(train_b, eval_b) == train_b
    assert activation_reserve_bytes(**kw, extra=8 * 10 ** 6) == train_b + 8 * 10 ** 6
    # a tiny batch: evaluation's working set is the larger
    small = activation_reserve_bytes(**{**kw, "batch_size": 1})
    assert small == eval_b


def test_resolve_budget_subtracts_the_reserve(monkeypatch):
    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (10 * gib, 16 * gib))
    # free 10 GiB - 25% of 16 GiB = 6 GiB; less a 1 GiB reserve = 5 GiB
    assert resolve_budget(10 ** 9, 400, "cuda") == 6 * gib // 400
    assert resolve_budget(10 ** 9, 400, "cuda", reserve=gib) == 5 * gib // 400
    assert resolve_budget(1000, 400, "cuda", reserve=gib) == 1000  # capped at the rows
    assert resolve_budget(10 ** 9, 400, "cuda", reserve=7 * gib) == 0  # nothing left
    assert resolve_budget(10 ** 9, 400, "cuda", ratio=0.5, reserve=7 * gib) == 5 * 10 ** 8
    assert resolve_budget(10 ** 9, 400, "cpu", reserve=gib) == 0


def test_rows_handed_on_as_gib_come_back_exactly():
    rng = np.random.default_rng(0)
    for rows, row_bytes in zip(rng.integers(0, 10 ** 9, 200), rng.integers(1, 1 << 16, 200)):
        rows, row_bytes = int(rows), int(row_bytes)
        gb = rows * row_bytes / 2 ** 30
        assert resolve_budget(10 ** 10, row_bytes, "cpu", gb=gb) == rows


def test_default_cuda_budget_leaves_the_reserve(cdata, tmp_path, monkeypatch):
    """make_loader on a (fake) CUDA device: the budget handed to the feature source is
    (free - 25% total - reserve) / row bytes, the reserve being the activations' plus the
    pipeline's parts (pipeline.assemble.device_reserve), and the loader reports them."""
    got = {}
    c = cfg(tmp_path / "o", sampler_device="cpu", cache_policy="layer", hidden=64,
            schedule="random")
    parts = pl.device_reserve(c, cdata, 64, sampler_on_device=False, device="cuda")
    row_bytes = 4 * cdata.num_features
    total = 12 << 20
    free = total // 4 + sum(parts.values()) + 300 * row_bytes  # room for 300 rows
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, total))

    def source(policy, feat, ctx, device, *, budget=None, dtype="float32", **kw):
        got.update(budget=budget, device=device, **kw)
        return HostFeatures(feat)

    class FakeLoader:
        def __init__(self, *a, **k):
            self.args = a

    monkeypatch.setattr(pl, "build_feature_source", source)
    monkeypatch.setattr(pl, "Loader", FakeLoader)
    loader = make_loader(c, cdata, torch.device("cuda"))
    reserve = activation_reserve_bytes(
        num_nodes=cdata.num_nodes, num_edges=cdata.graph.num_edges,
        num_features=cdata.num_features, hidden=64, num_classes=cdata.num_classes,
        fanouts=[5, 5], batch_size=64, prefetch=2, eval_batch_edges=4_000_000,
        conv=SAGEConv)
    assert loader.activation_reserve_bytes == parts["activations"] == reserve > 0
    assert loader.device_reserve_parts == parts and len(parts) > 1
    assert got["budget"] == 300 and "ratio" not in got and "gb" not in got  # rows, once
    # an explicit budget is the user's: no reserve taken from it
    make_loader(cfg(tmp_path / "o", sampler_device="cpu", cache_ratio=0.5, schedule="random"),
                cdata, torch.device("cuda"))
    assert got["budget"] == int(0.5 * cdata.num_nodes)


def test_epoch_records_carry_the_new_keys(cdata, tmp_path):
    train(cfg(tmp_path / "o", epochs=2), data=cdata)

    def refuse(c):
        raise ValueError(c)
    m = json.loads((tmp_path / "o" / "metrics.json").read_text(), parse_constant=refuse)
    for e in m["epochs"]:
        assert e["sampler_device"] == "cpu" and e["amp"] == "off"
        assert isinstance(e["activation_reserve_bytes"], int) and e["activation_reserve_bytes"] > 0
        for k in ("loss", "train_acc", "epoch_s", "compute_s", "sample_s", "load_s",
                  "cache_budget_rows", "h2d_bytes", "hit_rate", "cpu_per_wall"):
            assert k in e, k
    assert m["config"]["sampler_device"] == "auto" and m["config"]["amp"] == "off"
    assert m["config"]["sampler_memory_share"] == 0.25


# ----------------------------------------------------------------------------------------------
# CUDA only: the overlapped pipeline
# ----------------------------------------------------------------------------------------------


@needs_cuda
def test_cuda_minibatch_pinned_and_recorded(cdata):
    s = make_sampler("neighbor", cdata.graph, [5, 5])
    mb = s.sample(np.arange(16), key=1)
    mb.labels = torch.zeros(16, dtype=torch.int64)
    p = mb.pin_memory()
    assert all(b.indptr.is_pinned() and b.indices.is_pinned() for b in p.blocks)
    assert p.labels.is_pinned() and not p.seeds.is_pinned()
    d = p.to("cuda", non_blocking=True)
    d.record_stream(torch.cuda.current_stream())
    assert torch.equal(d.blocks[0].indices.cpu(), mb.blocks[0].indices)


@needs_cuda
@pytest.mark.parametrize("sampler_device", ["cpu", "cuda", "auto"])
def test_cuda_training_with_each_sampler(cdata, tmp_path, sampler_device):
    res = train(cfg(tmp_path / sampler_device, epochs=4, device="cuda",
                    sampler_device=sampler_device), data=cdata)
    want = "cpu" if sampler_device == "cpu" else "cuda"  # auto: the small graph fits
    assert all(e["sampler_device"] == want for e in res.epochs)
    assert res.test_acc >= 0.8
