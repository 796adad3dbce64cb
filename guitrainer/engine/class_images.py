"""Generate DreamBooth class (regularization) images from the base model before training.

``generate_class_images`` makes ``count`` images of the class prompt into a folder, each a PNG with a
``.txt`` caption (the prompt) beside it, both written atomically. Images are named by index
(``class_00007.png``) and image ``i`` always uses seed ``seed + i``, so a run that was cancelled or
crashed resumes where it stopped and ends with exactly the images an uninterrupted run makes.
Existing images in the folder count toward ``count`` (any image, like diffusers' train_dreambooth);
only the missing ones are made, lowest free index first.

The pipeline (``StableDiffusionPipeline`` / ``StableDiffusionXLPipeline``) is built by
:meth:`~guitrainer.engine.families.base.Family.pipeline` from the LoadedModel's own components, with a
DPM-Solver++ scheduler made from the model's scheduler config; no safety checker. On CUDA it runs in
fp16 (SDXL's VAE upcasts itself, ``force_upcast``); on CPU in fp32. The built-in demo model makes a
64 px image in well under a second on a CPU.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from guitrainer.base.constants import IMAGE_EXTENSIONS
from guitrainer.base.fileio import atomic_path
from guitrainer.base.paths import expand
from guitrainer.core.dataset.scan import write_caption

log = logging.getLogger(__name__)

NAME_PATTERN = "class_{index:05d}"
_NAME_RE = re.compile(r"^class_(\d{5,})$")

Progress = Callable[[int, int], None]  # (images written so far, images to write in this run)


@dataclass(frozen=True)
class GenerationResult:
    """What a run did: images written now, images already there (counted toward ``count``), cancelled."""

    written: int
    skipped_existing: int
    cancelled: bool
    paths: tuple[str, ...] = ()


def image_name(index: int) -> str:
    return NAME_PATTERN.format(index=index)


def existing_images(folder: str | Path) -> list[Path]:
    """Images directly in ``folder`` (hidden and temp files excluded), sorted by name."""
    root = Path(folder)
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in IMAGE_EXTENSIONS
    )


def plan_missing(folder: str | Path, count: int) -> tuple[list[int], int]:
    """``(indices to make, images already there)``: the lowest free ``class_NNNNN`` indices."""
    have = existing_images(folder)
    need = max(0, int(count) - len(have))
    taken = {p.stem for p in have}
    todo: list[int] = []
    i = 0
    while len(todo) < need:
        if image_name(i) not in taken:
            todo.append(i)
        i += 1
    return todo, len(have)


def _checked_prompt(prompt: str, count: int, size: int, steps: int) -> str:
    prompt = prompt.strip()
    if not prompt:
        raise ValueError("the class prompt is empty; describe the class, e.g. 'a photo of a dog'")
    if count < 0 or size < 8 or steps < 1:
        raise ValueError(f"need count >= 0, size >= 8 and steps >= 1 (got {count}, {size}, {steps})")
    return prompt


def _class_pipeline(model_cfg: Any, model: Any, device: Any, size: int, gpu_index: int = -1) -> tuple[Any, int]:
    """The pipeline that draws class images (fp16 on CUDA) and the image side (``size`` rounded down to the
    model's multiple)."""
    import torch

    from guitrainer.engine.compute_device import compute_device
    from guitrainer.engine.families import registry

    if model is None:
        from guitrainer.engine.models.loading import load_base_model

        model = load_base_model(model_cfg)
    dev = torch.device(device) if device is not None else compute_device(gpu_index)
    fam = registry.family(model.family)
    pipe = fam.pipeline(model, "dpm++", dev, torch.float16 if dev.type == "cuda" else None)
    multiple = fam.size_multiple(model)
    side = max(multiple, int(size) // multiple * multiple)
    if side != size:
        log.info("class images: size %d rounded to %d (a multiple of %d)", size, side, multiple)
    return pipe, side


def _write_class_image(
    root: Path, index: int, image: Any, prompt: str, negative_prompt: str, seed: int, steps: int, side: int
) -> Path:
    """Class image ``index`` as a PNG with its settings in the metadata; its caption is written first, so an
    image on disk always has its caption."""
    from PIL.PngImagePlugin import PngInfo

    name = image_name(index)
    write_caption(root / f"{name}.txt", prompt)
    info = PngInfo()
    meta = {"prompt": prompt, "negative_prompt": negative_prompt, "seed": seed, "steps": steps, "size": side}
    info.add_text("guitrainer", json.dumps(meta))
    target = root / f"{name}.png"
    with atomic_path(target) as tmp:
        image.save(tmp, format="PNG", pnginfo=info)
    return target


def generate_class_images(
    model_cfg: Any,
    prompt: str,
    folder: str | Path,
    count: int,
    *,
    size: int,
    steps: int,
    seed: int,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
    negative_prompt: str = "",
    guidance_scale: float = 7.0,
    model: Any = None,
    device: Any = None,
    gpu_index: int = -1,
) -> GenerationResult:
    """Make the missing class images of ``folder`` (see the module docstring).

    Args:
        model_cfg: a :class:`guitrainer.config.ModelConfig` (loaded with ``load_base_model``), unless
            ``model`` (a LoadedModel) is given.
        size: width and height in pixels (rounded down to the model's multiple).
        steps: denoising steps per image.
        seed: image ``i`` uses ``seed + i``.
        progress: ``progress(done, total)`` after each image (and ``(0, total)`` at the start).
        should_stop: polled between images and between denoising steps; a half-made image is dropped.
    """
    prompt = _checked_prompt(prompt, count, size, steps)
    root = expand(str(folder))
    todo, have = plan_missing(root, count)
    if progress:
        progress(0, len(todo))
    if not todo:
        log.info("class images: %d already in %s, none to make", have, root)
        return GenerationResult(0, have, False)
    stop = should_stop or (lambda: False)
    if stop():
        return GenerationResult(0, have, True)

    import torch

    pipe, side = _class_pipeline(model_cfg, model, device, size, gpu_index)
    root.mkdir(parents=True, exist_ok=True)
    log.info("class images: making %d of %d in %s (%d there), %d px, %d steps", len(todo), count, root, have, side, steps)

    def on_step_end(p: Any, _step: int, _t: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
        if stop():
            p._interrupt = True  # diffusers' pipelines skip the remaining steps when this is set
        return kwargs

    written: list[str] = []
    cancelled = False
    for done, index in enumerate(todo):
        if stop():
            cancelled = True
            break
        image_seed = int(seed) + index
        generator = torch.Generator("cpu").manual_seed(image_seed)
        with torch.inference_mode():
            out = pipe(
                prompt=prompt,
                negative_prompt=negative_prompt or None,
                height=side,
                width=side,
                num_inference_steps=int(steps),
                guidance_scale=float(guidance_scale),
                generator=generator,
                callback_on_step_end=on_step_end,
            )
        if getattr(pipe, "_interrupt", False):
            cancelled = True
            break
        target = _write_class_image(root, index, out.images[0], prompt, negative_prompt, image_seed, steps, side)
        written.append(str(target))
        if progress:
            progress(done + 1, len(todo))
    if cancelled:
        log.info("class images: cancelled after %d of %d", len(written), len(todo))
    return GenerationResult(len(written), have, cancelled, tuple(written))
