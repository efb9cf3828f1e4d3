"""Distributed training over self-dependence partitions: 2 gloo processes on CPU."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from conftest import community_data, join_all

from twopgraph.config import TrainConfig
from twopgraph.core.protocols import MODELS
from twopgraph.distributed import (
    DistEnv,
    FixedSteps,
    PartSampler,
    torchrun_command,
    train_distributed,
)
from twopgraph.distributed.env import process_group
from twopgraph.distributed.evaluate import (
    SEPARATE_HOSTS_ENV,
    _projection_widths,
    evaluate_scores,
)
from twopgraph.distributed.launch import strip_nproc
from twopgraph.distributed.partition import halo as halo_mod
from twopgraph.distributed.partition.load import load_part
from twopgraph.distributed.partition.selfdep import partition_selfdep
from twopgraph.errors import ConfigError, TwopgraphError
from twopgraph.inference import accuracy, layerwise_inference, plan_scope, scored_ids
from twopgraph.locality import RandomScheduler
from twopgraph.models import build_model
from twopgraph.sampler import NeighborSampler

FANOUTS = [5, 5]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(out, **kw) -> TrainConfig:
    base = dict(fanouts=FANOUTS, batch_size=64, epochs=2, hidden=16, lr=0.01, out=str(out),
                device="cpu", progress=False, prefetch=1, threads=1, eval_every=1)
    base.update(kw)
    return TrainConfig.of(**base)


def _worker(rank, world, ports, parts, out, result_dir, runs, fail_rank):
    os.environ.update(MASTER_ADDR="127.0.0.1", RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    if rank == fail_rank:  # die abruptly in the second epoch
        import twopgraph.run.loop as tr
        orig = tr.train_epoch

        def dying(*a, **k):
            if a[3] >= 1:  # train_epoch(model, opt, loader, epoch, ...)
                os._exit(3)
            return orig(*a, **k)
        tr.train_epoch = dying
    for i, kw in enumerate(runs):  # several runs: the process group is set up and torn down
        os.environ["MASTER_PORT"] = str(ports[i])  # a fresh rendezvous per run
        t = time.perf_counter()
        try:
            res = train_distributed(_cfg(out, dist_timeout=20, **kw), parts)
        except TwopgraphError as e:
            (Path(result_dir) / f"run{i}-rank{rank}.err").write_text(
                f"{time.perf_counter() - t:.1f}\n{e}")
            return
        params = {k: v.detach().clone() for k, v in res.model.state_dict().items()}
        torch.save({"params": params, "val": res.val_acc, "test": res.test_acc},
                   Path(result_dir) / f"run{i}-rank{rank}.pt")


def _spawn(world, parts, out, result_dir, runs, fail_rank=-1) -> list[int]:
    """Run ``runs`` (config overrides) one after the other in ``world`` processes; returns
    their exit codes."""
    ports = [_free_port() for _ in runs]
    ctx = mp.start_processes(_worker, args=(world, ports, str(parts), str(out),
                                            str(result_dir), runs, fail_rank),
                             nprocs=world, join=False, start_method="spawn")
    join_all(ctx.processes)
    return [p.exitcode for p in ctx.processes]


@pytest.fixture(scope="module")
def parts2(tmp_path_factory):
    """2 parts, 2 hops: their halos cover most of the graph, so ``auto`` makes them global."""
    root = tmp_path_factory.mktemp("dist")
    data = community_data(1200, k=4)
    meta = partition_selfdep(data, 2, len(FANOUTS), root / "p2", num_clusters=12)
    assert [p["representation"] for p in meta["parts"]] == ["global"] * 2
    return data, root / "p2", meta


@pytest.fixture(scope="module")
def parts2_local(parts2, tmp_path_factory):
    data = parts2[0]
    out = tmp_path_factory.mktemp("dist") / "p2local"
    meta = partition_selfdep(data, 2, len(FANOUTS), out, num_clusters=12,
                             representation="local")
    return data, out, meta


@pytest.mark.parametrize("rep", ["global", "local"])
def test_two_ranks_identical_parameters_and_no_remote_traffic(parts2, parts2_local, tmp_path,
                                                              rep):
    _, folder, meta = parts2 if rep == "global" else parts2_local
    assert {p["representation"] for p in meta["parts"]} == {rep}
    out = tmp_path / "run"
    codes = _spawn(2, folder, out, tmp_path, [{}, {"epochs": 3, "resume": True}])
    assert codes == [0, 0]
    r0, r1 = (torch.load(tmp_path / f"run0-rank{r}.pt") for r in (0, 1))
    assert r0["params"].keys() == r1["params"].keys()
    for k in r0["params"]:
        assert torch.equal(r0["params"][k], r1["params"][k]), k
    assert r0["val"] == r1["val"] and r0["test"] == r1["test"]
    assert r0["test"] > 0.5  # 4 well-separated communities
    # only rank 0 writes; the resumed run read its checkpoint on both ranks; the evaluation
    # scratch is gone
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint.pt", "epochs.csv", "metrics.json"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["partition"]["representation"] == [rep] * 2
    # memory of each rank, and the ranks' summed PSS (shared maps counted once)
    pss, rss = metrics["peak_pss_mib"], metrics["peak_rss_mib"]
    assert len(pss) == len(rss) == 2 and all(x > 0 for x in pss + rss)
    assert metrics["peak_pss_mib_total"] == pytest.approx(sum(pss))
    assert metrics["final"] and [e["epoch"] for e in metrics["epochs"]] == [0, 1, 2]
    for ep in metrics["epochs"]:
        assert ep["remote_graph_requests"] == 0 and ep["remote_feature_bytes"] == 0
        assert [r["num_batches"] for r in ep["ranks"]] == [ep["num_batches"] // 2] * 2
        assert all(r["remote_graph_requests"] == 0 for r in ep["ranks"])
        assert ep["halo_input_rows"] > 0
    a, b = (torch.load(tmp_path / f"run1-rank{r}.pt") for r in (0, 1))
    assert all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"])
    assert not all(torch.equal(a["params"][k], r0["params"][k]) for k in a["params"])
    assert metrics["test_acc"] == a["test"]


def test_rank_death_ends_the_others_with_a_clear_error(parts2, tmp_path):
    _, folder, _ = parts2
    t = time.perf_counter()
    codes = _spawn(2, folder, tmp_path / "run", tmp_path, [{"epochs": 3}], fail_rank=1)
    assert time.perf_counter() - t < 90
    assert codes == [0, 3]  # rank 0 caught the failure and returned cleanly
    err = (tmp_path / "run0-rank0.err").read_text().splitlines()
    assert len(err) == 2 and "another rank failed" in err[1]


def test_single_process_world(tmp_path):
    data = community_data(1200, k=4)
    partition_selfdep(data, 1, 2, tmp_path / "p1", num_clusters=12)
    os.environ.pop("MASTER_ADDR", None)
    res = train_distributed(_cfg(tmp_path / "run", epochs=1), tmp_path / "p1",
                            env=DistEnv(0, 1, 0, 1))
    ep = res.epochs[0]
    assert ep["remote_graph_requests"] == 0 and ep["halo_input_rows"] == 0
    assert res.test_acc is not None and (tmp_path / "run" / "checkpoint.pt").is_file()
    # the distributed exact evaluation = single-process layer-wise inference
    logits = layerwise_inference(res.model, NeighborSampler(data.graph, FANOUTS),
                                 torch.from_numpy(data.feat), torch.device("cpu"))
    labels = torch.from_numpy(data.label)
    assert res.test_acc == pytest.approx(accuracy(logits, labels, data.test_idx))
    assert res.val_acc == pytest.approx(accuracy(logits, labels, data.val_idx))


def _mapped_file(ptr: int) -> str | None:
    """The file whose memory map holds address ``ptr`` in this process (/proc/self/maps)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        f = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        if lo <= ptr < hi:
            return f[5] if len(f) > 5 else None
    return None


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("rep", ["global", "local"])
def test_rank_reads_the_one_shared_store(parts2, tmp_path, monkeypatch, rep):
    """A rank's feature source reads the store's feat.npy through its memory map (no private
    copy of the table: the ranks of a machine share the page cache); a global part also
    samples on the store's CSR; the partition holds no features."""
    import twopgraph.distributed.trainer as tr
    data = parts2[0]
    folder = tmp_path / "p"
    meta = partition_selfdep(data, 1, 2, folder, num_clusters=12, representation=rep)
    store = Path(meta["source"]["store"])
    assert not list(folder.rglob("part*/feat.npy"))
    seen = {}
    real = tr.make_loader

    def spy(cfg, d, *a, **k):
        loader = seen["loader"] = real(cfg, d, *a, **k)
        seen["data"] = d
        return loader
    monkeypatch.setattr(tr, "make_loader", spy)
    os.environ.pop("MASTER_ADDR", None)
    train_distributed(_cfg(tmp_path / "run", epochs=1), folder, env=DistEnv(0, 1, 0, 1))
    host = seen["loader"].features.host.tensor
    assert host.shape == data.feat.shape
    assert _mapped_file(host.data_ptr()) == str(store / "feat.npy")
    indptr = seen["data"].graph.indptr
    assert (_mapped_file(indptr.ctypes.data) == str(store / "indptr.npy")) == (rep == "global")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint.pt",
                                                                  "epochs.csv", "metrics.json"]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert len(metrics["peak_pss_mib"]) == 1 and metrics["peak_pss_mib_total"] > 0


