"""Writing a trained LoRA: metadata, the fp16 range check, and the export itself.

Importing this module does not load torch (the Output page reads its constants while the window
opens); the functions that touch tensors import it when called. Where a run's LoRAs go (one label on
all of a run's files) is :mod:`guitrainer.core.runs.names`'.

Formats (DESIGN §5):

* ``kohya``: ``<folder>/<name>.safetensors`` with ``lora_unet_*`` / ``lora_te_*`` keys and the real alpha, in the
  family's layout (:meth:`~guitrainer.engine.families.base.Family.kohya_state_dict`; Flux.1 and SD 3.5: ComfyUI,
  Forge and sd-scripts read those, diffusers Flux.1's but not SD 3.5's). Who reads
  which type as trained (:mod:`guitrainer.core.model.variant_readers`; README, "Which program reads which file"):

  - LoRA, LoCon: ComfyUI, Forge, A1111, diffusers, kohya sd-scripts, LyCORIS.
  - LoHa: ComfyUI, Forge; A1111 too, but it computes LoHa in the file's dtype, so save LoHa as fp32 for it
    (an export in fp16 or bf16 says so in its warnings); LyCORIS through its forward (its ``merge_to``
    multiplies by alpha / rank twice). diffusers refuses it; kohya's ``networks.lora`` builds nothing from it.
  - LoKr: ComfyUI, Forge; A1111 as for LoHa; LyCORIS where its factor guess finds each module's split (a
    non-default ``network.lokr_factor`` is recorded in ``ss_network_args`` as ``factor``). diffusers refuses
    it; ``networks.lora`` builds nothing from it.
  - DoRA, ``network.dora_layout`` "column" (dora_scale [1, in]): ComfyUI, Forge, A1111; LyCORIS' loader stops on it.
    "row" ([out, 1]): LyCORIS; ComfyUI and Forge read it normalised by the base weight's rows (not as
    trained), A1111 misreads it. diffusers and ``networks.lora`` drop dora_scale either way (a plain LoRA).
* ``diffusers``: ``<folder>/<name>/pytorch_lora_weights.safetensors`` in the family's diffusers layout
  (:meth:`~guitrainer.engine.families.base.Family.diffusers_lora`: for SD 1.5 / SDXL peft keys
  ``unet.<module>.lora_A.weight`` and diffusers' ``lora_adapter_metadata``, as ``StableDiffusionPipeline.save_lora_weights``
  writes them; for SD 3.5 ``transformer.<module>.lora_A.weight``, α/r baked in); ``pipe.load_lora_weights(<folder>/<name>)``
  reads it. A family writes the formats its facts list (``lora_formats``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from guitrainer.base.constants import FP16_MAX
from guitrainer.base.fileio import atomic_write_with
from guitrainer.core.model.lora_format import DIFFUSERS_WEIGHT_NAME
from guitrainer.core.model.variant_readers import save_precision_note
from guitrainer.core.precision.numerics import SaveReport, TensorFinding

if TYPE_CHECKING:
    import torch
    from torch import nn

    from guitrainer.core.precision.advice import Advice

log = logging.getLogger(__name__)

#: fp16's smallest subnormal is 2**-24; anything below half of it rounds to zero
FP16_TINY = 2.0**-25
#: a tensor is reported when more than this fraction of its non-zero values would become zero in fp16
UNDERFLOW_FRACTION = 1e-3
#: the trainer's warning about an fp16 save starts with this, so the Output page can pick it out of the log
FP16_WARNING_TAG = "[fp16 save]"
#: the Demo LoRA's description: it fits only the app's tiny built-in model
DEMO_NOTE = (
    "A demo LoRA of guitrainer's tiny built-in model, made to check that training works. "
    "It is not a Stable Diffusion LoRA: ComfyUI, A1111, Forge and diffusers pipelines of real models will not load it."
)

Fp16Overflow = Literal["bf16", "fp32", "write", "raise"]


# --------------------------------------------------------------------------- fp16 range check


@dataclass(frozen=True)
class Fp16Report:
    """What casting a state dict to fp16 would break, by tensor name.

    Attributes:
        overflow: name -> largest absolute value, for tensors with values beyond ±65504 (they become inf).
        underflow: name -> fraction of the tensor's non-zero values that would become 0.
    """

    overflow: dict[str, float] = field(default_factory=dict)
    underflow: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.overflow and not self.underflow

    def advice(self) -> Advice | None:
        """The Output page's advice (save as bf16 or fp32) when something overflows; None otherwise."""
        from guitrainer.core.precision.advisor import save_overflow_advice

        return save_overflow_advice(self.overflow)

    def message(self) -> str:
        """Plain words for a log line; empty when fp16 keeps everything."""
        parts = []
        adv = self.advice()
        if adv is not None:
            parts.append(adv.message)
        if self.underflow:
            names = sorted(self.underflow, key=self.underflow.get, reverse=True)  # type: ignore[arg-type]
            worst = self.underflow[names[0]]
            parts.append(
                f"{len(names)} tensor{'s lose' if len(names) != 1 else ' loses'} small values to zero in fp16 "
                f"(up to {worst:.1%} of {names[0]}); bf16 or fp32 keep them."
            )
        return " ".join(parts)


