"""``precision.offload_blocks`` through the real Trainer on the demo model (CPU): with NaN where an offloaded
weight is away (helpers/offload_poison.py registered as the CPU's transport), half the UNet's blocks offloaded
train the same LoRA bit for bit as none, stop and resume stay exact, and the session's choices are checked: the
family's blocks are the units checkpointing recomputes, offload without checkpointing is refused, and where
offload frees nothing (a CPU, an Apple GPU) the run says so and trains as without."""

from __future__ import annotations

import pytest
import torch
from helpers import demo_cfg
from helpers.doubles import StopAt
from helpers.offload_poison import PoisonTransport

from guitrainer.core.events import Control, NullReporter
from guitrainer.engine import offload
from guitrainer.engine.errors import TrainingFailed
from guitrainer.engine.families import registry
from guitrainer.engine.feedback import Feedback
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.session import build_session, offload_choice
from guitrainer.engine.trainer import Trainer

COMMON = {"schedule__max_steps": 6, "network__dropout": 0.1, "dataset__flip_augment": True,
          "precision__gradient_checkpointing": True, "precision__training": "fp32"}


class Notes(Feedback):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def status(self, text: str) -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.lines.append("warning: " + text)


@pytest.fixture
def poisoned_cpu(monkeypatch):
    """The CPU as a device offload streams to, with NaN in every offloaded weight while it is away."""
    monkeypatch.setitem(offload.TRANSPORTS, "cpu", PoisonTransport)


def lora_equal(a_path: str, b_path: str) -> bool:
    a, _ = read_lora(a_path)
    b, _ = read_lora(b_path)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_half_the_unet_offloaded_trains_the_same_lora_and_resumes_exactly(tmp_path, poisoned_cpu):
    torch.set_num_threads(1)
    plain_rep = NullReporter()
    plain = Trainer(demo_cfg(tmp_path / "plain", **COMMON), plain_rep).run()
    assert plain.status == "finished", plain.message

    rep = NullReporter()
    tr = Trainer(demo_cfg(tmp_path / "off", precision__offload_blocks=0.5, **COMMON), rep)
    straight = tr.run()
    assert straight.status == "finished", straight.message
    off = tr.session.offloader
    assert off is not None and off.stats.backward_passes == 6 and off.stats.offloads > 0
    lists = registry.family("demo").offload_blocks(tr.session.model.denoiser)
    assert len(off.blocks) == sum(round(0.5 * len(b) + 1e-9) for b in lists)  # half of each list
    assert [s.loss for s in rep.steps] == [s.loss for s in plain_rep.steps]
    assert lora_equal(straight.lora_path, plain.lora_path)

    control = Control()
    first_rep = StopAt(control, 3)
    cfg = demo_cfg(tmp_path / "resumed", precision__offload_blocks=0.5, **COMMON)
    first = Trainer(cfg, first_rep, control).run()
    assert first.status == "stopped" and first.steps == 3
    second_rep = NullReporter()
    cfg = demo_cfg(tmp_path / "resumed", precision__offload_blocks=0.5, schedule__resume_from=first.state_path, **COMMON)
    second = Trainer(cfg, second_rep).run()
    assert second.status == "finished", second.message
    assert [s.loss for s in first_rep.steps + second_rep.steps] == [s.loss for s in rep.steps]
    assert lora_equal(second.lora_path, straight.lora_path)


@pytest.mark.slow
def test_the_unet_blocks_offered_are_the_units_checkpointing_recomputes(tmp_path):
    """Every block the family offers that has a backward pass runs twice in a training step (forward, then
    recomputed); the mid block's first ResNet, left out, has one and runs once: diffusers does not checkpoint it.
    (The first ResNet, before any LoRA layer, needs no backward pass and runs once.)"""
    torch.set_num_threads(1)
    s = build_session(demo_cfg(tmp_path, **COMMON), Feedback())
    unet = s.model.denoiser
    offered = [b for blocks in registry.family("demo").offload_blocks(unet) for b in blocks]
    assert offered and len({id(b) for b in offered}) == len(offered)
    watched = [*offered, unet.mid_block.resnets[0]]
    calls = {id(m): 0 for m in watched}
    backward = {id(m): False for m in watched}

    def count(mod: torch.nn.Module, _args: object, out: torch.Tensor) -> None:
        calls[id(mod)] += 1
        backward[id(mod)] |= out.requires_grad

    for m in watched:
        m.register_forward_hook(count)
    g = torch.Generator().manual_seed(0)
    noisy = torch.randn(1, 4, 8, 8, generator=g)
    text = torch.randn(1, 77, unet.config.cross_attention_dim, generator=g)
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):  # a recomputation runs to the block's end
        unet(noisy, torch.tensor([10]), text).sample.square().mean().backward()
    assert sum(backward[id(b)] for b in offered) >= len(offered) - 1
    assert all(calls[id(b)] == (2 if backward[id(b)] else 1) for b in offered), calls
    mid = unet.mid_block.resnets[0]
    assert backward[id(mid)] and calls[id(mid)] == 1


