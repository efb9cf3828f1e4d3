#!/usr/bin/env python
"""DGL baseline: neighbour-sampled GraphSAGE / GCN mini-batch training with DGL.

Runs INSIDE the DGL virtualenv (see scripts/setup_dgl_baseline.sh); needs only numpy, torch,
dgl (and scipy, pulled in by dgl). It must not import twopgraph.

    $DGL_VENV/bin/python scripts/dgl_baseline.py --npz ../shared/datasets/cora.npz \
        --fanouts 15,10,5 --batch-size 1024 --epochs 10 --mode both --json

Measurements (docs/formats.md defines the shared metrics):
  sample_epoch_s        median over 3 epochs (after 1 warm-up epoch) of iterating the DataLoader
                        only: sampling + block construction, no feature gather, no compute.
  seeds_per_s           len(train_idx) / sample_epoch_s
  input_nodes_per_batch mean |input_nodes| over the batches of one epoch
  feature_rows          sum of |input_nodes| over one epoch
  train_epoch_s         median over training epochs after the first of the full loop (sample,
                        gather feat[input_nodes], forward, backward, step); all in train_epoch_s_all
  val_acc, test_acc     accuracies of the selected model (below), exact layer-wise
                        full-neighbour inference (as DGL's GraphSAGE example `inference`)
  val_score, test_score the --metric of the selected model: acc, or rocauc (area under the ROC
                        curve of class 1's softmax probability, ties counted half; two classes)
  selected_epoch        0-based epoch of the selected model: with --select best-val (default)
                        the evaluated epoch of the highest val_score, the earliest on ties
                        (twopgraph's rule); with --select last or --eval-every 0 the last one
  epoch_scores          per evaluated epoch: epoch, val/test score and accuracy, eval_s
  peak_rss_mib          resource.getrusage(RUSAGE_SELF).ru_maxrss
With --json exactly one JSON object is written to stdout; everything else goes to stderr.

Models (--model), as twopgraph.models builds them: ``n = len(fanouts)`` layers, ReLU + dropout
between layers (not after the last), Adam, cross-entropy.
  sage  dgl.nn.SAGEConv(aggregator "mean"): W_self h_v + W_neigh mean_{u in S(v)} h_u + b.
  gcn   dgl.nn.GraphConv(norm="none", no weight) sums the neighbours with twopgraph's
        normalisation as edge weights; the self loop and the weight are added around it. With
        full-graph degrees d and s_v sampled neighbours: h_v' = W (h_v / (d_v+1) + (d_v / s_v)
        sum_{u in S(v)} h_u / sqrt((d_u+1)(d_v+1))) + b; with all neighbours, Kipf & Welling's.
  gat   dgl.nn.GATConv (no feature or attention dropout, no residual, zero in-degree
        allowed), --heads heads: concatenated (hidden/heads columns each) in hidden layers,
        averaged in the output layer -- twopgraph's gat, whose initialisation is DGL's too.
Initialisation is DGL's (Xavier), not twopgraph's (torch.nn.Linear's) for sage and gcn.
"""
import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
import warnings

_ARRAYS = ("indptr", "indices", "feat", "label", "train_idx", "val_idx", "test_idx")


