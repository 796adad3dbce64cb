"""The recipe optimizers (Prodigy, AdamWScheduleFree, DAdaptAdam, CAME) and LR schedules (engine/optim.py).

Schedules are checked against the formulas worked out by hand; every optimizer trains the demo model and
resumes bit for bit in fp32 (its loss on fixed noise and timesteps falls in 30 steps, except DAdaptAdam's,
whose 30-step loss the CPU's rounding decides: see the test).
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import demo_cfg
from helpers.doubles import StopAt

from guitrainer.core.events import Control, NullReporter
from guitrainer.engine import optim as O
from guitrainer.engine.network.lora import read_lora
from guitrainer.engine.trainer import Trainer

NEW_OPTIMIZERS = ("Prodigy", "AdamWScheduleFree", "DAdaptAdam", "CAME")


def _opt_cfg(name: str, lr: float = 1e-3) -> SimpleNamespace:
    return SimpleNamespace(name=name, lr=lr, betas=[0.9, 0.999], weight_decay=0.0)


def _sched_cfg(name: str, **kw: object) -> SimpleNamespace:
    base = {"lr_scheduler": name, "warmup_steps": 0, "warmup_ratio": 0.0, "lr_scheduler_num_cycles": 1, "lr_scheduler_power": 1.0}
    base.update(kw)
    return SimpleNamespace(**base)


def _lrs(sched_cfg: SimpleNamespace, total: int, steps: list[int], lr: float = 1.0) -> list[float]:
    """The learning rate in effect at each of ``steps`` (the lr the optimizer uses for that step)."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sched = O.build_lr_scheduler(sched_cfg, opt, total)
    out: dict[int, float] = {}
    for step in range(max(steps) + 1):
        out[step] = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
    return [out[s] for s in steps]


def test_cosine_with_hard_restarts_by_hand():
    # 100 steps, 2 cycles of 50: lr = 0.5 (1 + cos(π x ((2 x step / 100) mod 1)))
    got = _lrs(_sched_cfg("cosine_with_restarts", lr_scheduler_num_cycles=2), 100, [0, 25, 49, 50, 75, 99])
    want = [1.0, 0.5, 0.5 * (1 + math.cos(math.pi * 0.98)), 1.0, 0.5, 0.5 * (1 + math.cos(math.pi * 0.98))]
    assert got == pytest.approx(want, abs=1e-9)
    assert got[2] == pytest.approx(0.000987, abs=1e-6)  # just before the restart at step 50


def test_cosine_restarts_with_warmup_by_hand():
    # 10 warm-up steps (lr = step / 10), then 3 cycles over the other 90: 30 steps each
    got = _lrs(_sched_cfg("cosine_with_restarts", warmup_steps=10, lr_scheduler_num_cycles=3), 100, [5, 10, 25, 40, 70])
    assert got == pytest.approx([0.5, 1.0, 0.5, 1.0, 1.0], abs=1e-9)


def test_polynomial_power_by_hand():
    # lr_end 1e-7 (diffusers): lr = (1 - 1e-7) x (1 - step / 100)^power + 1e-7
    got = _lrs(_sched_cfg("polynomial", lr_scheduler_power=2.0), 100, [0, 50, 90])
    assert got == pytest.approx([1.0, (1 - 1e-7) * 0.25 + 1e-7, (1 - 1e-7) * 0.01 + 1e-7], rel=1e-9)


def test_warmup_ratio_wins_over_warmup_steps():
    assert O.warmup_steps(_sched_cfg("linear", warmup_steps=7, warmup_ratio=0.1), 200) == 20
    assert O.warmup_steps(_sched_cfg("linear", warmup_steps=7), 200) == 7
    # linear with 20 warm-up steps out of 200: half way up at step 10, then down to 0 at step 200
    got = _lrs(_sched_cfg("linear", warmup_ratio=0.1), 200, [10, 20, 110])
    assert got == pytest.approx([0.5, 1.0, 0.5])


@pytest.mark.parametrize("name", NEW_OPTIMIZERS)
def test_each_new_optimizer_is_built_from_its_package(name):
    p = torch.nn.Parameter(torch.ones(4, 4))
    opt, used = O.build_optimizer(_opt_cfg(name, 1.0), [{"params": [p], "lr": 1.0}])
    module = {"Prodigy": "prodigyopt", "AdamWScheduleFree": "schedulefree", "DAdaptAdam": "dadaptation", "CAME": "came_pytorch"}
    assert used == name and type(opt).__module__.split(".")[0] == module[name]
    assert O.is_schedule_free(opt) == (name == "AdamWScheduleFree")


def test_lr_free_optimizer_with_a_small_lr_warns():
    warnings: list[str] = []
    p = torch.nn.Parameter(torch.ones(2))
    O.build_optimizer(_opt_cfg("Prodigy", 1e-4), [{"params": [p]}], warn=warnings.append)
    assert warnings and "use 1.0" in warnings[0]
    warnings.clear()
    O.build_optimizer(_opt_cfg("Prodigy", 1.0), [{"params": [p]}], warn=warnings.append)
    assert warnings == []


def test_schedule_free_gets_a_constant_schedule_and_its_own_warmup():
    p = torch.nn.Parameter(torch.ones(2))
    opt, _ = O.build_optimizer(_opt_cfg("AdamWScheduleFree"), [{"params": [p]}])
    warned: list[str] = []
    sched = O.build_lr_scheduler(_sched_cfg("cosine", warmup_ratio=0.1), opt, 100, warn=warned.append)
    assert opt.param_groups[0]["warmup_steps"] == 10
    assert warned and "constant" in warned[0]
    for _ in range(50):
        opt.step()
        sched.step()
    assert sched.get_last_lr() == [1e-3]


