"""What every transformer family's loader does the same way with the files users keep: read a shipped config, build
a part on ``meta`` and assign its tensors (cast as they are read), turn tensors into the header table the torch-free
detectors read, read one file of a split install, and load a split install checked by the family's own rules.

A family's ``loading`` module keeps what is its own — which parts it has, how each is built, where its tokenizer is —
and calls these."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.base.errors import first_line
from guitrainer.core.families.facts import NamedTensors, PartsReport
from guitrainer.engine.models.state_dicts import in_dtype
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity

#: ``states`` (each part's tensors, prefixes removed), the files near which a tokenizer may lie, and the model's
#: path / identity / source -> the LoadedModel
BuildAll = Callable[..., LoadedModel]


def read_config(config_dir: Path, part: str) -> dict[str, Any]:
    """``config_dir/<part>/config.json`` (``scheduler_config.json`` for the scheduler); ModelLoadError naming it."""
    path = config_dir / part / ("scheduler_config.json" if part == "scheduler" else "config.json")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ModelLoadError(f"the model config folder {config_dir} is incomplete: {path.name} of {part}/ cannot be "
                             f"read ({first_line(e)}); reinstall the app") from e


def assign(module: nn.Module, state: Mapping[str, torch.Tensor], part: str, dtype: torch.dtype) -> None:
    """``state`` into ``module`` (built on meta) by assignment, each tensor cast to ``dtype`` on the way (never a
    whole part in fp32 first); ModelLoadError naming the part on any mismatch."""
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        detail = (f"missing {missing[:3]}" if missing else f"unexpected {unexpected[:3]}" if unexpected
                  else f"{wrong[0]} is {tuple(state[wrong[0]].shape)}, the architecture has {tuple(expected[wrong[0]].shape)}")
        raise ModelLoadError(f"{part} does not match its architecture ({detail})")
    module.load_state_dict(in_dtype(state, dtype), strict=True, assign=True)


def headers(state: Mapping[str, torch.Tensor]) -> dict[str, dict[str, list[int]]]:
    """A state dict as the torch-free detectors read a safetensors header: name -> {"shape": …}."""
    return {k: {"shape": list(v.shape)} for k, v in state.items()}


def read_part(path: Path, label: str) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(header, tensors) of one file of a split ``label`` install (.safetensors only)."""
    from safetensors.torch import load_file

    from guitrainer.core.model.checkpoint import CheckpointError, read_safetensors_header

    if path.suffix.lower() != ".safetensors":
        raise ModelLoadError(f"{path.name}: the files of a split {label} model are read as .safetensors only")
    try:
        header, _meta = read_safetensors_header(path)
        return header, load_file(str(path))
    except CheckpointError as e:
        raise ModelLoadError(str(e)) from e
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error types
        raise ModelLoadError(f"{path.name} cannot be read as .safetensors: {first_line(e)}") from e


def load_split(
    files: Sequence[Path], label: str, check: Callable[[NamedTensors, Sequence[NamedTensors]], PartsReport],
    part_state: Callable[[str, Mapping[str, torch.Tensor], str], dict[str, torch.Tensor]], build_all: BuildAll,
) -> LoadedModel:
    """A split install (the denoiser's file first): each file read, the set checked by the family's ``check`` (its
    problems raised in one ModelLoadError), each part's tensors taken from the file the report names
    (``part_state(part, tensors, prefix)``), and the model built by ``build_all(states, near, path=…, identity=…,
    source="split_files")``."""
    for f in files:
        if not f.is_file():
            raise ModelLoadError(f"{f}: the file does not exist. Check the path, or choose the file again.")
    read = {f.name: (f, *read_part(f, label)) for f in files}
    if len(read) != len(files):
        raise ModelLoadError("two of the chosen files have the same name: choose each part once")
    tables = [(f.name, read[f.name][1]) for f in files]
    report = check(tables[0], tables[1:])
    if report.problems:
        raise ModelLoadError(" ".join(report.problems))
    states = {part: part_state(part, read[file][2], prefix) for part, (file, prefix) in report.sources.items()}
    identity = hashlib.sha256("\n".join(model_identity(f) for f in files).encode()).hexdigest()[:24]
    return build_all(states, list(files), path=str(files[0]), identity=identity, source="split_files")


def load_checkpoint(
    path: Path, state: Mapping[str, torch.Tensor], label: str,
    detect: Callable[[Mapping[str, Any], Mapping[str, str], str], Any],
    check: Callable[[NamedTensors], PartsReport],
    part_state: Callable[[str, Mapping[str, torch.Tensor], str], dict[str, torch.Tensor]], build_all: BuildAll,
) -> LoadedModel:
    """One file holding the whole model (ComfyUI's checkpoint layout): the family's detector must take it and its
    check find every part in it (a transformer-only file is refused with the files to choose with it)."""
    name = Path(path).name
    table = headers(state)
    verdict = detect(table, {}, name)
    if verdict is None or not verdict[0]:
        raise ModelLoadError(verdict[2] if verdict else f"{name} holds no {label} transformer")
    report = check((name, table))
    if report.problems:
        raise ModelLoadError(f"{name} holds the {label} transformer without every other part: {' '.join(report.problems)} "
                             "Choose those files with it (the files of a split model are chosen together), or choose a "
                             "diffusers folder.")
    states = {part: part_state(part, state, prefix) for part, (_file, prefix) in report.sources.items()}
    return build_all(states, [Path(path)], path=str(path), identity=model_identity(path), source="single_file")


def refuse_scaled_fp8(state: Mapping[str, torch.Tensor], part: str, instead: str) -> None:
    """A "scaled fp8" file (ComfyUI's ``*_fp8_scaled``: ``scale_weight`` tensors beside fp8 weights, to be multiplied
    in) is refused by name, with the plain file to choose instead: its weights are not the model's until scaled, and
    the trainers (sd-scripts, musubi-tuner, diffusion-pipe) refuse it the same way."""
    if "scaled_fp8" in state or any(k.endswith((".scale_weight", ".scale_input")) for k in state):
        raise ModelLoadError(f"this {part} file is a 'scaled fp8' one (scale_weight tensors beside the weights), which "
                             f"training cannot use as it is; choose {instead} instead")


def assemble(
    family: str, transformer: nn.Module, vae: nn.Module, text_encoders: list[nn.Module], tokenizers: list[Any],
    scheduler: Any, *, path: str, identity: str, source: str,
) -> LoadedModel:
    """The :class:`LoadedModel` of a transformer family's parts, every part frozen and in eval mode."""
    for module in (transformer, vae, *text_encoders):
        module.requires_grad_(False)
        module.eval()
    return LoadedModel(
        denoiser=transformer, vae=vae, text_encoders=text_encoders, tokenizers=tokenizers, noise_scheduler=scheduler,
        family=family, path=path, identity=identity, source=source,
    )