def load_arrays(path):
    """The dataset's arrays by name: an ``.npz``, or a twopgraph store directory (synthetic
    presets and ingested OGB datasets are written straight into one; docs/formats.md), whose
    arrays are ``NAME.npy`` files, read into memory as an ``.npz``'s are."""
    import numpy as np
    if not os.path.isdir(path):
        return np.load(path)
    missing = [k for k in _ARRAYS if not os.path.exists(os.path.join(path, k + ".npy"))]
    if missing:
        sys.exit(f"dgl_baseline: {path} is not a complete store: no {', '.join(missing)} "
                 "(a renumbered store reads features through its source; pass the source)")
    return {k: np.load(os.path.join(path, k + ".npy")) for k in _ARRAYS}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--npz", required=True,
                   help="dataset: an .npz (indptr, indices, feat, label, *_idx) or a twopgraph "
                        "store directory (the same arrays as .npy files, store.json)")
    p.add_argument("--fanouts", default="15,10,5", help="comma-separated, fanouts[i] for GNN layer i (DGL order: layer 0 reads the input features; the seeds' own neighbours use the last fanout)")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--epochs", type=int, default=10, help="training epochs (mode train/both)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.003)
    p.add_argument("--weight-decay", type=float, default=0.0, help="Adam weight decay")
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--model", choices=["sage", "gcn", "gat"], default="sage")
    p.add_argument("--heads", type=int, default=4,
                   help="gat: attention heads (hidden layers concatenate heads of hidden/heads "
                        "columns, the output layer averages its heads)")
    p.add_argument("--eval-every", type=int, default=0,
                   help="exact evaluation every N epochs (and always after the last); 0 = after "
                        "the last only")
    p.add_argument("--select", choices=["best-val", "last"], default="best-val",
                   help="which evaluated epoch's model is reported (see selected_epoch)")
    p.add_argument("--metric", choices=["auto", "acc", "rocauc"], default="auto",
                   help="val/test score: acc | rocauc (two classes) | auto (rocauc for two "
                        "classes, else acc)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=["sample", "train", "both"], default="both")
    p.add_argument("--sample-epochs", type=int, default=3, help="timed sampling-only epochs (after 1 warm-up)")
    p.add_argument("--eval-batch-size", type=int, default=4096,
                   help="node chunk size of layer-wise inference; 0 = the whole graph per layer "
                        "(one pass, each vertex projected once)")
    p.add_argument("--formats", choices=["csc", "all"], default=None,
                   help="sparse formats DGL keeps (default: csc, all for gat, whose "
                        "GATConv computes edge scores by SDDMM, which needs coo or csr): "
                        "csc (all that in-edge neighbour "
                        "sampling and block construction read, the memory-lean setting) or all "
                        "(coo+csr+csc, what DGL's DataLoader materialises with num_workers > 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = p.parse_args(argv)
    args.fanouts = [int(x) for x in str(args.fanouts).split(",") if x.strip()]
    if not args.fanouts or any(f == 0 or f < -1 for f in args.fanouts):
        p.error("--fanouts must be positive integers (or -1 for all neighbours)")
    if args.epochs < 1 and args.mode != "sample":
        p.error("--epochs must be >= 1")
    if args.formats is None:
        args.formats = "all" if args.model == "gat" else "csc"
    if args.model == "gat" and (args.heads < 1 or args.hidden % args.heads):
        p.error("--heads must be >= 1 and divide --hidden")
    if args.eval_every < 0 or args.eval_batch_size < 0:
        p.error("--eval-every and --eval-batch-size must be >= 0")
    return args


def roc_auc(scores, labels):
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for 0/1
    ``labels``: the Mann-Whitney statistic from ranks, tied scores sharing their mean rank
    (a tied positive/negative pair counts one half). None when a class is absent.

    >>> roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1])
    0.75
    """
    import numpy as np
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel() == 1
    pos = int(y.sum())
    neg = y.shape[0] - pos
    if pos == 0 or neg == 0:
        return None
    _, inv, counts = np.unique(s, return_inverse=True, return_counts=True)
    # ranks 1..n; the values of a tie group of c entries after k smaller ones share k + (c+1)/2
    first = np.cumsum(counts) - counts
    rank = (first + (counts + 1) / 2.0)[inv]
    return float((rank[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def _f(v):
    """A score for a log line: 4 decimals, or "-" for None."""
    return "-" if v is None else f"{v:.4f}"


def resolve_metric(metric, num_classes):
    """``auto`` -> ``rocauc`` for two classes, else ``acc``; ``rocauc`` needs two classes."""
    if metric == "auto":
        return "rocauc" if num_classes == 2 else "acc"
    if metric == "rocauc" and num_classes != 2:
        raise SystemExit(f"dgl_baseline: --metric rocauc needs two classes, the dataset has "
                         f"{num_classes}")
    return metric


def select_epoch(records, select="best-val"):
    """Index into ``records`` (evaluated epochs, in order, each with ``val_score``) of the
    reported model: the highest val_score, the earliest on ties (records whose val_score is
    None never win); the last record for ``select="last"`` or when no val_score exists."""
    if not records:
        raise ValueError("no evaluated epoch")
    best = None
    if select == "best-val":
        for i, r in enumerate(records):
            v = r.get("val_score")
            if v is not None and (best is None or v > records[best]["val_score"]):
                best = i
    return len(records) - 1 if best is None else best


def main(argv=None):
    args = parse_args(argv)

    # Thread counts must be fixed before torch/dgl start their OpenMP pools.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    # With DGLBACKEND set, import dgl neither prints a notice nor writes ~/.dgl/config.json.
    os.environ.setdefault("DGLBACKEND", "pytorch")

    # Keep stdout clean for the JSON object: anything printed by libraries goes to stderr.
    real_stdout = sys.stdout
    sys.stdout = sys.stderr
    warnings.filterwarnings("ignore")  # e.g. DGL's "CPU affinity opt is not enabled" warning

    import dgl
    import dgl.nn as dglnn
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    try:
        dgl.utils.set_num_threads(args.threads)
    except Exception:  # pragma: no cover - older/newer DGL without this helper
        pass
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    dgl.seed(args.seed)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    # ---------------------------------------------------------------- data
    t0 = time.perf_counter()
    d = load_arrays(args.npz)
    indptr = torch.from_numpy(np.ascontiguousarray(d["indptr"], dtype=np.int64))
    indices = torch.from_numpy(np.ascontiguousarray(d["indices"], dtype=np.int64))
    feat = torch.from_numpy(np.ascontiguousarray(d["feat"], dtype=np.float32))
    label = torch.from_numpy(np.ascontiguousarray(d["label"], dtype=np.int64))
    train_idx = torch.from_numpy(np.ascontiguousarray(d["train_idx"], dtype=np.int64))
    val_idx = torch.from_numpy(np.ascontiguousarray(d["val_idx"], dtype=np.int64))
    test_idx = torch.from_numpy(np.ascontiguousarray(d["test_idx"], dtype=np.int64))
    num_nodes = int(indptr.numel() - 1)
    num_classes = int(label.max()) + 1
    # Row v of the CSR lists the neighbours of v. Build the graph in CSC form, so that the in-edges
    # of v (what NeighborSampler samples, edge_dir='in') are exactly indices[indptr[v]:indptr[v+1]];
    # the graph is symmetric, so this is the same graph as ('csr', ...), without a format
    # conversion.
    g = dgl.graph(("csc", (indptr, indices, torch.empty(0, dtype=torch.int64))), num_nodes=num_nodes)
    if args.formats == "csc":
        g = g.formats("csc")
    g.create_formats_()  # materialise formats now, not inside the first timed epoch
    load_s = time.perf_counter() - t0
    log(f"[dgl_baseline] {os.path.basename(args.npz)}: {num_nodes} nodes, {g.num_edges()} edges, "
        f"{feat.shape[1]} feats, {num_classes} classes, train/val/test "
        f"{len(train_idx)}/{len(val_idx)}/{len(test_idx)} (load {load_s:.2f}s)")

    sampler = dgl.dataloading.NeighborSampler(args.fanouts)

    def make_loader():
        return dgl.dataloading.DataLoader(
            g, train_idx, sampler, batch_size=args.batch_size, shuffle=True,
            drop_last=False, num_workers=0)

    result = {
        "dataset": os.path.splitext(os.path.basename(os.path.normpath(args.npz)))[0],
        "num_nodes": num_nodes,
        "num_edges": int(g.num_edges()),
        "num_train": int(len(train_idx)),
        "load_s": load_s,
    }

    def epoch_rows(sizes):
        return {"input_nodes_per_batch": float(np.mean(sizes)) if sizes else 0.0,
                "feature_rows": int(np.sum(sizes)) if sizes else 0,
                "num_batches": len(sizes)}

    # ------------------------------------------------------- sampling only
    if args.mode in ("sample", "both"):
        loader = make_loader()
        times, rows = [], []
        for ep in range(1 + args.sample_epochs):
            sizes = []
            t = time.perf_counter()
            for input_nodes, output_nodes, blocks in loader:
                sizes.append(int(input_nodes.numel()))
            dt = time.perf_counter() - t
            if ep == 0:
                log(f"[dgl_baseline] sample warm-up epoch {dt:.4f}s")
                continue
            times.append(dt)
            rows.append(epoch_rows(sizes))
            log(f"[dgl_baseline] sample epoch {ep}: {dt:.4f}s, {len(sizes)} batches, "
                f"mean input nodes {np.mean(sizes):.1f}")
        result["sample_epoch_s"] = statistics.median(times)
        result["sample_epoch_s_all"] = times
        result["seeds_per_s"] = len(train_idx) / result["sample_epoch_s"]
        result["input_nodes_per_batch"] = float(np.mean([r["input_nodes_per_batch"] for r in rows]))
        result["feature_rows"] = int(round(np.mean([r["feature_rows"] for r in rows])))
        result["num_batches"] = rows[-1]["num_batches"]

    # ------------------------------------------------------------ training
    if args.mode in ("train", "both"):
        metric = resolve_metric(args.metric, num_classes)
        # full-graph degrees (the graph is symmetric: in = out), what twopgraph's GCN normalises by
        full_deg = g.in_degrees().to(torch.float32)

        whole_edges = []  # the whole graph's (src, dst) in edge-id order, made on first use

        def edges_of(block):
            """(src, dst) of every edge of ``block`` in edge-id order, what GraphConv's
            edge_weight is indexed by. The whole graph keeps only CSC (no COO to ask): its edge
            ids are positions in the CSC arrays (or the CSC's eid array)."""
            if block.is_block:
                return block.edges()
            if not whole_edges:
                ptr, src_ids, eid = g.adj_tensors("csc")
                order = eid if eid.numel() else torch.arange(src_ids.numel())
                src, dst = torch.empty_like(src_ids), torch.empty_like(src_ids)
                src[order] = src_ids
                dst[order] = torch.repeat_interleave(torch.arange(num_nodes), ptr.diff())
                whole_edges.extend((src, dst))
            return whole_edges

        def node_ids(block, side):
            """Original ids of a block's src/dst vertices (arange for the whole graph)."""
            if block.is_block:
                return (block.srcdata if side == "src" else block.dstdata)[dgl.NID]
            return torch.arange(block.num_nodes())

        class GCNLayer(nn.Module):
            """twopgraph's GCNConv (see the module doc): dgl.nn.GraphConv, without weight,
            bias or normalisation of its own, sums the neighbours with twopgraph's edge weights;
            the self loop and the weight are added around it in twopgraph's order (the weight
            first when in_size > out_size)."""

            def __init__(self, in_size, out_size):
                super().__init__()
                self.agg = dglnn.GraphConv(in_size, out_size, norm="none", weight=False,
                                           bias=False, allow_zero_in_degree=True)
                self.weight = nn.Parameter(torch.empty(in_size, out_size))
                self.bias = nn.Parameter(torch.zeros(out_size))
                nn.init.xavier_uniform_(self.weight)  # as GraphConv's own weight
                self.project_first = in_size > out_size

            def forward(self, block, h):
                d_src = full_deg[node_ids(block, "src")]
                d_dst = full_deg[node_ids(block, "dst")]
                s = block.in_degrees().to(torch.float32).clamp(min=1)
                src, dst = edges_of(block)
                w = (d_dst / s / torch.sqrt(d_dst + 1.0))[dst] / torch.sqrt(d_src[src] + 1.0)
                if self.project_first:
                    h = h @ self.weight
                out = self.agg(block, h, edge_weight=w) + \
                    h[:block.num_dst_nodes()] / (d_dst + 1.0).unsqueeze(1)
                if not self.project_first:
                    out = out @ self.weight
                return out + self.bias

        class GATLayer(nn.Module):
            """dgl.nn.GATConv with ``heads`` heads: concatenated (o / heads columns each) in a
            hidden layer, averaged (o columns each) in the output layer, as twopgraph's gat."""

            def __init__(self, in_size, out_size, last):
                super().__init__()
                self.last = last
                per_head = out_size if last else out_size // args.heads
                self.conv = dglnn.GATConv(in_size, per_head, args.heads,
                                          allow_zero_in_degree=True)

            def forward(self, block, h):
                out = self.conv(block, h)  # (dst, heads, per_head)
                return out.mean(1) if self.last else out.flatten(1)

        def make_layer(i, o, last=False):
            if args.model == "sage":
                return dglnn.SAGEConv(i, o, "mean")
            if args.model == "gat":
                return GATLayer(i, o, last)
            return GCNLayer(i, o)

        class GNN(nn.Module):
            def __init__(self, in_size, hid_size, out_size, n_layers, dropout):
                super().__init__()
                sizes = [in_size] + [hid_size] * (n_layers - 1) + [out_size]
                self.layers = nn.ModuleList(make_layer(sizes[i], sizes[i + 1],
                                                       i == n_layers - 1)
                                            for i in range(n_layers))
                self.dropout = nn.Dropout(dropout)
                self.hid_size, self.out_size = hid_size, out_size

            def forward(self, blocks, x):
                h = x
                for l, (layer, block) in enumerate(zip(self.layers, blocks)):
                    h = layer(block, h)
                    if l != len(self.layers) - 1:
                        h = F.relu(h)
                        h = self.dropout(h)
                return h

            @torch.no_grad()
            def inference(self, g, x, chunk):
                """Exact layer-wise inference over all neighbours (DGL GraphSAGE example);
                ``chunk`` = 0: each layer over the whole graph at once."""
                if chunk == 0:
                    for l, layer in enumerate(self.layers):
                        x = layer(g, x)
                        if l != len(self.layers) - 1:
                            x = self.dropout(F.relu(x))
                    return x
                full = dgl.dataloading.MultiLayerFullNeighborSampler(1)
                loader = dgl.dataloading.DataLoader(
                    g, torch.arange(g.num_nodes()), full, batch_size=chunk,
                    shuffle=False, drop_last=False, num_workers=0)
                for l, layer in enumerate(self.layers):
                    last = l == len(self.layers) - 1
                    y = torch.empty(g.num_nodes(), self.out_size if last else self.hid_size)
                    for input_nodes, output_nodes, blocks in loader:
                        h = layer(blocks[0], x[input_nodes])
                        if not last:
                            h = F.relu(h)
                            h = self.dropout(h)
                        y[output_nodes] = h
                    x = y
                return x

        def scores(logits):
            """val/test accuracy and --metric score of ``logits`` (None for an empty split)."""
            pred = logits.argmax(1)
            prob1 = (torch.softmax(logits.double(), 1)[:, 1].numpy()
                     if metric == "rocauc" else None)
            rec = {"train_acc": float((pred[train_idx] == label[train_idx]).float().mean())}
            for split, idx in (("val", val_idx), ("test", test_idx)):
                if not len(idx):
                    rec[f"{split}_acc"] = rec[f"{split}_score"] = None
                    continue
                acc = float((pred[idx] == label[idx]).float().mean())
                rec[f"{split}_acc"] = acc
                rec[f"{split}_score"] = (acc if metric == "acc" else
                                         roc_auc(prob1[idx.numpy()], label[idx].numpy()))
            return rec

        model = GNN(feat.shape[1], args.hidden, num_classes, len(args.fanouts), args.dropout)
        opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
        loader = make_loader()
        train_times, last_sizes, loss_last = [], [], float("nan")
        splits = []  # per epoch: seconds in sampling (loader), feature gather, model step
        evals, eval_s = [], 0.0  # evaluated epochs: their scores
        for ep in range(args.epochs):
            model.train()
            sizes, total_loss, nb = [], 0.0, 0
            ts = tl = tc = 0.0
            t = time.perf_counter()
            it = iter(loader)
            while True:
                t1 = time.perf_counter()
                try:
                    input_nodes, output_nodes, blocks = next(it)
                except StopIteration:
                    ts += time.perf_counter() - t1
                    break
                t2 = time.perf_counter()
                x = feat[input_nodes]
                y = label[output_nodes]
                t3 = time.perf_counter()
                out = model(blocks, x)
                loss = F.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sizes.append(int(input_nodes.numel()))
                total_loss += float(loss.detach())
                nb += 1
                ts, tl, tc = ts + (t2 - t1), tl + (t3 - t2), tc + (time.perf_counter() - t3)
            dt = time.perf_counter() - t
            train_times.append(dt)
            splits.append({"sample_s": ts, "load_s": tl, "compute_s": tc})
            last_sizes = sizes
            loss_last = total_loss / max(nb, 1)
            msg = f"[dgl_baseline] train epoch {ep}: {dt:.4f}s, loss {loss_last:.4f}"
            if ep == args.epochs - 1 or (args.eval_every and (ep + 1) % args.eval_every == 0):
                model.eval()
                t = time.perf_counter()
                rec = {"epoch": ep, **scores(model.inference(g, feat, args.eval_batch_size))}
                rec["eval_s"] = time.perf_counter() - t
                eval_s += rec["eval_s"]
                evals.append(rec)
                msg += (f", val {metric} {_f(rec['val_score'])}, test {metric} "
                        f"{_f(rec['test_score'])} (eval {rec['eval_s']:.2f}s)")
            log(msg)
        timed = train_times[1:] if len(train_times) > 1 else train_times
        result["train_epoch_s"] = statistics.median(timed)
        result["train_epoch_s_all"] = train_times
        # time split of the training epochs (median of epochs after the first): sample = the
        # DataLoader's next() (sampling + block construction), load = feat/label gather,
        # compute = forward, backward, optimizer step
        timed_splits = splits[1:] if len(splits) > 1 else splits
        result["time_split"] = {k: statistics.median([s[k] for s in timed_splits])
                                for k in ("sample_s", "load_s", "compute_s")}
        result["time_split_all"] = splits
        result["loss_last"] = loss_last
        if "input_nodes_per_batch" not in result:  # mode=train: rows from the last training epoch
            result.update(epoch_rows(last_sizes))

        sel = evals[select_epoch(evals, args.select)]
        result["eval_s"] = eval_s  # all evaluations together
        result["metric"] = metric
        result["select"] = args.select
        result["selected_epoch"] = sel["epoch"]
        for k in ("train_acc", "val_acc", "test_acc", "val_score", "test_score"):
            result[k] = sel[k]
        result["epoch_scores"] = evals

    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result["threads"] = args.threads
    result["dgl_version"] = dgl.__version__
    result["torch_version"] = torch.__version__
    for k in ("npz", "model", "heads", "fanouts", "batch_size", "epochs", "hidden", "lr",
              "weight_decay",
              "dropout", "seed", "mode", "sample_epochs", "eval_batch_size", "eval_every"):
        result[k] = getattr(args, k)

    sys.stdout = real_stdout
    if args.json:
        print(json.dumps(result))
    else:
        width = max(len(k) for k in result)
        for k, v in result.items():
            if isinstance(v, float):
                v = f"{v:.4f}" if abs(v) < 1e6 else f"{v:.4g}"
            elif isinstance(v, list):
                v = ", ".join(f"{e:.4f}" if isinstance(e, float) else str(e) for e in v)
            print(f"{k:<{width}}  {v}")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
