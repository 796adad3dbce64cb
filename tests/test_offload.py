"""Block offload (engine/offload.py) proven on the CPU with NaN where a weight is away (helpers/offload_poison.py).

A tiny Flux transformer (2 + 2 blocks, hidden 64, peft LoRA) trains a few AdamW steps in fp32 with half or all of
its blocks offloaded: the LoRA comes out bit-identical to the run without offload, while at most two blocks' frozen
weights exist as device copies at any moment (counted through weak references, so copies autograd still holds
count too). Two simpler offloaders show what each part of the schedule is for: one with forward hooks only (as
diffusers' group offloading) keeps every block on the device through the backward pass, or poisons the gradients
once checkpointing recomputes whole blocks; one that offloads at torch's module backward hook leaves Flux's
first block, whose inputs need no gradient, on the device after the backward pass.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from helpers.offload_poison import PoisonTransport
from torch.utils.checkpoint import set_checkpoint_early_stop

from guitrainer.engine import offload
from guitrainer.engine.families.base import Family

CPU = torch.device("cpu")
LORA_TARGETS = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                "proj_mlp", "proj_out"]
L, T = 16, 8  # image and text tokens


def tiny_flux(double: int = 2, single: int = 2) -> torch.nn.Module:
    """FluxTransformer2DModel: hidden 64 (4 heads of 16), peft LoRA rank 4 on attention and MLP layers, frozen base."""
    from diffusers import FluxTransformer2DModel
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(0)
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=16, num_layers=double, num_single_layers=single, attention_head_dim=16,
        num_attention_heads=4, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(4, 6, 6),
    )
    model.requires_grad_(False)
    inject_adapter_in_model(LoraConfig(r=4, lora_alpha=4, target_modules=LORA_TARGETS, init_lora_weights="gaussian"), model)
    for name, p in model.named_parameters():
        if "lora_B" in name:  # a LoRA that already does something: every gradient flows
            torch.nn.init.normal_(p, std=0.05)
    model.enable_gradient_checkpointing()
    model.train()
    return model


def batch(g: torch.Generator) -> dict[str, torch.Tensor | None | bool]:
    return dict(
        hidden_states=torch.randn(1, L, 16, generator=g), encoder_hidden_states=torch.randn(1, T, 32, generator=g),
        pooled_projections=torch.randn(1, 32, generator=g), timestep=torch.rand(1, generator=g),
        img_ids=torch.randn(L, 3, generator=g), txt_ids=torch.randn(T, 3, generator=g), guidance=None,
        return_dict=False,
    )


def train(model: torch.nn.Module, steps: int) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[float]]:
    """``steps`` AdamW steps on fixed random batches: (LoRA weights, first step's LoRA gradients, losses)."""
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    g = torch.Generator().manual_seed(1)
    losses, first = [], {}
    for step in range(steps):
        inp = batch(g)
        target = torch.randn(1, L, 16, generator=g)
        loss = F.mse_loss(model(**inp)[0], target)
        loss.backward()
        if step == 0:
            first = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    return lora, first, losses


def flux_blocks(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """The blocks the family seam offers by default (Flux's double, then single blocks)."""
    return offload.named_block_lists(model, Family.block_lists)


def frozen_bytes(block: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in block.parameters() if not p.requires_grad)


@contextmanager
def early_stop(on: bool) -> Iterator[None]:
    with set_checkpoint_early_stop(on):
        yield


def equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def base_model() -> torch.nn.Module:
    return tiny_flux()


@pytest.fixture(scope="module")
def reference(base_model):
    """The run without offload (checkpointing on, as with offload)."""
    return train(copy.deepcopy(base_model), 4)


@pytest.mark.slow
@pytest.mark.parametrize("share", [0.5, 1.0])
@pytest.mark.parametrize("stop_early", [True, False], ids=["early-stop", "full-recompute"])
def test_offloaded_flux_trains_the_same_lora_bit_for_bit(base_model, reference, share, stop_early):
    torch.set_num_threads(1)
    model = copy.deepcopy(base_model)
    chosen = offload.chosen_blocks(flux_blocks(model), share)
    assert len(chosen) == {0.5: 2, 1.0: 4}[share]  # half: double block 1 and single block 1
    transport = PoisonTransport()
    off = offload.offload(chosen, CPU, transport)
    assert all(torch.isnan(p).all() for b in chosen for p in b.parameters() if not p.requires_grad)  # away
    assert all(p.requires_grad for b in chosen for n, p in b.named_parameters() if "lora_" in n)  # LoRA stays
    with early_stop(stop_early):
        lora, grads, losses = train(model, 4)
    ref_lora, ref_grads, ref_losses = reference
    assert losses == ref_losses
    assert equal(grads, ref_grads)
    assert equal(lora, ref_lora)
    # each step brings every block in for its forward and again for its backward, but the last: it stays
    n = len(chosen)
    assert off.stats.backward_passes == 4 and off.stats.onloads == off.stats.offloads == 4 * (2 * n - 1)
    assert transport.resident() == 0  # nothing left on the "device" between steps


@pytest.mark.slow
def test_at_most_two_blocks_of_frozen_weights_are_on_the_device():
    """8 blocks, all offloaded: the peak of live device copies is the current block and the prefetched one."""
    torch.set_num_threads(1)
    model = tiny_flux(double=4, single=4)
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    sizes = sorted((frozen_bytes(b) for b in blocks), reverse=True)
    transport = PoisonTransport()
    off = offload.offload(blocks, CPU, transport)
    train(model, 2)
    print(f"peak {transport.peak} B of {sum(sizes)} B offloaded (largest block {sizes[0]} B); {off.stats}")
    assert 0 < transport.peak <= sizes[0] + sizes[1]
    assert off.stats.prefetched > off.stats.waited  # copies start ahead of need, not when needed


class ForwardHooksOnly(offload.BlockOffloader):
    """Onload before a block's forward, offload after it, nothing else (diffusers' group offloading's schedule)."""

    def _forward_pre(self, block: offload._Block) -> None:
        self._ensure(block)

    def _forward_post(self, block: offload._Block, output: object) -> None:
        self._offload(block)


class ModuleBackwardHooks(ForwardHooksOnly):
    """Also onload at the block's full backward pre-hook and offload at its full backward hook."""

    def install(self) -> None:
        super().install()
        for block in self._blocks.values():
            block.module.register_full_backward_pre_hook(lambda m, go, b=block: self._ensure(b))
            block.module.register_full_backward_hook(lambda m, gi, go, b=block: self._offload(b))


def offloaded_run(base_model: torch.nn.Module, kind: type[offload.BlockOffloader], stop_early: bool = True):
    model = copy.deepcopy(base_model)
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    transport = PoisonTransport()
    kind(blocks, transport, CPU).install()
    with early_stop(stop_early):
        lora, grads, losses = train(model, 1)
    return grads, transport.peak, sum(frozen_bytes(b) for b in blocks)


@pytest.mark.slow
def test_forward_hooks_alone_keep_every_block_on_the_device(base_model, reference):
    """Checkpointing's early stop ends a recomputation before the block's forward hook: nothing is offloaded in
    the backward pass, so by its end every block is on the device (correct, and no saving)."""
    grads, peak, total = offloaded_run(base_model, ForwardHooksOnly)
    assert equal(grads, reference[1])
    assert peak >= total


@pytest.mark.slow
def test_forward_hooks_alone_poison_the_gradients_when_recomputation_runs_whole(base_model):
    """Without the early stop the forward hook offloads a recomputed block before its backward runs: a norm's
    saved weight is the parameter itself, and its backward then reads NaN."""
    grads, _peak, _total = offloaded_run(base_model, ForwardHooksOnly, stop_early=False)
    assert not all(torch.isfinite(g).all() for g in grads.values())


@pytest.mark.slow
def test_offloading_at_the_module_backward_hook_leaves_flux_first_block_on_the_device(base_model, reference):
    """The first double block's inputs need no gradient (the embedders are frozen): torch calls its full backward
    hook as soon as its output's gradient arrives, before the block's recomputation, which brings it back for
    good. The gradients are right; the block stays on the device after the backward pass (ours leaves none)."""
    model = copy.deepcopy(base_model)
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    transport = PoisonTransport()
    ModuleBackwardHooks(blocks, transport, CPU).install()
    with pytest.warns(UserWarning, match="no inputs require gradients"):
        _lora, grads, _losses = train(model, 1)
    assert equal(grads, reference[1])
    assert transport.resident() == frozen_bytes(model.transformer_blocks[0]) > 0


@pytest.mark.slow
def test_without_checkpointing_offload_is_right_but_frees_nothing(base_model, reference):
    """Why the session refuses offload without gradient checkpointing: autograd keeps every block's weights for
    the backward pass (a Linear saves its weight's transposed view), so all of them stay alive."""
    model = copy.deepcopy(base_model)
    model.disable_gradient_checkpointing()
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    transport = PoisonTransport()
    offload.offload(blocks, CPU, transport)
    _lora, grads, _losses = train(model, 1)
    ref = train(copy.deepcopy(base_model), 1)[1]  # checkpointing changes no value: the same gradients
    assert equal(ref, reference[1]) and equal(grads, ref)
    assert transport.peak >= 0.9 * sum(frozen_bytes(b) for b in blocks)


def test_remove_puts_every_weight_back():
    model = tiny_flux(1, 1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    off = offload.offload(blocks, CPU, PoisonTransport())
    assert off.offloaded_bytes == sum(frozen_bytes(b) for b in blocks) > 0
    off.remove()
    assert equal({n: p.detach() for n, p in model.named_parameters()}, before)
    model(**batch(torch.Generator().manual_seed(0)))  # no hook left to call


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: pinned memory, a side stream and events")
def test_on_cuda_the_streamed_run_equals_the_resident_one_and_needs_less_memory(base_model):
    """The real transport: pinned RAM copies, a side stream, events and record_stream."""
    cuda = torch.device("cuda")
    resident = copy.deepcopy(base_model).to(cuda)
    torch.cuda.reset_peak_memory_stats()
    ref = train(resident, 3)
    ref_peak = torch.cuda.max_memory_allocated()
    del resident
    model = copy.deepcopy(base_model)
    blocks = offload.chosen_blocks(flux_blocks(model), 1.0)
    offload.place(model, cuda, torch.float32, blocks)
    off = offload.offload(blocks, cuda, offload.CudaTransport(cuda))
    assert all(p.is_pinned() for b in blocks for p in b.parameters() if not p.requires_grad)
    torch.cuda.reset_peak_memory_stats()
    got = train(model, 3)
    torch.cuda.synchronize()
    assert got[2] == ref[2] and equal(got[0], ref[0])
    assert torch.cuda.max_memory_allocated() < ref_peak
    assert off.stats.prefetched > 0