# -- distributed exact evaluation = single-process whole-graph inference --------------------------
# part: which partition (representation-hops); hosts: "one" = the hidden tables in a scratch
# file of this machine, "separate" = as ranks on several machines (TWOPGRAPH_SEPARATE_HOSTS=1
# makes same_host() answer false): halo rows exchanged (layer 0's computed by each rank, the
# default; layer0="exchange": received too); scope: --eval-scope
EVAL_JOBS = [dict(model=m, layers=layers, hidden=hidden, seed=seed, part=part, hosts=hosts,
                  scope="all")
             for m in MODELS.names()  # every registered model (a new one is covered)
             for layers, hidden, seed, part in ((2, 16, 0, "global-2"), (3, 8, 1, "local-1"))
             for hosts in ("one", "separate")]
# chunk: bytes one exchange round sends at most (small: many rounds)
EVAL_JOBS += [dict(model="sage", layers=3, hidden=8, seed=2, part="local-2", hosts=hosts,
                   scope=scope, chunk=96) for hosts in ("one", "separate")
              for scope in ("all", "scored")]
EVAL_JOBS += [dict(model=m, layers=3, hidden=8, seed=3, part="global-2", hosts="separate",
                   scope="scored") for m in ("gcn", "gat")]
# layer 0's halo rows received from their owners, as selected (SAGE at L2: the projections
# of the last layer; chunked: many rounds)
EVAL_JOBS += [dict(model=m, layers=layers, hidden=8, seed=4, part="global-2", hosts="separate",
                   scope=scope, layer0="exchange", chunk=chunk)
              for m, layers, scope, chunk in (("sage", 2, "all", 64 << 20),
                                              ("gcn", 3, "all", 96), ("sage", 3, "scored", 96))]


