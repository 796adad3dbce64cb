"""Samples from Chroma during training: diffusers' ChromaPipeline over the loaded parts (nothing copied).

The pipeline gets a scheduler of its own from the model's FlowMatchEulerDiscreteScheduler config, so sampling never
touches the training scheduler's state. Chroma is not guidance-distilled: ``guidance_scale`` is real
classifier-free guidance (the pipeline's default 5.0; the negative prompt, or "", as the unconditional side), and
the prompts are encoded and cut exactly as :mod:`.text` does for training.
"""

from __future__ import annotations

from typing import Any

import torch

from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.engine.families.chroma.text import encode, lengths
from guitrainer.engine.families.flux1.latents import unpack
from guitrainer.engine.models.types import LoadedModel


def _embeds(pipe: Any, prompt: str) -> torch.Tensor:
    """One prompt's T5 embeddings cut to the tokens Chroma attends to (:mod:`.text`), as training sees them."""
    text = encode([pipe.tokenizer], [pipe.text_encoder], [prompt], pipe.text_encoder.device)
    return text["t5"][:, : lengths(text["mask"])[0]]


def sample(pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
    """One PIL image: the prompt's (and the negative prompt's) embeddings cut as training cuts them, with a mask that
    keeps every token of the cut (the pipeline's own float mask would not mask); the packed latents unpacked and
    decoded in the VAE's own dtype."""
    with torch.no_grad():
        positive, negative = _embeds(pipe, prompt.prompt), _embeds(pipe, prompt.negative_prompt or "")
    # the pipeline wants a mask beside given embeddings: all True (bool, so attention masks nothing) over the cut
    packed = pipe(
        prompt_embeds=positive,
        prompt_attention_mask=torch.ones(positive.shape[:2], dtype=torch.bool, device=positive.device),
        negative_prompt_embeds=negative,
        negative_prompt_attention_mask=torch.ones(negative.shape[:2], dtype=torch.bool, device=negative.device),
        num_inference_steps=prompt.steps,
        guidance_scale=prompt.guidance_scale,
        height=height,
        width=width,
        generator=generator,
        output_type="latent",
    ).images
    vae = model.vae
    latents = unpack(packed, height // pipe.vae_scale_factor, width // pipe.vae_scale_factor)
    z = latents.to(vae.device, vae.dtype) / vae.config.scaling_factor + vae.config.shift_factor
    image = torch.nan_to_num(vae.decode(z).sample.float())
    return pipe.image_processor.postprocess(image, output_type="pil")[0]
