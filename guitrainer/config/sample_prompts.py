"""Sample prompts with per-prompt options, in the form kohya's sd-scripts (and so most LoRA users) write:

    a portrait of sks woman, upper body --w 512 --h 768 --d 42 --l 6.5 --s 28 --n blurry, lowres

``--w`` / ``--h`` width and height in pixels, ``--d`` seed, ``--l`` guidance scale, ``--s`` steps,
``--n`` negative prompt (to the next option or the end). Anything not given comes from the Sampling
settings. No torch here: the config validates prompts with :func:`parse` before a run starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: option letter -> (field, type, minimum, maximum)
OPTIONS: dict[str, tuple[str, type, float, float]] = {
    "w": ("width", int, 64, 4096),
    "h": ("height", int, 64, 4096),
    "d": ("seed", int, 0, 2**32 - 1),
    "l": ("guidance_scale", float, 0.0, 50.0),
    "s": ("steps", int, 1, 200),
}
_SPLIT = re.compile(r"(?:^|\s)--([A-Za-z]+)(?=\s|$)")


@dataclass(frozen=True)
class SamplePrompt:
    prompt: str
    negative_prompt: str
    width: int
    height: int
    steps: int
    guidance_scale: float
    seed: int


class SamplePromptError(ValueError):
    """A prompt's option cannot be used; the message names the option and what is allowed."""


def parse(line: str, defaults: object, index: int = 0) -> SamplePrompt:
    """``line`` with its options applied over ``defaults`` (a SamplingConfig: size, steps, guidance_scale,
    seed, negative_prompt). Without ``--d`` the seed is ``defaults.seed + index``, so each prompt keeps
    its own fixed seed."""
    pieces = _SPLIT.split(line)
    values: dict[str, object] = {
        "width": int(defaults.size),  # type: ignore[attr-defined]
        "height": int(defaults.size),  # type: ignore[attr-defined]
        "steps": int(defaults.steps),  # type: ignore[attr-defined]
        "guidance_scale": float(defaults.guidance_scale),  # type: ignore[attr-defined]
        "seed": int(defaults.seed) + index,  # type: ignore[attr-defined]
        "negative_prompt": str(defaults.negative_prompt or ""),  # type: ignore[attr-defined]
    }
    for key, raw in zip(pieces[1::2], pieces[2::2], strict=True):
        text = raw.strip()
        letter = key.lower()
        if letter == "n":
            values["negative_prompt"] = text
            continue
        if letter not in OPTIONS:
            known = ", ".join(f"--{k}" for k in (*OPTIONS, "n"))
            raise SamplePromptError(f"unknown option --{key} (known: {known})")
        field, kind, lo, hi = OPTIONS[letter]
        try:
            value = kind(text)
        except ValueError:
            raise SamplePromptError(f"--{key} needs a number, got {text!r}") from None
        if not lo <= value <= hi:
            raise SamplePromptError(f"--{key} {text} is outside {lo:g}–{hi:g}")
        if field in ("width", "height") and value % 8:
            raise SamplePromptError(f"--{key} {text} is not a multiple of 8 (the VAE's scale); use {value // 8 * 8}")
        values[field] = value
    prompt = pieces[0].strip()
    if not prompt:
        raise SamplePromptError("the prompt before the options is empty")
    return SamplePrompt(prompt=prompt, **values)  # type: ignore[arg-type]