def _eval_worker(rank, world, port, parts, jobs, result_dir):
    """Rank ``rank``: ``evaluate_scores`` of every job's weights; the logits of the last
    layer for the vertices it computes are recorded by a forward hook on the last conv, with
    the scratch folder's content at that time."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    cpu = torch.device("cpu")
    scratch = Path(result_dir) / "scratch"
    with process_group(DistEnv(rank, world, rank, world), cpu, 60):
        for i, job in enumerate(jobs):
            halo_mod.EXCHANGE_CHUNK_BYTES = job.get("chunk", 64 << 20)
            if job["hosts"] == "separate":
                os.environ[SEPARATE_HOSTS_ENV] = "1"
            else:
                os.environ.pop(SEPARATE_HOSTS_ENV, None)
            part = load_part(parts[job["part"]], rank)
            d = part.data
            model = build_model(job["model"], d.num_features, job["hidden"], d.num_classes,
                                job["layers"])
            model.load_state_dict(torch.load(Path(result_dir) / f"weights{i}.pt"))
            seen, during = [], []

            def hook(mod, inp, out, seen=seen, during=during):
                seen.append(out)
                during.append(sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*")))
            model.convs[-1].register_forward_hook(hook)
            # a last layer that shrinks the width is computed from projections, not forward
            orig = getattr(model.convs[-1], "from_projection", None)
            if orig is not None:
                def recorded(*a, orig=orig, hook=hook, **k):
                    out = orig(*a, **k)
                    hook(None, None, out)
                    return out
                model.convs[-1].from_projection = recorded
            # small edge ranges: several blocks per layer
            res = evaluate_scores(model, part, cpu, batch_edges=300, scratch_dir=scratch,
                                  scope=job["scope"], layer0_halo=job.get("layer0"))
            ids = np.asarray(part.owned).copy()
            if job["scope"] == "scored":  # the owned val/test vertices, sorted
                store = part.store
                ids = np.sort(ids[np.isin(ids, np.concatenate([store.val_idx,
                                                               store.test_idx]))])
            _save_eval(result_dir, i, rank, part, scratch, res, seen, during, ids)
        # ranks that disagree on layer 0's halo are refused before any row moves
        os.environ[SEPARATE_HOSTS_ENV] = "1"
        try:
            evaluate_scores(model, part, cpu, batch_edges=300, scratch_dir=scratch,
                            layer0_halo=("compute", "exchange")[rank])
            told = "no error"
        except ConfigError as e:
            told = str(e)
        (Path(result_dir) / f"disagree-rank{rank}.txt").write_text(told)


def _save_eval(result_dir, i, rank, part, scratch, res, seen, during, ids) -> None:
    # between two barriers: no rank has started the next job's scratch folder yet
    dist.barrier()
    after = sorted(p.name for p in scratch.iterdir())
    dist.barrier()
    torch.save({"val": res["val_acc"], "test": res["test_acc"],
                "exchanged": res["eval_exchanged_bytes"],
                "received": res["eval_halo_rows_received"],
                "computed": res["eval_halo_rows_computed"],
                "logits": torch.cat(seen) if seen else None, "ids": ids,
                "owned": np.asarray(part.owned).copy(), "during": during, "after": after},
               Path(result_dir) / f"eval{i}-rank{rank}.pt")


@pytest.fixture(scope="module")
def dist_eval(parts2, parts2_local, tmp_path_factory):
    """Every EVAL_JOBS job evaluated by 2 gloo ranks (one spawn for all), and the whole-graph
    single-process logits of the same weights."""
    data, folder2, _ = parts2
    root = tmp_path_factory.mktemp("dist_eval")
    parts = {"global-2": str(folder2), "local-2": str(parts2_local[1]),
             "local-1": str(root / "p2h1")}
    meta = partition_selfdep(data, 2, 1, parts["local-1"], num_clusters=12,
                             representation="local")
    assert meta["parts"][0]["num_incomplete"] > 0  # truncated halo rows
    full = []
    sampler = NeighborSampler(data.graph, [-1])
    for i, job in enumerate(EVAL_JOBS):
        torch.manual_seed(job["seed"])
        model = build_model(job["model"], data.num_features, job["hidden"], data.num_classes,
                            job["layers"])
        torch.save(model.state_dict(), root / f"weights{i}.pt")
        full.append(layerwise_inference(model, sampler, torch.from_numpy(data.feat),
                                        torch.device("cpu")))
    ctx = mp.start_processes(_eval_worker, args=(2, _free_port(), parts, EVAL_JOBS, str(root)),
                             nprocs=2, join=False, start_method="spawn")
    join_all(ctx.processes)
    assert [p.exitcode for p in ctx.processes] == [0, 0]
    ranks = [[torch.load(root / f"eval{i}-rank{r}.pt", weights_only=False) for r in (0, 1)]
             for i in range(len(EVAL_JOBS))]
    disagree = [(root / f"disagree-rank{r}.txt").read_text() for r in (0, 1)]
    return data, full, ranks, disagree


def _hidden_widths(model) -> list[int]:
    """Widths of the hidden tables exact evaluation writes (the last one: the last layer's
    projections where it shrinks the width)."""
    convs = model.convs
    widths = [c.in_dim for c in convs][1:]
    if convs[-1].in_dim > convs[-1].out_dim and hasattr(convs[-1], "project"):
        widths[-1] = sum(_projection_widths(convs[-1]))
    return widths


def _halo_rows(data, owned: np.ndarray, readers: np.ndarray | None = None) -> int:
    """Vertices that ``readers`` (default ``owned``) or their neighbours are, and ``owned``
    does not hold."""
    g, readers = data.graph, owned if readers is None else readers
    nbr = np.concatenate([g.indices[g.indptr[v]:g.indptr[v + 1]] for v in readers] +
                         [np.zeros(0, dtype=g.indices.dtype)])
    return int(np.setdiff1d(np.union1d(nbr, readers), owned).shape[0])


def _halos(data, spec, model, ranks) -> list[int]:
    """Halo rows of each hidden table, summed over the ranks: table ``i`` is read by layer
    ``i + 1`` for each rank's owned vertices (scored scope: of level ``i + 2``)."""
    tables = spec["layers"] - 1
    if spec["scope"] == "all":
        return [sum(_halo_rows(data, r["owned"]) for r in ranks)] * tables
    levels = plan_scope(model, data.graph, scored_ids(data.num_nodes, data.val_idx,
                                                      data.test_idx), "scored",
                        input_level=False).levels
    return [sum(_halo_rows(data, r["owned"], np.intersect1d(levels[i + 2], r["owned"]))
                for r in ranks) for i in range(tables)]