def test_averaged_weights_shows_x_and_gives_y_back_bit_for_bit():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(8, 8))
    opt, _ = O.build_optimizer(_opt_cfg("AdamWScheduleFree", 0.05), [{"params": [p]}])
    for _ in range(5):
        (p**2).sum().backward()
        opt.step()
        opt.zero_grad()
    y = p.detach().clone()
    state = opt.state[p]
    beta1 = opt.param_groups[0]["betas"][0]
    with O.averaged_weights(opt):
        # y = (1 - β1) z + β1 x, so x = (y - (1 - β1) z) / β1
        x_expected = (y - (1 - beta1) * state["z"]) / beta1
        assert torch.allclose(p.detach(), x_expected, atol=1e-5)
        assert not torch.equal(p.detach(), y)
    assert torch.equal(p.detach(), y) and opt.param_groups[0]["train_mode"]
    plain = torch.optim.AdamW([torch.nn.Parameter(torch.ones(1))])
    with O.averaged_weights(plain):  # other optimizers: nothing to do
        pass


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW_OPTIMIZERS)
def test_new_optimizer_trains_and_resumes_bit_exactly(tmp_path, name):
    """30 steps of the demo, and the same run stopped at step 12 and resumed, give the same losses, lr and
    LoRA bit for bit. Prodigy, AdamWScheduleFree and CAME also lower the loss on fixed noise and timesteps
    by at least 0.5 %; the LR-free ones (Prodigy, DAdaptAdam) grow their own step size d from d0 = 1e-6.

    DAdaptAdam is not held to the loss: after 30 steps its loss is picked by rounding, not by training.
    Its d rises to 0.06-0.16 by step ~18 (the other optimizers here step with an lr of 1e-3), so each of
    the last dozen steps moves the LoRA far (sum of |up| ~15,000 against ~90 for AdamW), and where it lands
    depends on the float rounding of the kernels. This test, against 1.1332 before training: 1.1150 with
    this AMD EPYC's own kernels (ATEN avx512), 1.1178 with ATEN_CPU_CAPABILITY=avx2, 1.1540 with default,
    1.1295 with ONEDNN_MAX_CPU_ISA=AVX2, 1.1527 with MKL_CBWR=COMPATIBLE; an Intel Xeon with AMX measured
    1.1486 (the failure in issue 26). The 0.5 % line (1.1275) lies inside that spread, and 60 steps do not
    get it out (1.0529 to 1.1446). The others, over the same kernels: Prodigy 1.0310 to 1.0850 (at least 4 % below
    the base), CAME 0.8349 to 0.8495, AdamWScheduleFree 1.1256 on every one. So DAdaptAdam is held to
    what it guarantees: its d grew, the LoRA moved, the loss stayed finite and did not blow up, and the
    resume is exact, d included.
    """
    torch.set_num_threads(1)
    lr = 1.0 if name in O.LR_FREE else 1e-3
    common = {"schedule__max_steps": 30, "optimizer__name": name, "optimizer__lr": lr, "network__dropout": 0.1}
    straight_rep = NullReporter()
    trainer = Trainer(demo_cfg(tmp_path / "a", **common), straight_rep)
    straight = trainer.run()
    assert straight.status == "finished", straight.message
    base = trainer.evaluation_loss(adapters=False)
    trained = trainer.evaluation_loss()
    print(f"\n{name}: evaluation loss {base:.4f} before training, {trained:.4f} after 30 steps")
    if name == "DAdaptAdam":
        # moved about, not blown up: on the Demo's 12 flat pictures its d grows to 0.104 from 0.074 in 30 steps
        assert math.isfinite(trained) and trained < base * 1.5, (base, trained)
    else:
        # the loss on fixed noise and timesteps over every image falls: the LoRA learned
        assert trained < base * 0.995, (name, base, trained)
    if name in O.LR_FREE:
        d = trainer.session.optimizer.param_groups[0]["d"]
        assert d > 1000 * 1e-6, d  # its step size, grown from d0 = 1e-6 (0.06 to 0.16 for DAdaptAdam above)

    control = Control()
    first_rep = StopAt(control, 12)
    first = Trainer(demo_cfg(tmp_path / "b", **common), first_rep, control).run()
    assert first.status == "stopped" and first.steps == 12
    second_rep = NullReporter()
    resumed = Trainer(demo_cfg(tmp_path / "b", schedule__resume_from=first.state_path, **common), second_rep)
    second = resumed.run()
    assert second.status == "finished", second.message
    assert [s.loss for s in straight_rep.steps] == [s.loss for s in first_rep.steps + second_rep.steps]
    assert [s.lr for s in straight_rep.steps] == [s.lr for s in first_rep.steps + second_rep.steps]
    a, _ = read_lora(straight.lora_path)
    b, _ = read_lora(second.lora_path)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ups = [k for k in a if "lora_up" in k]
    assert ups and all(a[k].abs().sum() > 0 for k in ups)  # every up matrix left its zero start
    if name in O.LR_FREE:
        assert resumed.session.optimizer.param_groups[0]["d"] == d  # the estimate came through the resume
    assert Path(first.state_path, "optimizer.pt").is_file()


def test_building_lr_free_optimizers_prints_nothing(capsys):
    p = torch.nn.Parameter(torch.ones(2))
    for name in O.LR_FREE:
        O.build_optimizer(_opt_cfg(name, 1.0), [{"params": [p]}])
    assert capsys.readouterr().out == ""  # the packages' "Using decoupled weight decay" stays out of the CLI