def test_offload_without_checkpointing_is_refused_in_plain_words(tmp_path):
    cfg = demo_cfg(tmp_path, precision__offload_blocks=0.5, precision__gradient_checkpointing=False)
    with pytest.raises(TrainingFailed) as e:
        offload_choice(cfg, [[torch.nn.Linear(2, 2)]], torch.device("cuda"), None, Notes())
    assert "needs gradient checkpointing" in str(e.value)
    assert any("gradient_checkpointing = true" in a for a in e.value.advice)


@pytest.mark.parametrize("kind, says", [
    ("cpu", "the model is in system RAM already"),
    ("mps", "shares one memory with the CPU"),
    ("xpu", "warning: blocks in system RAM are not available on xpu"),
])
def test_where_offload_frees_nothing_the_run_says_so_and_offloads_nothing(tmp_path, kind, says):
    notes = Notes()
    cfg = demo_cfg(tmp_path, precision__offload_blocks=0.5, precision__gradient_checkpointing=True)
    assert offload_choice(cfg, [[torch.nn.Linear(2, 2)] * 2], torch.device(kind), None, notes) == ([], None)
    assert any(says in line for line in notes.lines), notes.lines


def test_offload_on_several_cuda_processes_is_refused(tmp_path, monkeypatch):
    monkeypatch.setitem(offload.TRANSPORTS, "cuda", PoisonTransport)  # no GPU here: only the decision is tested

    class TwoProcesses:
        count = 2

    cfg = demo_cfg(tmp_path, precision__offload_blocks=0.5, precision__gradient_checkpointing=True)
    with pytest.raises(TrainingFailed, match="single process"):
        offload_choice(cfg, [[torch.nn.Linear(2, 2)] * 2], torch.device("cuda"), TwoProcesses(), Notes())  # type: ignore[arg-type]


@pytest.mark.slow
def test_on_the_cpu_offload_is_a_noop_that_says_so(tmp_path):
    torch.set_num_threads(1)
    notes = Notes()
    s = build_session(demo_cfg(tmp_path, precision__offload_blocks=0.5, **COMMON), notes)
    assert s.offloader is None
    assert any("nothing to do on the CPU" in line for line in notes.lines)
    assert all(p.device.type == "cpu" and torch.isfinite(p).all() for p in s.model.denoiser.parameters())


def test_half_of_each_list_is_chosen_evenly_spread():
    """4 blocks: k = 2, the middles of [0, 2) and [2, 4): 1 and 3. 3 blocks: k = round(1.5) = 2 (half up), the
    middles of [0, 1.5) and [1.5, 3): 0.75 and 2.25, so 0 and 2."""
    blocks = [[torch.nn.Linear(2, 2) for _ in range(4)], [torch.nn.Linear(2, 2) for _ in range(3)]]
    assert offload.chosen_blocks(blocks, 0.5) == [blocks[0][1], blocks[0][3], blocks[1][0], blocks[1][2]]
    assert offload.chosen_blocks(blocks, 0.0) == []


@pytest.mark.slow
@pytest.mark.skipif(getattr(torch, "float8_e4m3fn", None) is None, reason="this PyTorch has no float8 types")
def test_fp8_stored_blocks_offload_to_the_same_lora(tmp_path, poisoned_cpu):
    """fp8 storage widens each layer's weight around its forward (engine/network/layer_casting.py); a
    recomputation cut short by checkpointing's early stop leaves the widened copy in the layer, which the offloader
    drops when the block leaves. bf16 AMP with fp8 weights, with and without half the blocks offloaded."""
    torch.set_num_threads(1)
    common = {**COMMON, "schedule__max_steps": 3, "precision__training": "bf16", "precision__base_weights": "fp8"}
    plain = Trainer(demo_cfg(tmp_path / "plain", **common), NullReporter()).run()
    tr = Trainer(demo_cfg(tmp_path / "off", precision__offload_blocks=0.5, **common), NullReporter())
    off = tr.run()
    assert plain.status == off.status == "finished", (plain.message, off.message)
    assert tr.session.offloader is not None and tr.session.offloader.stats.offloads > 0
    assert lora_equal(off.lora_path, plain.lora_path)