@pytest.mark.parametrize("job", range(len(EVAL_JOBS)),
                         ids=[f"{j['model']}-L{j['layers']}-{j['part']}-{j['scope']}-"
                              f"{j['hosts']}-host" for j in EVAL_JOBS])
def test_distributed_evaluation_equals_whole_graph_inference(dist_eval, job):
    """Each rank's last-layer logits of the vertices it computes (owned; with the scored
    scope the owned val/test ones) are the whole-graph ones; the val and test accuracies are
    the whole graph's, exactly (correct counts over split sizes). On one machine the hidden
    layers went through one scratch file (removed when the evaluation ended) and nothing was
    exchanged; as on several machines, no scratch file and exactly the halo rows of the hidden
    tables travelled (a table's halo: the vertices layer ``i + 1`` reads for a rank -- its
    owned ones or, scored, those of level ``i + 2`` -- that it does not own) -- except layer
    0's, which each rank computed itself (unless ``layer0_halo="exchange"``):
    ``eval_exchanged_bytes`` counts the rows sent only."""
    data, full, ranks, _ = dist_eval
    spec = EVAL_JOBS[job]
    logits, labels = full[job], torch.from_numpy(data.label)
    owned = np.concatenate([r["owned"] for r in ranks[job]])
    np.testing.assert_array_equal(np.sort(owned), np.arange(data.num_nodes))  # a partition
    for r in ranks[job]:
        assert r["logits"] is not None and r["logits"].shape[0] == r["ids"].shape[0]
        want = logits[torch.from_numpy(r["ids"])]
        torch.testing.assert_close(r["logits"], want, rtol=1e-5, atol=1e-5)
        assert torch.equal(r["logits"].argmax(1), want.argmax(1))
        assert r["after"] == []  # the scratch is removed
        layers = spec["layers"]
        if spec["hosts"] == "one":  # during the last layer: the previous layer's table
            assert {len(x) for x in r["during"]} == {2}, r["during"]
            assert all(x[0].startswith(".twopgraph-eval-") and
                       x[1].endswith(f"/layer{layers - 2}.f32") for x in r["during"])
            assert r["exchanged"] == 0
            assert r["received"] == r["computed"] == 0
        else:
            assert all(x == [] for x in r["during"])
    for key in ("exchanged", "received", "computed"):  # summed over ranks
        assert ranks[job][0][key] == ranks[job][1][key], key
    if spec["hosts"] == "separate":
        model = build_model(spec["model"], data.num_features, spec["hidden"], data.num_classes,
                            spec["layers"])
        widths, halos = _hidden_widths(model), _halos(data, spec, model, ranks[job])
        got = ranks[job][0]
        if spec.get("layer0", "compute") == "compute":  # the default; table 0: no bytes
            assert got["computed"] == halos[0] > 0
            widths, halos = widths[1:], halos[1:]
        else:
            assert got["computed"] == 0
        assert got["received"] == sum(halos)
        assert got["exchanged"] == sum(h * w * 4 for h, w in zip(halos, widths))
        assert (got["exchanged"] > 0) == bool(widths)  # nothing at L2 unless exchanged
        if spec["scope"] == "scored":  # fewer: only what the val/test vertices' need
            full_halo = sum(_halo_rows(data, r["owned"]) for r in ranks[job])
            assert all(h < full_halo for h in halos)
    pred = logits.argmax(1)
    for key, idx in (("val", data.val_idx), ("test", data.test_idx)):
        correct = int((pred[idx] == labels[idx]).sum())
        assert 0 < correct < idx.shape[0]  # not a degenerate model
        for r in ranks[job]:
            assert r[key] == correct / idx.shape[0], (key, r[key], correct)