class Fp16OverflowError(ValueError):
    """An fp16 save was refused because values exceed ±65504 (``on_fp16_overflow="raise"``)."""

    def __init__(self, report: Fp16Report):
        super().__init__(report.message())
        self.report = report


def check_fp16(state_dict: Mapping[str, torch.Tensor], *, underflow_fraction: float = UNDERFLOW_FRACTION) -> Fp16Report:
    """Find the tensors fp16 cannot hold: values beyond ±65504, or more than ``underflow_fraction`` of a
    tensor's non-zero values flushed to zero. Run it BEFORE writing; nothing is cast in place."""
    from guitrainer.engine.numerics import fp16_findings

    return _fp16_report(fp16_findings(state_dict), underflow_fraction)


def _fp16_report(findings: Sequence[TensorFinding], underflow_fraction: float = UNDERFLOW_FRACTION) -> Fp16Report:
    """The overflow / underflow summary of the per-tensor counts of :func:`guitrainer.engine.numerics.fp16_findings`."""
    overflow = {t.name: t.peak for t in findings if t.over_max}
    underflow = {t.name: t.zero_share for t in findings if t.zero_share > underflow_fraction}
    return Fp16Report(overflow, underflow)


# --------------------------------------------------------------------------- metadata


def _unix(t: float | datetime | None) -> float:
    if t is None:
        return datetime.now(UTC).timestamp()
    return t.timestamp() if isinstance(t, datetime) else float(t)


def build_metadata(
    config: Any,
    family: str,
    *,
    num_images: int,
    epochs: int,
    steps: int,
    started: float | datetime | None,
    finished: float | datetime | None,
    tag_frequency: Mapping[str, Mapping[str, int]],
    optimizer_name: str,
    epoch: int | None = None,
    num_reg_images: int = 0,
) -> dict[str, str]:
    """kohya ``ss_*`` and ``modelspec.*`` metadata (every value a string) for a LoRA trained with ``config``.

    Args:
        config: the :class:`guitrainer.config.TrainingConfig` of the run.
        family: "demo", "sd15" or "sdxl". A demo LoRA says so (``ss_base_model_version`` "guitrainer_demo",
            its description :data:`DEMO_NOTE`): no real client can use it, though its keys are SD 1.x-shaped.
        num_images: training images (kohya counts images x repeats).
        epochs: epochs of the run (``ss_num_epochs``); ``epoch`` is the one just finished (default ``epochs``).
        steps: optimizer steps done so far.
        started, finished: unix times (or datetimes) the run started and this file was written.
        tag_frequency: ``{folder name: {tag: count}}`` as kohya writes it.
        optimizer_name: the optimizer really used (after any fallback).
        num_reg_images: regularization (class) images, with repeats (``ss_num_reg_images``).
    """
    from guitrainer.engine.families import (
        registry,  # torch: not at import (the Output page imports this module)
    )

    fam = registry.family(family)
    n, o, res = config.network, config.output, int(config.dataset.resolution)
    done = _unix(finished)
    meta: dict[str, Any] = {
        "ss_network_module": "networks.lora",
        "ss_network_dim": n.rank,
        "ss_network_alpha": f"{float(n.alpha):g}",
        "ss_network_dropout": f"{float(n.dropout):g}",
        "ss_sd_model_name": Path(str(config.model.base)).name or str(config.model.base),
        "ss_vae_name": _vae_name(getattr(config.model, "vae", "")),
        "ss_mixed_precision": config.precision.training,
        "ss_save_precision": config.precision.save,
        # the frozen weights' storage: sd-scripts' key for fp8; it has none for int8 / nf4, so ours names the format
        "ss_fp8_base": str(config.precision.base_weights == "fp8"),
        "guitrainer_base_weights": config.precision.base_weights,
        "ss_resolution": f"({res}, {res})",
        "ss_num_train_images": num_images,
        "ss_num_reg_images": num_reg_images,
        "ss_prior_loss_weight": f"{float(config.dataset.prior_loss_weight):g}" if num_reg_images else "",
        "ss_num_epochs": epochs,
        "ss_epoch": epoch if epoch is not None else epochs,
        "ss_steps": steps,
        "ss_max_train_steps": config.schedule.max_steps if config.schedule.max_steps > 0 else "",
        "ss_batch_size_per_device": config.schedule.batch_size,
        "ss_gradient_accumulation_steps": config.schedule.gradient_accumulation,
        "ss_seed": config.schedule.seed,
        "ss_learning_rate": f"{config.optimizer.lr:g}",
        "ss_unet_lr": f"{config.optimizer.lr:g}",
        "ss_text_encoder_lr": f"{config.optimizer.text_encoder_lr:g}" if n.train_text_encoder else "0",
        "ss_lr_scheduler": config.schedule.lr_scheduler,
        "ss_optimizer": optimizer_name,
        "ss_tag_frequency": json.dumps({k: dict(v) for k, v in tag_frequency.items()}, ensure_ascii=False),
        "ss_training_started_at": f"{_unix(started):.6f}",
        "ss_training_finished_at": f"{done:.6f}",
        "ss_output_name": o.name,
        "modelspec.sai_model_spec": "1.0.0",
        "modelspec.title": o.title or o.name,
        "modelspec.date": datetime.fromtimestamp(done, UTC).replace(microsecond=0).isoformat(),
        "modelspec.resolution": f"{res}x{res}",
    }
    from guitrainer.engine.recipes import recipe_metadata

    meta.update(recipe_metadata(config))  # loss, noise, warm-up and validation settings, sd-scripts' names
    meta.update(fam.metadata(config, None))  # ss_base_model_version, modelspec.architecture, the family's settings
    meta.update(_user_modelspec(o, demo=fam.name == "demo"))
    return {k: str(v) for k, v in meta.items() if str(v) != ""}


