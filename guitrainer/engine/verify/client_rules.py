"""Verify a LoRA of a family whose files name the original model's layers (Flux, SD 3.5): merged by ComfyUI's rules
into a fresh copy of the base model, it must give what was trained (DESIGN §7).

diffusers cannot be the outside reader here: its Flux converter splits a single block's ``linear1`` as 3072-wide
slices (a model of another width loads its double blocks only) and its SD 3 loader reads no kohya name. So the
file is read by :mod:`~guitrainer.engine.verify.comfy_rules` (ComfyUI's key maps and merge, with the family's
table of ComfyUI's, :attr:`~guitrainer.engine.families.base.Family.client_layout`), on the CPU in fp32:

1. every key of the file must be read, and every module must merge;
2. each merged weight's change must equal the reference's delta for that layer — the module that does not is
   named —, and the merged denoiser's (and text encoders') outputs on fixed inputs must match the reference's;
3. every module's alpha must fit the network alpha the file's metadata states (``ss_network_alpha`` with
   ``ss_network_dim``: the alpha itself, as sd-scripts writes, or the same alpha / rank, as a fused module written
   as one LoRA of k x the rank carries k x the alpha), so an edited alpha shows without a trained model.

The reference is the trained model (right after training) or, from the file alone, the network rebuilt from the
file the way Continue from LoRA reads it: a LoRA of the file's rank injected as the trainer would (the narrowest
``network.target_modules`` that takes every module) and filled by the family's ``load_lora_file`` — the family's
own reader, written from its writer's tables; ComfyUI's rules come from ComfyUI's, so the two meet only in the file.

A diffusers-layout file (``transformer.<name>.lora_A.weight``, what ``output.format = "diffusers"`` writes where a
family can) is also loaded by diffusers' own ``load_lora_weights`` on the family's pipeline, which must read every
module and reproduce the reference too.
"""

from __future__ import annotations

import json
import logging
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.engine.families.base import Draw, Family
from guitrainer.engine.models.types import LoadedModel
from guitrainer.engine.network import lora, variants
from guitrainer.engine.network.client_layout import ClientLayout
from guitrainer.engine.verify import comfy_rules
from guitrainer.engine.verify.comfy_rules import DENOISER
from guitrainer.engine.verify.harness import (
    ATOL,
    ROUNDING,
    EvalMode,
    VerifyResult,
    file_dtype,
    fresh_base_model,
    max_diff,
)

log = logging.getLogger(__name__)

#: the caption the denoiser's text conditioning is encoded from (by the base model's own text encoders)
CAPTION = "a photo of a red circle"
#: tokens of the fixed random text-encoder inputs
TEXT_TOKENS = 77
#: (A, B, scale) of one LoRA layer of the reference, by (part, module path)
Factors = dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, float]]


@dataclass
class Inputs:
    """The fixed inputs: one draw of the family's objective, the base's text conditioning, text-encoder token ids."""

    config: TrainingConfig
    draw: Draw
    text: dict[str, torch.Tensor]
    ids: dict[int, torch.Tensor]


@dataclass
class Outputs:
    """A model's outputs on :class:`Inputs`: the denoiser's, and each compared text encoder's (last and
    penultimate hidden states, pooled output where it has one)."""

    denoiser: torch.Tensor
    text: dict[int, list[torch.Tensor]] = field(default_factory=dict)


@dataclass
class Reference:
    """What the merged model is compared with: its outputs and its LoRA layers' factors, or why there is none."""

    name: str  # "trained model", "our loader" or "none"
    outputs: Outputs | None = None
    factors: Factors = field(default_factory=dict)
    dtype: torch.dtype = torch.float32
    why_not: str = ""  # no reference: why
    left_out: list[str] = field(default_factory=list)  # the file's modules the rebuilt network has no layer for


# --------------------------------------------------------------------------- inputs and outputs


