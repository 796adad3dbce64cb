"""Sample images during training, with the LoRA being trained active.

The model's family builds a diffusers pipeline around the loaded (and LoRA-injected) components
(:meth:`~guitrainer.engine.families.base.Family.pipeline`: SD's with a DDIM scheduler made from the training
scheduler's config, Flux's and SD 3.5's flow-matching Euler) and draws each image. Each
prompt ``i`` uses its own CPU generator seeded ``sampling.seed + i`` (or its ``--d``), so samples are
comparable over time. Prompts take kohya's per-prompt options (``--w``, ``--h``, ``--d``, ``--l``, ``--s``,
``--n``; :mod:`guitrainer.config.sample_prompts`). Every RNG (python, numpy, torch CPU and CUDA) and every module's train/eval mode is restored
afterwards: a run with samples trains exactly like one without, and stop/resume stays bit-exact.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from guitrainer.base.errors import first_line
from guitrainer.base.fileio import atomic_write_with
from guitrainer.core.events import SampleImage
from guitrainer.core.runs.names import RunFiles
from guitrainer.core.runs.samples import first_and_last
from guitrainer.engine.families import registry

log = logging.getLogger(__name__)


@contextlib.contextmanager
def preserved_state(modules: Sequence[torch.nn.Module], device: torch.device) -> Iterator[None]:
    """Put ``modules`` in eval mode and restore their modes and every RNG on exit."""
    modes = [[(m, m.training) for m in mod.modules()] for mod in modules]
    py, npy = random.getstate(), np.random.get_state()
    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices):
            for mod in modules:
                mod.eval()
            yield
    finally:
        for group in modes:
            for m, training in group:
                m.training = training
        random.setstate(py)
        np.random.set_state(npy)


def generate_samples(
    model: Any,
    sampling_cfg: Any,
    *,
    step: int,
    files: RunFiles,
    device: torch.device,
) -> list[SampleImage]:
    """One PNG per prompt of ``sampling_cfg.prompts``, written atomically under the run's label
    (``samples/<label>_step<N>_<i>.png``: :meth:`RunFiles.sample`); returns what was written.

    Leaves every RNG and module mode as it found them.
    """
    from guitrainer.config.sample_prompts import parse

    lines = [p.strip() for p in sampling_cfg.prompts if p.strip()]
    if not lines:
        return []
    prompts = [parse(line, sampling_cfg, i) for i, line in enumerate(lines)]
    fam = registry.family(model.family)
    mult = fam.size_multiple(model)

    def fit(n: int) -> int:
        return max(mult, n // mult * mult)

    out: list[SampleImage] = []
    with preserved_state([model.denoiser, model.vae, *model.text_encoders], device), torch.no_grad():
        pipe = fam.pipeline(model)
        for i, sp in enumerate(prompts):
            gen = torch.Generator(device="cpu").manual_seed(sp.seed)
            image = fam.sample(pipe, model, sp, fit(sp.width), fit(sp.height), gen)
            path = files.sample(step, i)
            atomic_write_with(path, lambda f, im=image: im.save(f, format="PNG"))
            out.append(SampleImage(str(path), sp.prompt, step))
    return out


def sample_during_run(session: Any, caches: Any, files: RunFiles, feedback: Any, step: int) -> None:
    """Sample images from ``sampling.prompts`` with a run's current LoRA; its training state is left untouched.

    Parked modules come back for the pipeline and leave again; a failed sample only warns (the run goes on).
    Only the main process samples.
    """
    if not session.main:
        return
    cfg = session.config.sampling
    prompts = [p for p in cfg.prompts if p.strip()]
    if not prompts:
        feedback.status("no sample prompts are set (Sampling settings); no sample images were made")
        return
    feedback.status(f"making {len(prompts)} sample image{'s' if len(prompts) != 1 else ''} at step {step}")
    moved = caches.unpark()
    # fp8-stored weights are cast up to the compute dtype layer by layer while the LoRA stays fp32: the pipeline
    # runs under the training's autocast, as the training step does
    mixed = session.config.precision.base_weights == "fp8" and session.precision != "fp32"
    in_step_dtype = torch.autocast(session.device.type, dtype=session.dtype) if mixed else contextlib.nullcontext()
    try:
        from guitrainer.engine.optim import averaged_weights

        with in_step_dtype, averaged_weights(session.optimizer):  # schedule-free: sample the averaged weights
            samples = generate_samples(
                session.model, cfg, step=step, files=files, device=session.device
            )
    except Exception as e:  # noqa: BLE001 - a failed sample must not end the training run
        log.exception("sampling failed")
        feedback.warn(f"sample images at step {step} failed: {first_line(e, 200)}")
        samples = []
    finally:
        for module in moved:
            caches.park(module)
    for sample in samples:
        feedback.reporter.on_sample(sample)
    if samples and session.model.family == "demo":
        report_demo_progress(cfg.prompts, files, feedback)


def run_samples(prompts: Sequence[str], files: RunFiles) -> list[SampleImage]:
    """This run's sample images on disk (``<label>_step<N>_<i>.png``), each with prompt ``i``'s text."""
    lines = [p.strip() for p in prompts if p.strip()]
    pattern = re.compile(rf"^{re.escape(files.label)}_step(\d+)_(\d+)\.png$")
    out: list[SampleImage] = []
    if not files.samples.is_dir():
        return out
    for path in sorted(files.samples.iterdir()):
        m = pattern.match(path.name)
        if m and int(m.group(2)) < len(lines):
            out.append(SampleImage(path=str(path), prompt=lines[int(m.group(2))], step=int(m.group(1))))
    return out


def report_demo_progress(prompts: Sequence[str], files: RunFiles, feedback: Any) -> None:
    """The Demo's measure in the log, once a prompt has a first and a later sample: what the base drew and
    what the LoRA draws now (:mod:`guitrainer.core.demo.progress`)."""
    from guitrainer.core.demo.progress import demo_progress

    pairs = [p for p in first_and_last(run_samples(prompts, files)) if p.last.step > p.first.step]
    for progress in demo_progress(pairs):
        feedback.status(f"Demo measure: {progress.describe()}")
