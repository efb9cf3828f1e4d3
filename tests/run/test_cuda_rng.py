"""A CUDA run resumes identically (issue 42, defect 7) and its Adam is fused (item 3):

- ``save_checkpoint`` stores the CUDA generators' states (``cuda_rng``) beside ``torch_rng``
  when CUDA is initialised, and ``build_training`` restores them on resume (the states of a
  process with another number of GPUs: what matches, one warning); a checkpoint without the
  key (older, or a CPU run's) still loads and sets nothing;
- Adam is ``fused`` on a CUDA device, unfused (torch's default) on the CPU, also when a
  checkpoint of the other kind is resumed.

The torch.cuda getters and setters are monkeypatched on the CPU; CUDA cases are marked.
"""

from __future__ import annotations

import logging

import pytest
import torch
from conftest import community_data

import twopgraph.run.checkpoint as ck
from twopgraph.config import TrainConfig
from twopgraph.run.checkpoint import (
    CHECKPOINT,
    CUDA_RNG,
    adam_options,
    build_training,
    restore_cuda_rng,
    run_signature,
    save_checkpoint,
)


@pytest.fixture(scope="module")
def cdata():
    return community_data()


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(dataset="community", epochs=2, hidden=8, fanouts=[5, 5], batch_size=64, lr=0.01,
                seed=0, device="cpu", out=str(tmp_path / "o"), progress=False)
    base.update(kw)
    return TrainConfig.of(**base)


def _states(n):
    return [torch.arange(16, dtype=torch.uint8) + i for i in range(n)]


def _fake_gpus(monkeypatch, count):
    """torch.cuda as a process with ``count`` initialised GPUs; returns the set calls."""
    set_calls = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: _states(count))
    monkeypatch.setattr(torch.cuda, "set_rng_state",
                        lambda state, device="cuda": set_calls.append((device, state.clone())))
    return set_calls


def _save(tmp_path, cdata, **extra):
    c = _cfg(tmp_path)
    model, opt, _, _ = build_training(c, cdata, "cpu")
    out = tmp_path / "o"
    out.mkdir(exist_ok=True)
    save_checkpoint(out, model, opt, run_signature({}, "fp"), [{"epoch": 0}], **extra)
    return c, torch.load(out / CHECKPOINT, map_location="cpu", weights_only=False)


def test_cuda_rng_saved_and_restored(tmp_path, cdata, monkeypatch):
    calls = _fake_gpus(monkeypatch, 2)
    c, ckpt = _save(tmp_path, cdata, torch_rng=torch.get_rng_state())
    assert [torch.equal(a, b) for a, b in zip(ckpt[CUDA_RNG], _states(2))] == [True, True]
    calls.clear()
    build_training(c, cdata, "cpu", ckpt)  # the resume path restores them
    assert [d for d, _ in calls] == [0, 1]
    assert all(torch.equal(s, e) for (_, s), e in zip(calls, _states(2)))


def test_no_cuda_rng_without_torch_rng_or_cuda(tmp_path, cdata, monkeypatch):
    _fake_gpus(monkeypatch, 1)
    _, ckpt = _save(tmp_path, cdata, kind="distributed")  # a process that keeps no RNG
    assert CUDA_RNG not in ckpt
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)  # a CPU run
    _, ckpt = _save(tmp_path, cdata, torch_rng=torch.get_rng_state())
    assert CUDA_RNG not in ckpt


def test_checkpoint_without_the_key_loads(tmp_path, cdata, monkeypatch):
    calls = _fake_gpus(monkeypatch, 1)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    c, ckpt = _save(tmp_path, cdata, torch_rng=torch.get_rng_state())
    assert CUDA_RNG not in ckpt
    model, opt, log, start = build_training(c, cdata, "cpu", ckpt)
    assert start == 1 and log == [{"epoch": 0}] and calls == []
    assert restore_cuda_rng({}) == 0


@pytest.mark.parametrize("saved, seen, restored", [(2, 1, 1), (1, 2, 1), (2, 0, 0)])
def test_another_gpu_count_restores_what_matches(monkeypatch, caplog, saved, seen, restored):
    calls = _fake_gpus(monkeypatch, seen)
    if seen == 0:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        assert restore_cuda_rng({CUDA_RNG: _states(saved)}) == restored
    assert [d for d, _ in calls] == list(range(restored))
    warnings = [r for r in caplog.records if "CUDA generator" in r.getMessage()]
    assert len(warnings) == 1


def test_same_gpu_count_restores_without_warning(monkeypatch, caplog):
    _fake_gpus(monkeypatch, 2)
    with caplog.at_level(logging.WARNING, logger="twopgraph"):
        assert restore_cuda_rng({CUDA_RNG: _states(2)}) == 2
    assert not caplog.records


# -- fused Adam ----------------------------------------------------------------------------------
def test_adam_fused_on_cpu_and_cuda():
    assert adam_options("cpu") == {"fused": True} == adam_options(torch.device("cpu"))
    assert adam_options("cuda") == {"fused": True}
    assert adam_options(torch.device("cuda", 1)) == {"fused": True}
    assert adam_options("meta") == {}


def test_cpu_adam_is_fused_also_from_an_unfused_checkpoint(tmp_path, cdata):
    """A checkpoint written before the CPU's Adam was fused (its state unfused, int steps
    or tensors as torch's default implementation keeps them) resumes with the fused one."""
    c = _cfg(tmp_path)
    model, opt, _, _ = build_training(c, cdata, "cpu")
    assert opt.param_groups[0]["fused"]
    unfused = torch.optim.Adam(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    unfused.step()
    state = unfused.state_dict()
    assert not state["param_groups"][0].get("fused")
    _, opt2, _, _ = build_training(c, cdata, "cpu", {"model": model.state_dict(),
                                                      "optimizer": state, "epochs_log": [],
                                                      "epochs_done": 0})
    assert opt2.param_groups[0]["fused"]
    for p in opt2.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    opt2.step()  # steps fused


def test_build_training_passes_the_choice_to_adam(tmp_path, cdata, monkeypatch):
    seen = {}
    real = torch.optim.Adam

    def adam(params, **kw):
        seen.update(kw)
        kw.pop("fused", None)  # no CUDA here: build the default one
        return real(params, **kw)
    monkeypatch.setattr(ck, "adam_options", lambda device: {"fused": True})
    monkeypatch.setattr(torch.optim, "Adam", adam)
    build_training(_cfg(tmp_path), cdata, "cpu")
    assert seen.get("fused") is True


@pytest.mark.cuda
def test_cuda_training_uses_fused_adam_and_resumes_its_generator(tmp_path, cdata):
    c = _cfg(tmp_path, device="cuda")
    model, opt, _, _ = build_training(c, cdata, "cuda")
    assert opt.param_groups[0]["fused"] is True
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    torch.cuda.manual_seed_all(5)
    out = tmp_path / "o"
    out.mkdir(exist_ok=True)
    save_checkpoint(out, model, opt, run_signature({}, "fp"), [{"epoch": 0}],
                    torch_rng=torch.get_rng_state())
    expect = torch.rand(4, device="cuda")
    ckpt = torch.load(out / CHECKPOINT, map_location="cpu", weights_only=False)
    assert len(ckpt[CUDA_RNG]) == torch.cuda.device_count()
    torch.cuda.manual_seed_all(99)
    _, opt2, _, _ = build_training(c, cdata, "cuda", ckpt)
    assert torch.equal(torch.rand(4, device="cuda"), expect)
    assert opt2.param_groups[0]["fused"] is True
    for p in opt2.param_groups[0]["params"]:
        p.grad = torch.ones_like(p)
    opt2.step()
