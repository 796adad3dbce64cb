"""engine.distributed: one process does no collective; several agree through one all-reduce."""

from __future__ import annotations

import contextlib

import pytest
import torch

from guitrainer.engine import distributed


class _Accelerator:
    """Stands in for accelerate: ``others`` are the flag tensors of the other processes."""

    def __init__(self, processes: int, others: list[list[float]] | None = None) -> None:
        self.num_processes = processes
        self.process_index = 0
        self.is_main_process = True
        self.others = others or []
        self.reduced: list[str] = []

    def reduce(self, t: torch.Tensor, reduction: str) -> torch.Tensor:
        if self.num_processes == 1:
            raise AssertionError("a single process must not reduce")
        self.reduced.append(reduction)
        stack = torch.stack([t, *(torch.tensor(o) for o in self.others)])
        return stack.max(0).values if reduction == "max" else stack.mean(0)

    def no_sync(self, module):
        return "no_sync"


def test_launched_processes_reads_world_size(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert distributed.launched_processes() == 3
    monkeypatch.setenv("WORLD_SIZE", "lots")
    assert distributed.launched_processes() == 1
    monkeypatch.delenv("WORLD_SIZE")
    assert distributed.launched_processes() == 1


def test_one_process_passes_flags_through_without_a_collective():
    procs = distributed.Processes(_Accelerator(1), torch.device("cpu"))
    assert procs.any_process(True, False) == (True, False)
    loss = torch.tensor([1.5])
    assert procs.mean(loss) is loss
    assert isinstance(procs.no_sync_unless(False, torch.nn.Linear(1, 1)), contextlib.nullcontext)


def test_several_processes_stop_when_any_one_asks_and_average_the_loss():
    acc = _Accelerator(2, others=[[1.0, 0.0]])  # the other process was asked to stop, not to pause
    procs = distributed.Processes(acc, torch.device("cpu"))
    assert procs.any_process(False, False) == (True, False)
    assert procs.mean(torch.tensor([2.0, 4.0])).tolist() == pytest.approx([1.5, 2.0])
    assert acc.reduced == ["max", "mean"]
    assert procs.no_sync_unless(False, torch.nn.Linear(1, 1)) == "no_sync"  # gradients synced on the last pass only
    assert isinstance(procs.no_sync_unless(True, torch.nn.Linear(1, 1)), contextlib.nullcontext)


def test_weights_fingerprint_changes_with_any_weight_but_not_with_order():
    a = {"x": torch.zeros(3), "y": torch.ones(2)}
    same = {"y": torch.ones(2), "x": torch.zeros(3)}
    moved = {"x": torch.tensor([0.0, 0.0, 1e-6]), "y": torch.ones(2)}
    assert distributed.weights_fingerprint(a) == distributed.weights_fingerprint(same)
    assert distributed.weights_fingerprint(a) != distributed.weights_fingerprint(moved)
    assert len(distributed.weights_fingerprint(a)) == 16