def _vae_name(vae: str) -> str:
    """kohya's ``ss_vae_name``: the VAE's file or folder name (a hub id's name, also for its snapshot in the hub
    cache, whose folder is named by a commit); "" (left out) for the base's own."""
    text = str(vae).strip().rstrip("/\\")
    if not text:
        return ""
    p = Path(text)
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--"):
        return p.parent.parent.name.split("--")[-1]
    return p.name


def _user_modelspec(output: Any, *, demo: bool) -> dict[str, str]:
    """The ``modelspec.*`` fields the user typed on the Output page; a demo LoRA's description says what it is."""
    meta = {
        key: str(value).strip()
        for key, value in (
            ("modelspec.author", output.author),
            ("modelspec.description", output.description),
            ("modelspec.trigger_phrase", output.trigger_words),
            ("modelspec.license", output.license),
        )
        if str(value).strip()
    }
    if demo:
        meta["modelspec.description"] = " ".join((DEMO_NOTE, meta.get("modelspec.description", ""))).strip()
    return meta


def tag_frequency(items: Sequence[Any]) -> dict[str, dict[str, int]]:
    """``{folder name: {tag: count}}`` from items with ``.image`` (a path) and ``.caption`` (comma-separated tags)."""
    out: dict[str, dict[str, int]] = {}
    for it in items:
        folder = out.setdefault(Path(it.image).parent.name or "dataset", {})
        for tag in (t.strip() for t in str(it.caption).split(",")):
            if tag:
                folder[tag] = folder.get(tag, 0) + 1
    return out


# --------------------------------------------------------------------------- file names


def saved_item(path: str | Path, fmt: str) -> Path:
    """What the user sees as "the LoRA": the file (kohya) or its folder (diffusers).

    Where a run's LoRAs go is :class:`guitrainer.core.runs.names.RunFiles`'s: one label on all of a run's files.
    """
    p = Path(path)
    return p.parent if fmt == "diffusers" and p.name == DIFFUSERS_WEIGHT_NAME else p


# --------------------------------------------------------------------------- casting and writing