def _compute_dtype(module: nn.Module) -> tuple[torch.device, torch.dtype]:
    """Where a module computes and in which dtype (its first floating parameter that is not a storage format)."""
    for p in module.parameters():
        if p.dtype in (torch.float32, torch.bfloat16, torch.float16):
            return p.device, p.dtype
    p = next(module.parameters())
    return p.device, torch.bfloat16


def _on(t: torch.Tensor, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return t.to(device, dtype) if t.is_floating_point() else t.to(device)


def fixed_inputs(family: Family, m: LoadedModel, encoders: Sequence[int], seed: int) -> Inputs:
    """One draw at the family's first validation timestep on random latents, the caption's conditioning, and
    random token ids for ``encoders``: all from ``seed``, the same for every model compared."""
    config = TrainingConfig()
    g = torch.Generator().manual_seed(seed)
    side = 8 * family.facts.patch  # a few tokens per side: every block still runs
    latents = torch.randn(1, family.facts.latent_channels, side, side, generator=g)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        timesteps = family.timestep_tensor(family.validation_timesteps(config, m, 1), torch.device("cpu"))
        draw = family.draw(config, m, latents, timesteps)
    with torch.no_grad():
        text = family.encode_text(m, m.text_encoders, [CAPTION], torch.device("cpu"))
    ids = {}
    for i in encoders:
        te_config = m.text_encoders[i].config
        length = min(TEXT_TOKENS, int(getattr(te_config, "max_position_embeddings", TEXT_TOKENS)))
        ids[i] = torch.randint(0, int(te_config.vocab_size), (1, length), generator=g)
    return Inputs(config, draw, {k: v.detach().float() for k, v in text.items()}, ids)


@torch.no_grad()
def outputs(family: Family, m: LoadedModel, x: Inputs) -> Outputs:
    """``m``'s outputs on ``x``, as fp32 on the CPU (inputs cast to where and how each module computes)."""
    device, dtype = _compute_dtype(m.denoiser)
    d = x.draw
    draw = Draw(_on(d.noise, device, dtype), d.timesteps.to(device), _on(d.noisy, device, dtype), _on(d.target, device, dtype))
    text = {k: _on(v, device, dtype) for k, v in x.text.items()}
    out = Outputs(family.predict(x.config, m.denoiser, m, draw, text, {}).float().cpu())
    for i, ids in x.ids.items():
        encoder = m.text_encoders[i]
        o = encoder(ids.to(_compute_dtype(encoder)[0]), output_hidden_states=True)
        tensors = [o.last_hidden_state, o.hidden_states[-2]]
        for pooled in ("text_embeds", "pooler_output"):
            if getattr(o, pooled, None) is not None:
                tensors.append(getattr(o, pooled))
                break
        out.text[i] = [t.float().cpu() for t in tensors]
    return out


def _text_diff(a: Outputs, b: Outputs) -> float | None:
    if not a.text:
        return None
    return max(max_diff(a.text[i], b.text[i]) for i in a.text)


def _largest(o: Outputs, text: bool = False) -> float:
    values = [t for ts in o.text.values() for t in ts] if text else [o.denoiser]
    return max((float(t.abs().max()) for t in values), default=0.0)


# --------------------------------------------------------------------------- the reference


def _unwrapped(module: nn.Module) -> nn.Module:
    return module.module if isinstance(module, nn.parallel.DistributedDataParallel) else module


def factors_of(model: LoadedModel) -> Factors:
    """(A, B, scale) of every peft LoRA layer of the denoiser and the text encoders, by (part, module path)."""
    found: Factors = {}
    for part, module in ((DENOISER, model.denoiser), *enumerate(model.text_encoders)):
        for path, layer in lora.lora_layers(_unwrapped(module)).items():
            a, b = layer.lora_A[lora.ADAPTER].weight, layer.lora_B[lora.ADAPTER].weight
            found[(part, path.removesuffix(".base_layer"))] = (a.detach(), b.detach(), float(layer.scaling[lora.ADAPTER]))
    return found


def _target_choices() -> tuple[str, ...]:
    """``network.target_modules``' choices, narrowest first."""
    return typing.get_args(typing.get_type_hints(NetworkConfig)["target_modules"])


def _file_rank(sd: Mapping[str, torch.Tensor], meta: Mapping[str, str]) -> int:
    try:
        return int(meta["ss_network_dim"])
    except (KeyError, ValueError):
        return min(int(v.shape[0]) for k, v in sd.items() if k.endswith((".lora_down.weight", ".lora_A.weight")))


def _inject(family: Family, m: LoadedModel, network: NetworkConfig, with_text: bool) -> list[nn.Module]:
    """A LoRA of ``network`` on ``m`` as the trainer injects one; returns the text encoders it trains."""
    lora.inject_lora(m.denoiser, network.rank, network.alpha, 0.0, family.denoiser_targets(network))
    trained = [m.text_encoders[i] for i in family.trainable_text_encoders(m)] if with_text else []
    for te in trained:
        targets = family.text_encoder_targets(m, m.text_encoders.index(te), network)
        if targets:
            lora.inject_text_encoder_lora(te, network.rank, network.alpha, 0.0, targets)
    return trained


def _remove(m: LoadedModel) -> None:
    for module in (m.denoiser, *m.text_encoders):
        variants.remove_adapters(module)


def rebuilt_reference(family: Family, path: Path, sd: Mapping[str, torch.Tensor], meta: Mapping[str, str],
                      m: LoadedModel, x: Inputs) -> Reference:
    """The network rebuilt from the file (see the module docstring): its outputs and factors, or why there is none;
    ``m`` is left plain. Of the ``network.target_modules`` choices the narrowest that takes every module is used;
    failing that, the one that leaves the fewest out (named in ``left_out``)."""
    rank = _file_rank(sd, meta)
    try:
        alpha = float(meta.get("ss_network_alpha") or rank)
    except ValueError:
        alpha = float(rank)
    with_text = any(k.startswith(("lora_te", "text_encoder")) for k in sd)
    best: tuple[list[str], str] | None = None
    failure = ""
    for choice in _target_choices():
        skipped: list[str] = []
        try:
            network = _network(rank, alpha, choice, with_text)
            family.load_lora_file(path, network, m.denoiser, _inject(family, m, network, with_text), skipped)
            if not skipped:
                return _reference_of(family, m, x)
            if best is None or len(skipped) < len(best[0]):
                best = (skipped, choice)
        except (lora.LoraFormatError, ValueError, RuntimeError) as e:
            failure = failure or first_line(e, 240)  # the narrowest choice's: it names the first module that fails
        finally:
            _remove(m)
    if best is None:
        return Reference("none", why_not=failure)
    left_out, choice = best
    network = _network(rank, alpha, choice, with_text)
    try:
        family.load_lora_file(path, network, m.denoiser, _inject(family, m, network, with_text), [])
        found = _reference_of(family, m, x)
    finally:
        _remove(m)
    found.left_out = left_out
    return found


def _network(rank: int, alpha: float, choice: str, with_text: bool) -> NetworkConfig:
    return NetworkConfig(rank=rank, alpha=alpha, target_modules=choice, train_text_encoder=with_text)  # type: ignore[arg-type]


def _reference_of(family: Family, m: LoadedModel, x: Inputs) -> Reference:
    """``m``'s outputs and a copy of its LoRA factors (``m``'s adapters are removed next)."""
    factors = {k: (a.clone(), b.clone(), s) for k, (a, b, s) in factors_of(m).items()}
    return Reference("our loader", outputs(family, m, x), factors)


def trained_reference(family: Family, reference: LoadedModel, x: Inputs) -> Reference:
    with EvalMode([reference.denoiser, *reference.text_encoders]):
        out = outputs(family, reference, x)
    return Reference("trained model", out, factors_of(reference), _compute_dtype(reference.denoiser)[1])


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class Mismatch:
    """A layer whose merged change is not the reference's delta."""

    module: str  # our module path; a text encoder's with its number ("text encoder 1: …")
    sources: tuple[str, ...]  # the file's modules that patched it (empty: none did)
    off_by: float

    def words(self) -> str:
        where = f"{self.sources[0]} ({self.module})" if self.sources else f"{self.module} (no key of the file patches it)"
        return f"{where}: off by {self.off_by:.2g}"


def _module_name(part: int, module: str) -> str:
    return module if part == DENOISER else f"text encoder {part + 1}: {module}"


def merge_and_compare(m: LoadedModel, layout: ClientLayout, sd: Mapping[str, torch.Tensor], reference: Reference,
                      rel: float) -> tuple[comfy_rules.Loaded, dict[str, str], list[Mismatch]]:
    """Merge the file into ``m`` by ComfyUI's rules, each change checked against the reference's delta.

    Returns what was read, the modules that could not be merged (name -> why) and the layers whose change is not
    the reference's (``rel``: the file's rounding, relative to a delta).
    """
    table = layout.denoiser(m.denoiser)
    params = {DENOISER: dict(m.denoiser.named_parameters())}
    params |= {i: dict(te.named_parameters()) for i, te in enumerate(m.text_encoders)}
    key_map = comfy_rules.denoiser_key_map(layout, table, params[DENOISER])
    key_map |= comfy_rules.text_encoder_key_map(layout.text_encoders, m.text_encoders)
    loaded = comfy_rules.load_lora(sd, key_map)
    shapes = {part: {k: p.shape for k, p in ps.items()} for part, ps in params.items()}
    not_merged: dict[str, str] = {}
    mismatches: list[Mismatch] = []
    compared: set[tuple[int, str]] = set()
    with torch.no_grad():
        for change in comfy_rules.changes(loaded, table, shapes, not_merged):
            module = change.param.removesuffix(".weight")
            compared.add((change.part, module))
            mismatches += _compare(reference, change.part, module, change.delta, change.sources, rel)
            p = params[change.part][change.param]
            p.add_(change.delta.to(p.dtype))
        if reference.outputs is not None:
            for part, module in reference.factors:
                if (part, module) not in compared:
                    mismatches += _compare(reference, part, module, None, (), rel)
    return loaded, not_merged, mismatches


def _compare(reference: Reference, part: int, module: str, delta: torch.Tensor | None, sources: tuple[str, ...],
             rel: float) -> list[Mismatch]:
    """The merged change of one layer against the reference's delta (none: zero), as a list of 0 or 1 mismatch."""
    if reference.outputs is None:
        return []
    found = reference.factors.get((part, module))
    want = None
    if found is not None:
        a, b, scale = found
        want = (b.float() @ a.float()).cpu() * scale
    if delta is None and want is None:
        return []
    if delta is None:
        delta = torch.zeros_like(want)
    if want is None:
        want = torch.zeros_like(delta)
    if delta.shape != want.shape:
        return [Mismatch(_module_name(part, module), sources, float("inf"))]
    largest = float(want.abs().max())
    off = float((delta - want).abs().max())
    return [] if off <= ATOL * max(1.0, largest) + rel * largest else [Mismatch(_module_name(part, module), sources, off)]


def alpha_mismatches(loaded: comfy_rules.Loaded, meta: Mapping[str, str]) -> tuple[list[str], str]:
    """Modules whose alpha fits neither the metadata's network alpha nor its alpha / rank, and that in words; ([], "")
    when the metadata says nothing to compare with (or sets per-block alphas)."""
    try:
        alpha, rank = float(meta["ss_network_alpha"]), int(meta["ss_network_dim"])
        args = json.loads(meta.get("ss_network_args") or "{}")
    except (KeyError, ValueError, TypeError):
        return [], ""
    if isinstance(args, dict) and any(k in args for k in ("block_alphas", "conv_block_alphas")):
        return [], ""
    odd = []
    for patch in loaded.patches.values():
        if patch.alpha is None:
            continue
        same = abs(patch.alpha - alpha) <= 1e-2 * max(1.0, abs(alpha))
        same_scale = abs(patch.alpha / patch.down.shape[0] - alpha / rank) <= 1e-2 * abs(alpha / rank)
        if not (same or same_scale):
            odd.append(f"{patch.name} (alpha {patch.alpha:g}, rank {patch.down.shape[0]})")
    return sorted(odd), f"ss_network_alpha = {alpha:g} at ss_network_dim = {rank}"


# --------------------------------------------------------------------------- diffusers' own loader


def _modules_with_lora(pipe: Any) -> set[str]:
    """``<component>.<module path>`` of every layer a loader gave a LoRA (any adapter name)."""
    found = set()
    for component, module in pipe.components.items():
        if isinstance(module, nn.Module):
            for path, layer in module.named_modules():
                a = getattr(layer, "lora_A", None)
                if isinstance(a, nn.ModuleDict) and len(a) > 0:
                    found.add(f"{component}.{path}")
    return found


def _as_component(module: str) -> str:
    """A file's module name as the pipeline's component path: ``diffusion_model.`` (ComfyUI's and ai-toolkit's
    spelling of the denoiser, which diffusers' converters read as the transformer) is ``transformer.``."""
    return "transformer." + module[len("diffusion_model."):] if module.startswith("diffusion_model.") else module


def diffusers_check(family: Family, m: LoadedModel, weights: Path, sd: Mapping[str, torch.Tensor],
                    x: Inputs) -> tuple[Outputs | None, list[str], str]:
    """diffusers' ``load_lora_weights`` on the family's pipeline of ``m``: (its outputs, the file's modules it left
    out, "") or (None, [], why it refused); ``m`` is left plain."""
    pipe = family.pipeline(m)
    try:
        pipe.load_lora_weights(str(weights))
    except Exception as e:  # noqa: BLE001 - any refusal by diffusers is the answer
        return None, [], first_line(e, 200)
    try:
        loaded = _modules_with_lora(pipe)
        modules = sorted({k.rsplit(".lora_", 1)[0] for k in sd if ".lora_" in k})
        return outputs(family, m, x), [n for n in modules if _as_component(n) not in loaded], ""
    finally:
        pipe.unload_lora_weights()


# --------------------------------------------------------------------------- the verdict


def file_layout(sd: Mapping[str, torch.Tensor]) -> str:
    """"diffusers" for PEFT-named tensors (``….lora_A.weight``), else "kohya"."""
    has_peft = any(k.endswith((".lora_A.weight", ".lora_B.weight")) for k in sd)
    return "diffusers" if has_peft and not any(".lora_down" in k for k in sd) else "kohya"


def verify_by_client_rules(
    path: str | Path, base: Any, family: Family, reference: LoadedModel | None = None, *, seed: int = 0
) -> VerifyResult:
    """Verify ``path`` for a family with a :attr:`~guitrainer.engine.families.base.Family.client_layout` (see the
    module docstring); arguments as :func:`guitrainer.engine.verify.verify_lora`."""
    layout = family.client_layout
    if layout is None:
        raise ValueError(f"{family.facts.label} files are verified through diffusers, not by the clients' rules")
    weights = lora.lora_weights_file(path)
    try:
        sd, meta = lora.read_lora(weights)
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise lora.LoraFormatError(f"{path}: not a readable .safetensors LoRA ({first_line(e, 200)})") from e
    precision, kind = file_dtype(sd), file_layout(sd)
    m = fresh_base_model(base)
    # the text encoders compared: those the file patches, and those the trained model has a LoRA on
    probe = comfy_rules.load_lora(sd, comfy_rules.text_encoder_key_map(layout.text_encoders, m.text_encoders))
    trained_parts = {part for part, _ in factors_of(reference)} if reference is not None else set()
    encoders = sorted(({t.part for t in probe.patches} | trained_parts) - {DENOISER})
    x = fixed_inputs(family, m, encoders, seed)
    base_out = outputs(family, m, x)
    ref = trained_reference(family, reference, x) if reference is not None else rebuilt_reference(
        family, Path(weights), sd, meta, m, x)
    theirs = diffusers_check(family, m, weights, sd, x) if kind == "diffusers" else None
    rel = ROUNDING.get(precision, 0.0) if ref.name == "trained model" else 0.0  # else both read the same numbers
    loaded, not_merged, mismatches = merge_and_compare(m, layout, sd, ref, rel)
    merged = outputs(family, m, x)
    odd_alphas, said = alpha_mismatches(loaded, meta)
    effect = float((merged.denoiser - base_out.denoiser).abs().max())
    te_effect = _text_diff(merged, base_out)
    verdict = Verdict(layout, kind, precision, rel, ref, loaded, not_merged, mismatches, odd_alphas, said, effect,
                      te_effect or 0.0)
    result = verdict.result(merged, theirs, len(sd))
    log.info("verify %s: %s", path, result.message)
    return result


def _count(n: int, singular: str, plural: str = "") -> str:
    """"1 module", "3 modules" (``plural`` where adding an s does not make it)."""
    return f"{n} {singular if n == 1 else plural or singular + 's'}"


def _within(diff: float) -> str:
    return f"within {diff:.1g}" if diff > 0 else "exactly"


@dataclass
class Verdict:
    """Everything :func:`verify_by_client_rules` found, turned into a :class:`VerifyResult` in plain words."""

    layout: ClientLayout
    kind: str  # the file's layout: "kohya" or "diffusers"
    precision: str
    rel: float  # the file's rounding relative to a change (0 against the network read from the same file)
    reference: Reference
    loaded: comfy_rules.Loaded
    not_merged: dict[str, str]
    mismatches: list[Mismatch]
    odd_alphas: list[str]
    alphas_said: str
    effect: float
    te_effect: float

    def _tolerance(self, out: Outputs, rel: float, text: bool = False) -> float:
        """ATOL relative to the output, plus the file's rounding of the change and the reference's compute rounding."""
        largest = _largest(out, text)
        change = self.te_effect if text else self.effect
        compute = {torch.bfloat16: ROUNDING["bf16"], torch.float16: ROUNDING["fp16"]}.get(self.reference.dtype, 0.0)
        return ATOL * max(1.0, largest) + rel * change + compute * largest

    def result(self, merged: Outputs, theirs: tuple[Outputs | None, list[str], str] | None, keys: int) -> VerifyResult:
        ref, rel = self.reference, self.rel
        notes: list[str] = []
        problems = bool(self.loaded.not_loaded or self.not_merged or self.mismatches or self.odd_alphas)
        diff_out, diff_te, tol = float("inf"), None, 0.0
        close = False
        if ref.outputs is not None:
            diff_out = float((merged.denoiser - ref.outputs.denoiser).abs().max())
            diff_te = _text_diff(merged, ref.outputs)
            tol = self._tolerance(ref.outputs, rel)
            close = diff_out <= tol and (diff_te is None or diff_te <= self._tolerance(ref.outputs, rel, text=True))
        finite = bool(torch.isfinite(merged.denoiser).all())
        notes.append(self._head(close, diff_out, diff_te, tol, finite))
        if ref.outputs is None:
            notes.append(f"Not compared with the network as trained: guitrainer cannot rebuild it from this file "
                         f"({ref.why_not}).")
        if ref.left_out:
            notes.append(f"The network rebuilt from the file leaves {_count(len(ref.left_out), 'module')} out "
                         f"(e.g. {ref.left_out[0]}): no network guitrainer trains has those layers.")
        if self.odd_alphas:
            notes.append(f"{_count(len(self.odd_alphas), 'module has', 'modules have')} another alpha than the file's "
                         f"metadata states ({self.alphas_said}), e.g. {self.odd_alphas[0]}: the clients apply "
                         f"{'it' if len(self.odd_alphas) == 1 else 'them'} at another strength than the network was "
                         "trained with.")
        diffusers_ok = True
        if theirs is not None:
            text, diffusers_ok = self._diffusers_words(theirs, ref, rel)
            notes.append(text)
        notes.append(self.layout.readers.get(self.kind, ""))
        ok = not problems and close and finite and self.effect > 0 and diffusers_ok and not ref.left_out
        return VerifyResult(diff_out, diff_te, keys, tuple(self.loaded.not_loaded), ok,
                            " ".join(n for n in notes if n), self.effect, self.te_effect, tol, ref.name, self.precision)

    def _head(self, close: bool, diff: float, diff_te: float | None, tol: float, finite: bool) -> str:
        ref = self.reference
        against = {"trained model": "the trained model", "our loader": "the network rebuilt from the file"}.get(ref.name)
        parts = []
        if self.loaded.not_loaded:
            parts.append(f"{_count(len(self.loaded.not_loaded), 'key is', 'keys are')} not read by ComfyUI's rules "
                         f"(e.g. {self.loaded.not_loaded[0]})")
        else:
            parts.append("ComfyUI's rules read every key")
        if self.not_merged:
            name, why = next(iter(sorted(self.not_merged.items())))
            parts.append(f"{_count(len(self.not_merged), 'module')} cannot be merged (e.g. {name}: {why})")
        if against is not None:
            if self.mismatches:
                worst = max(self.mismatches, key=lambda mm: mm.off_by)
                parts.append(f"{_count(len(self.mismatches), 'layer merges', 'layers merge')} to another weight "
                             f"than {against}'s (e.g. {worst.words()})")
            else:
                parts.append(f"each merged weight equals {against}'s")
            worst_diff = max(diff, diff_te or 0.0)
            parts.append(f"the merged model's outputs {'match' if close else 'differ from'} {against} "
                         + (_within(worst_diff) if close else f"by up to {worst_diff:.3g} (allowed {tol:.1g})"))
        if not finite:
            parts.append("the merged model gives non-finite outputs")
        if self.effect == 0:
            parts.append("the file does not change the denoiser's output")
        checked = ("Checked by guitrainer's reader of ComfyUI's rules (comfy/lora.py, comfy/weight_adapter/lora.py, "
                   "comfy/utils.py), what ComfyUI and Forge apply")
        return f"{checked}: " + "; ".join(parts) + "."

    def _diffusers_words(self, theirs: tuple[Outputs | None, list[str], str], ref: Reference, rel: float) -> tuple[str, bool]:
        """What diffusers' own loader made of a diffusers-layout file, and whether that passes."""
        out, left_out, why = theirs
        if out is None:
            return f"diffusers' load_lora_weights refuses it ({why}).", False
        if left_out:
            words = [f"diffusers' load_lora_weights leaves {_count(len(left_out), 'module')} of the file out "
                     f"(e.g. {left_out[0]})"]
        else:
            words = ["diffusers' load_lora_weights reads every module"]
        ok = not left_out
        if ref.outputs is not None:
            diff = float((out.denoiser - ref.outputs.denoiser).abs().max())
            diff_te = _text_diff(out, ref.outputs)
            close = diff <= self._tolerance(ref.outputs, rel) and (
                diff_te is None or diff_te <= self._tolerance(ref.outputs, rel, text=True))
            worst = max(diff, diff_te or 0.0)
            against = "the trained model" if ref.name == "trained model" else "the network rebuilt from the file"
            words.append(f"its outputs {'match' if close else 'differ from'} {against} "
                         + (_within(worst) if close else f"by up to {worst:.3g}"))
            ok = ok and close
        return "; ".join(words) + ".", ok