def test_ranks_must_agree_on_layer0_halo(dist_eval):
    """One rank computing layer 0's halo rows while the other expects to receive them would
    pair unrelated collectives: every rank is refused, naming the setting."""
    for told in dist_eval[3]:
        assert "ranks disagree on the hidden layers whose halo rows they compute" in told and \
            "[[True, False], [False, False]]" in told, told


def test_layer0_halo_is_checked_at_the_door():
    model = build_model("sage", 4, 8, 3, 2)
    with pytest.raises(ValueError, match="layer0_halo='send'; allowed: compute, exchange"):
        evaluate_scores(model, None, "cpu", layer0_halo="send")


@pytest.mark.parametrize("rep", ["global", "local"])
def test_part_sampler_counts_halo_rows(parts2, tmp_path, rep):
    """A global part samples the whole graph: no truncated rows, input rows of vertices it
    does not own counted as halo rows."""
    data = parts2[0]
    partition_selfdep(data, 2, 1, tmp_path / "p", num_clusters=12, representation=rep)
    part = load_part(tmp_path / "p", 0)
    s = PartSampler(part, FANOUTS, seed=0)
    halo = 0
    for b in range(5):
        mb = s.sample(np.array(part.data.train_idx[b * 20:(b + 1) * 20]), key=b)
        glob = np.asarray(part.rows)[mb.input_nodes.numpy()] if rep == "local" else \
            mb.input_nodes.numpy()
        halo += int((~np.isin(glob, part.owned)).sum())
    req, rows, seen = s.counters()
    assert seen == halo > 0
    assert (req == 0 and rows == 0) == (rep == "global")


