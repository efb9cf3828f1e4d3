"""PyG's documented loop under DDP: two processes (gloo), each with a
``twopgraph.pyg.NeighborLoader`` that takes its rank and world size from
``torch.distributed``, train an unmodified ``torch_geometric.nn.models.GraphSAGE`` wrapped in
``DistributedDataParallel``: the ranks' seeds split each epoch's batches between them (no
seed twice within a rank's epoch, every training node on some rank), both take the same
number of steps, and they end with the same weights and a lower loss."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch_geometric.nn")

WORKER = textwrap.dedent("""
    import json, sys
    import torch, torch.distributed as dist, torch.nn.functional as F
    from torch_geometric.data import Data
    from torch_geometric.nn.models import GraphSAGE
    from twopgraph.pyg import NeighborLoader

    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(0)
    n, k = 600, 4
    y = torch.randint(0, k, (n,), generator=g)
    src, dst = torch.randint(0, n, (2, 6000), generator=g)
    keep = (y[src] == y[dst]) | (torch.rand(6000, generator=g) < 0.1)
    x = torch.randn(n, 8, generator=g) + torch.eye(k, 8)[y]
    train = torch.rand(n, generator=g) < 0.6
    data = Data(x=x, y=y, edge_index=torch.stack([src[keep], dst[keep]]), train_mask=train)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(GraphSAGE(8, 16, 2, k))
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    loader = NeighborLoader(data, [5, 5], input_nodes=data.train_mask, batch_size=40,
                            shuffle=True, schedule=sys.argv[1])
    seeds, losses = [], []
    for epoch in range(3):
        loader.set_epoch(epoch)
        ep, total = [], 0.0
        for batch in loader:
            opt.zero_grad()
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            loss = F.cross_entropy(out, batch.y[:batch.batch_size])
            loss.backward()
            opt.step()
            ep += batch.n_id[:batch.batch_size].tolist()
            total += loss.item()
        seeds.append(ep)
        losses.append(total / len(loader))
    w = torch.cat([p.detach().flatten() for p in model.parameters()])
    print(json.dumps({"rank": dist.get_rank(), "steps": len(loader), "seeds": seeds,
                      "losses": losses, "w": w[:50].tolist(),
                      "train": train.nonzero().view(-1).tolist()}), flush=True)
    dist.destroy_process_group()
    # leave without the interpreter's teardown: one full-suite run in three under load saw a
    # rank abort there ("terminate called without an active exception", SIGABRT) after its
    # result was complete; not reproduced in 12 runs alone (see the issue 41 note)
    import os
    os._exit(0)
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("schedule", ["locality"])
def test_ddp_ranks_split_batches_and_agree(tmp_path, schedule):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen([sys.executable, str(script), schedule], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    a, b = sorted(outs, key=lambda o: o["rank"])
    assert a["steps"] == b["steps"] > 1
    train = set(a["train"])
    for epoch in range(3):
        sa, sb = a["seeds"][epoch], b["seeds"][epoch]
        assert len(sa) == len(set(sa)) and len(sb) == len(set(sb))  # no repeat in a rank
        assert set(sa) | set(sb) == train  # every training node on some rank
        assert len(set(sa) & set(sb)) <= 40  # overlap: at most the padding of one batch
    assert a["w"] == pytest.approx(b["w"], abs=1e-6)  # DDP kept the replicas equal
    assert a["losses"][-1] < 0.8 * a["losses"][0]