def cast_for_save(
    state_dict: Mapping[str, torch.Tensor], save_precision: str, *, check: bool = True
) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Cast to the save dtype; returns the tensors and warnings (fp16: values beyond ±65504 saturate to inf).

    The check (:func:`check_fp16`, the one fp16 range check) runs on the un-cast tensors.
    """
    import torch

    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[save_precision]
    warnings: list[str] = []
    if dtype == torch.float16 and check:
        report = check_fp16(state_dict)
        warnings += [f"{k} holds values beyond fp16's ±{FP16_MAX:g}; save as bf16 or fp32 instead" for k in report.overflow]
    out = {k: v.detach().to("cpu", dtype).contiguous() for k, v in state_dict.items()}
    return out, warnings


def save_lora(
    path: str | Path,
    state_dict: Mapping[str, torch.Tensor],
    metadata: Mapping[str, str],
    save_precision: str,
    *,
    check: bool = True,
) -> list[str]:
    """Write a .safetensors LoRA atomically (temp file, fsync, rename), cast to ``save_precision``. Returns warnings.

    Raises :class:`~guitrainer.base.fileio.WriteError` (full disk, no permission) with the previous file intact.
    """
    from safetensors.torch import save_file

    tensors, warnings = cast_for_save(state_dict, save_precision, check=check)
    meta = {str(k): str(v) for k, v in metadata.items()}
    meta.setdefault("ss_save_precision", save_precision)
    atomic_write_with(path, lambda tmp: save_file(tensors, str(tmp), metadata=meta))
    for w in warnings:
        log.warning(w)
    return warnings


# --------------------------------------------------------------------------- export


@dataclass(frozen=True)
class ExportResult:
    """A written LoRA: where, in which precision (may differ from the one asked after an fp16 overflow), and findings."""

    path: str
    save_precision: str
    fp16: Fp16Report | None = None
    warnings: tuple[str, ...] = ()
    save_report: SaveReport | None = None  # per tensor: values over 65,504, to zero, subnormal; the choice made


def export_lora(
    path: str | Path,
    unet: nn.Module,
    text_encoders: Sequence[nn.Module] = (),
    *,
    fmt: str = "kohya",
    save_precision: str = "fp16",
    alpha: float | None = None,
    metadata: Mapping[str, str] | None = None,
    on_fp16_overflow: Fp16Overflow = "bf16",
    family: str = "sd15",
) -> ExportResult:
    """Write the peft LoRA of ``unet`` (the denoiser, and trained ``text_encoders``) atomically in ``fmt`` and
    ``save_precision``; ``family`` (the model's) decides the kohya layout's names.

    The fp16 check runs before anything is written. With values beyond ±65504, ``on_fp16_overflow`` decides:
    "bf16"/"fp32" write that precision instead (and say so), "write" writes fp16 anyway (infinities),
    "raise" raises :class:`Fp16OverflowError` and writes nothing. A failed write raises
    :class:`~guitrainer.base.fileio.WriteError` and leaves any previous file intact.
    """
    from guitrainer.engine.families import registry
    from guitrainer.engine.network import lycoris_keys

    fam = registry.family(family)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if lycoris_keys.has_variant(unet, text_encoders):  # LoCon, LoHa, LoKr, DoRA: kohya/LyCORIS keys only
        if fmt != "kohya":
            raise ValueError("LoCon, LoHa, LoKr and DoRA networks are saved in kohya's format only (`output.format`)")
        sd = lycoris_keys.variant_state_dict(unet, text_encoders)
        meta.update(lycoris_keys.network_metadata(unet, text_encoders))
    elif fmt not in ("kohya", "diffusers"):
        raise ValueError(f"`output.format` must be 'kohya' or 'diffusers', not {fmt!r}")
    elif fmt not in fam.facts.lora_formats:
        raise ValueError(f"{fam.facts.label} LoRAs are saved in {' or '.join(fam.facts.lora_formats)} format only "
                         f"(`output.format`), not {fmt}")
    elif fmt == "diffusers":
        sd, extra = fam.diffusers_lora(unet, text_encoders, alpha)
        meta.update(extra)
    else:
        sd = fam.kohya_state_dict(unet, text_encoders, alpha)
    if not sd:
        raise ValueError("the model has no LoRA layers to save")
    report: Fp16Report | None = None
    warnings: list[str] = []
    used = save_precision
    findings: tuple[TensorFinding, ...] = ()
    if save_precision == "fp16":
        from guitrainer.engine.numerics import fp16_findings

        findings = fp16_findings(sd)  # one pass: the decision below and the Output page's numbers
        report = _fp16_report(findings)
        if report.overflow:
            if on_fp16_overflow == "raise":
                raise Fp16OverflowError(report)
            if on_fp16_overflow in ("bf16", "fp32"):
                used = on_fp16_overflow
                warnings.append(f"{FP16_WARNING_TAG} {report.message()} This file was saved as {used} instead.")
            else:
                warnings.append(f"{FP16_WARNING_TAG} {report.message()} It was saved as fp16 anyway.")
        elif report.underflow:
            warnings.append(f"{FP16_WARNING_TAG} {report.message()}")
    kind = meta.get("ss_network_args", "") and json.loads(meta["ss_network_args"]).get("algo", "")
    note = save_precision_note(str(kind), used)
    if note:  # LoHa / LoKr in half precision: A1111 computes them in the file's dtype
        warnings.append(note)
    meta["ss_save_precision"] = used
    save_lora(path, sd, meta, used, check=False)
    for w in warnings:  # the caller reports them (the trainer: its feedback, which logs them once)
        log.debug(w)
    numbers = SaveReport(str(path), save_precision, used, findings, checked=save_precision == "fp16")
    return ExportResult(str(path), used, report, tuple(warnings), numbers)