@pytest.mark.parametrize("hops", [1, 2])
def test_part_sampler_counts_truncated_rows(parts2, tmp_path, hops):
    data, _, _ = parts2
    partition_selfdep(data, 2, hops, tmp_path / "p", num_clusters=12, representation="local")
    part = load_part(tmp_path / "p", 0, mmap=False)
    s = PartSampler(part, FANOUTS, seed=0)
    for b in range(5):
        s.sample(np.asarray(part.data.train_idx[b * 20:(b + 1) * 20]), key=b)
    req, rows, halo = s.counters()
    assert halo > 0
    if hops >= len(FANOUTS):
        assert req == 0 and rows == 0
    else:
        assert req > 0 and rows > 0


def test_world_size_must_match_parts(parts2, tmp_path):
    _, folder, _ = parts2
    with pytest.raises(ConfigError, match="2 parts but the run has 1"):
        train_distributed(_cfg(tmp_path / "run"), folder, env=DistEnv(0, 1, 0, 1))


def test_fixed_steps_wraps_around():
    s = FixedSteps(RandomScheduler(np.arange(10), 4, seed=0), 5)
    b = list(s.batches(0))
    assert [len(x) for x in b] == [4, 4, 2, 4, 4] and s.batch_size == 4
    assert sorted(np.concatenate(b[:3]).tolist()) == list(range(10))


def test_launch_command():
    cmd = torchrun_command(4, ["train", "--partitions", "d", "--nproc", "4", "--epochs", "1"])
    assert cmd[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4",
                        "-m"]
    assert cmd[6:] == ["twopgraph", "train", "--partitions", "d", "--epochs", "1"]
    assert strip_nproc(["--nproc=2", "x"]) == ["x"]


def test_cli_nproc_runs_torchrun(parts2, tmp_path):
    _, folder, _ = parts2
    out = tmp_path / "cli"
    proc = subprocess.run(
        [sys.executable, "-m", "twopgraph", "train", "--partitions", str(folder), "--nproc", "2",
         "--fanouts", "5,5", "--batch-size", "64", "--epochs", "1", "--hidden", "16",
         "--device", "cpu", "--threads", "1", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert len(lines) == 1 and 0 <= lines[0]["test_acc"] <= 1  # rank 0 alone prints
    assert json.loads((out / "metrics.json").read_text())["distributed"]["world_size"] == 2


def test_cli_nproc_must_match_parts(parts2, tmp_path, capsys):
    from twopgraph.cli import main
    _, folder, _ = parts2
    assert main(["train", "--partitions", str(folder), "--nproc", "3", "--out",
                 str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "use --nproc 2" in err[0]
    assert main(["train", "--nproc", "2", "--out", str(tmp_path / "x")]) == 2
    assert "--nproc needs --partitions" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(),
                    reason="needs Linux /proc smaps_rollup")
def test_pss_monitor_keeps_the_peak(tmp_path):
    from twopgraph.runtime.memory import PssMonitor, current_pss_mib, process_pss_monitor
    base = current_pss_mib()
    assert base is not None and base > 0
    with PssMonitor(interval=0.01) as mon:
        block = np.ones(64 << 20, dtype=np.uint8)  # 64 MiB, touched
        # held until the thread has seen it (it waits PSS_COST_RATIO x a read between reads:
        # a few ms on a quiet machine, longer under load), at most 20 s
        deadline = time.monotonic() + 20
        while (mon._peak or 0) < base + 48 and time.monotonic() < deadline:
            time.sleep(0.05)
        del block
        time.sleep(0.05)
    assert mon.peak_mib >= base + 48 and mon._thread is None
    assert current_pss_mib() < mon.peak_mib  # the peak stays after the memory went
    # no /proc file: None, and no thread
    missing = PssMonitor(path=str(tmp_path / "none")).start()
    assert missing.peak_mib is None and missing._thread is None and missing.stop() is None
    assert process_pss_monitor() is process_pss_monitor()
    with pytest.raises(ValueError, match="interval"):
        PssMonitor(interval=0)


def test_pss_monitor_waits_in_proportion_to_the_cost_of_a_read(monkeypatch):
    """A slow read (a process with a large store mapped) spaces the samples out: at most
    1 / PSS_COST_RATIO of a core goes to reading PSS, whatever ``interval`` asks."""
    from twopgraph.runtime import memory as metrics
    calls = []
    real = metrics.current_pss_mib

    def slow_read(path=metrics.SMAPS_ROLLUP):
        if path != "fake-smaps":  # another monitor of this process (process_pss_monitor)
            return real(path)
        calls.append(time.perf_counter())
        time.sleep(0.02)
        return 100.0

    monkeypatch.setattr(metrics, "current_pss_mib", slow_read)
    mon = metrics.PssMonitor(interval=0.001, path="fake-smaps").start()
    time.sleep(1.5)
    mon._stop.set()
    mon._thread.join()
    gaps = np.diff(calls[1:])  # calls[0]: the read of start(), before the thread
    assert len(gaps) >= 1
    assert gaps.min() >= metrics.PSS_COST_RATIO * 0.02  # 0.5 s between reads, not 0.001 s
    assert len(calls) <= 1 + 1.5 / (metrics.PSS_COST_RATIO * 0.02) + 1
