"""The UNet families (SD 1.5, SDXL and the tiny demo): one implementation of the seam, told apart by their facts.

Everything here is what the trainer did for Stable Diffusion before the seam existed, moved behind it
unchanged: epsilon / v-prediction on a DDPM schedule with kohya's recipes (:mod:`guitrainer.engine.recipes`),
CLIP text conditioning (SDXL: both encoders' penultimate hidden states and the second one's pooled
embedding, plus its size conditioning), the LoRA on the UNet's attention (and conv layers for the variants),
kohya's names (:mod:`guitrainer.engine.network.kohya_names` for SDXL's original layout), diffusers'
``StableDiffusionPipeline`` / ``StableDiffusionXLPipeline`` for samples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from guitrainer.config import NetworkConfig, TrainingConfig
from guitrainer.config.sample_prompts import SamplePrompt
from guitrainer.core.families.facts import FamilyFacts
from guitrainer.core.model.lora_format import text_encoder_targets, unet_targets
from guitrainer.engine import recipes as recipe_math
from guitrainer.engine.families.base import Draw, Family, TextConditioning
from guitrainer.engine.models.types import LoadedModel, ModelLoadError, model_identity
from guitrainer.engine.network import lora

#: ``modelspec.implementation`` of a LoRA, as sd-scripts writes it per base model
IMPLEMENTATIONS = {"sd15": "diffusers", "sdxl": "https://github.com/Stability-AI/generative-models", "demo": "guitrainer"}


#: what a config folder for single-file loading must hold (``resources/models/<family>``), SDXL adding its second
#: text encoder's
CONFIG_FILES: tuple[str, ...] = (
    "unet/config.json",
    "vae/config.json",
    "text_encoder/config.json",
    "tokenizer/vocab.json|tokenizer/tokenizer.json",
    "tokenizer/merges.txt|tokenizer/tokenizer.json",
    "scheduler/scheduler_config.json",
)
SDXL_CONFIG_FILES: tuple[str, ...] = CONFIG_FILES + (
    "text_encoder_2/config.json",
    "tokenizer_2/vocab.json|tokenizer_2/tokenizer.json",
    "tokenizer_2/merges.txt|tokenizer_2/tokenizer.json",
)


def check_config_dir(folder: Path, files: Sequence[str]) -> None:
    """Raise :class:`ModelLoadError` naming the first of ``files`` (``a|b``: either) the config folder lacks."""
    for choices in files:
        rels = choices.split("|")
        if not any((folder / rel).is_file() for rel in rels):
            raise ModelLoadError(f"the model config folder {folder} is incomplete: {rels[0]} is missing (reinstall the app)")


def _freeze(*modules: nn.Module) -> None:
    for m in modules:
        m.requires_grad_(False)
        m.eval()


#: largest model_index.json read (a few hundred bytes in every diffusers model)
MAX_JSON_BYTES = 16 * 1024 * 1024


def _read_model_index(path: str | Path) -> dict[str, Any] | None:
    from guitrainer.base import safe_open

    f = Path(path) / "model_index.json"
    if safe_open.look(f).kind == "missing":
        return None
    found = safe_open.read_json(f, limit=MAX_JSON_BYTES, what="a model index")
    return found if isinstance(found, dict) else None


def has_second_text_encoder(path: str | Path) -> bool:
    """Whether a diffusers folder (or cached hub id) is SDXL-shaped: its model_index names ``text_encoder_2``."""
    index = _read_model_index(path)
    if index:
        return "text_encoder_2" in index and index["text_encoder_2"][0] is not None
    return Path(str(path), "text_encoder_2").is_dir()


def added_conditioning(
    pooled: torch.Tensor | None, time_ids: torch.Tensor | None, resolution: int, device: torch.device, dtype: torch.dtype
) -> dict[str, torch.Tensor] | None:
    """SDXL's added conditioning: pooled text embedding + add_time_ids (original size, crop, target)."""
    if pooled is None:
        return None
    if time_ids is None:  # no geometry known: the square training resolution, uncropped
        res = resolution
        time_ids = torch.tensor([[res, res, 0, 0, res, res]], dtype=torch.float32).repeat(pooled.shape[0], 1)
    return {"text_embeds": pooled, "time_ids": time_ids.to(device, dtype)}


class StableDiffusion(Family):
    """SD 1.5, SDXL and the demo: a UNet on a DDPM schedule, CLIP text encoders, a 4-channel VAE."""

    def __init__(self, facts: FamilyFacts) -> None:
        self.facts = facts

    @property
    def sdxl(self) -> bool:
        return len(self.facts.text_encoders) > 1

    # ------------------------------------------------------------------ files
    def load_folder(
        self, path: str | Path, *, local_files_only: bool = True, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """unet / vae / text encoder(s) / tokenizer(s) / scheduler from a diffusers layout (folder or hub id), each
        weight cast to ``dtype`` (the VAE's to ``vae_dtype``) as it is read."""
        from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
        from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

        src = str(path)
        kw: dict[str, Any] = {"local_files_only": local_files_only}
        te_kw: dict[str, Any] = {**kw, "dtype": dtype}  # transformers 5's name; diffusers' is torch_dtype
        part = "unet"
        try:
            unet = UNet2DConditionModel.from_pretrained(src, subfolder="unet", torch_dtype=dtype, **kw)
            part = "vae"
            vae = AutoencoderKL.from_pretrained(src, subfolder="vae", torch_dtype=vae_dtype or dtype, **kw)
            part = "text_encoder"
            text_encoders = [CLIPTextModel.from_pretrained(src, subfolder="text_encoder", **te_kw)]
            part = "tokenizer"
            tokenizers = [CLIPTokenizer.from_pretrained(src, subfolder="tokenizer", **kw)]
            if self.sdxl:
                part = "text_encoder_2"
                text_encoders.append(CLIPTextModelWithProjection.from_pretrained(src, subfolder="text_encoder_2", **te_kw))
                part = "tokenizer_2"
                tokenizers.append(CLIPTokenizer.from_pretrained(src, subfolder="tokenizer_2", **kw))
            part = "scheduler"
            scheduler = DDPMScheduler.from_pretrained(src, subfolder="scheduler", **kw)
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            raise ModelLoadError(f"{src} is not a complete diffusers model folder ({part}/ is missing or broken): {e}") from e
        _freeze(unet, vae, *text_encoders)
        ident = model_identity(src) if Path(src).is_dir() else hashlib.sha256(src.encode()).hexdigest()[:24]
        return LoadedModel(
            denoiser=unet, vae=vae, text_encoders=text_encoders, tokenizers=tokenizers, noise_scheduler=scheduler,
            family=self.name, path=src, identity=ident,
        )

    def load_single_file(
        self, path: Path, state: dict[str, torch.Tensor], *, config_dir: Path, dtype: torch.dtype = torch.float32,
        vae_dtype: torch.dtype | None = None,
    ) -> LoadedModel:
        """The diffusers parts from an original-layout state dict and the configs in ``config_dir``, each tensor cast
        to ``dtype`` (the VAE's to ``vae_dtype``) as diffusers copies it into its module."""
        from diffusers import AutoencoderKL, DDPMScheduler, UNet2DConditionModel
        from diffusers.loaders.single_file_utils import create_diffusers_clip_model_from_ldm
        from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

        check_config_dir(config_dir, SDXL_CONFIG_FILES if self.sdxl else CONFIG_FILES)
        cfg = str(config_dir)
        kw: dict[str, Any] = {"config": cfg, "local_files_only": True, "torch_dtype": dtype}
        unet = UNet2DConditionModel.from_single_file(state, subfolder="unet", **kw)
        vae = AutoencoderKL.from_single_file(state, subfolder="vae", **{**kw, "torch_dtype": vae_dtype or dtype})
        tes = [create_diffusers_clip_model_from_ldm(CLIPTextModel, state, subfolder="text_encoder", **kw)]
        toks = [CLIPTokenizer.from_pretrained(cfg, subfolder="tokenizer", local_files_only=True)]
        if self.sdxl:
            tes.append(create_diffusers_clip_model_from_ldm(CLIPTextModelWithProjection, state, subfolder="text_encoder_2", **kw))
            toks.append(CLIPTokenizer.from_pretrained(cfg, subfolder="tokenizer_2", local_files_only=True))
        scheduler = DDPMScheduler.from_pretrained(cfg, subfolder="scheduler", local_files_only=True)
        _freeze(unet, vae, *tes)
        return LoadedModel(
            denoiser=unet, vae=vae, text_encoders=tes, tokenizers=toks, noise_scheduler=scheduler, family=self.name,
        )

    def use_prediction_type(self, model: LoadedModel, prediction_type: str) -> None:
        """A checkpoint marked v-prediction (its ``v_pred`` key or metadata) overrides the shipped scheduler's
        "epsilon": the trainer takes its target from the scheduler."""
        from diffusers import DDPMScheduler

        model.noise_scheduler = DDPMScheduler.from_config(model.noise_scheduler.config, prediction_type=prediction_type)

    # ------------------------------------------------------------------ text
    def encode_text(
        self, model: LoadedModel, text_encoders: Sequence[nn.Module], captions: list[str], device: torch.device
    ) -> TextConditioning:
        """``{"hidden": …}``; SDXL: both encoders' penultimate hidden states side by side, and ``"pooled"``."""
        ids = [
            tok(captions, padding="max_length", max_length=tok.model_max_length, truncation=True, return_tensors="pt")
            .input_ids.to(device)
            for tok in model.tokenizers
        ]
        if len(text_encoders) == 1:
            return {"hidden": text_encoders[0](ids[0])[0]}
        hidden, pooled = [], None
        for te, i in zip(text_encoders, ids):
            out = te(i, output_hidden_states=True)
            hidden.append(out.hidden_states[-2])
            pooled = getattr(out, "text_embeds", None)
        found: TextConditioning = {"hidden": torch.cat(hidden, dim=-1)}
        if pooled is not None:
            found["pooled"] = pooled
        return found

    # ------------------------------------------------------------------ objective
    def prepare(self, config: TrainingConfig, model: LoadedModel, warn: Any) -> None:
        """Zero terminal SNR rescales the noise schedule before training (and warns on an epsilon model)."""
        recipe = recipe_math.Recipe.from_config(config)
        if recipe.zero_terminal_snr:
            recipe_math.rescale_zero_terminal_snr(model.noise_scheduler)
            if model.prediction_type != "v_prediction":
                warn("zero terminal SNR is meant for v-prediction models; this model predicts epsilon")

    def draw(self, config: TrainingConfig, model: LoadedModel, latents: torch.Tensor, timesteps: torch.Tensor | None) -> Draw:
        recipe = recipe_math.Recipe.from_config(config)
        sched = model.noise_scheduler
        noise, t, noisy = recipe_math.noise_and_timesteps(recipe, sched, latents, timesteps)
        v_pred = model.prediction_type == "v_prediction"
        target = sched.get_velocity(latents, noise, t) if v_pred else noise
        return Draw(noise=noise, timesteps=t, noisy=noisy, target=target)

    def predict(
        self, config: TrainingConfig, denoiser: nn.Module, model: LoadedModel, draw: Draw, text: TextConditioning,
        batch: Mapping[str, Any],
    ) -> torch.Tensor:
        hidden = text["hidden"]
        added = added_conditioning(
            text.get("pooled"), batch.get("time_ids"), config.dataset.resolution, hidden.device, hidden.dtype
        )
        return denoiser(draw.noisy, draw.timesteps, hidden, added_cond_kwargs=added).sample

    def loss(self, config: TrainingConfig, model: LoadedModel, prediction: torch.Tensor, draw: Draw, latents: torch.Tensor) -> torch.Tensor:
        recipe = recipe_math.Recipe.from_config(config)
        v_pred = model.prediction_type == "v_prediction"
        return recipe_math.diffusion_loss(recipe, prediction, draw.target, draw.timesteps, model.noise_scheduler, v_pred)

    def validation_timesteps(self, config: TrainingConfig, model: LoadedModel, count: int) -> list[float]:
        """``count`` DDPM timesteps evenly spaced strictly inside the recipe's range (sd-scripts' choice)."""
        from guitrainer.engine.validation import fixed_timesteps

        recipe = recipe_math.Recipe.from_config(config)
        lo, hi = recipe_math.timestep_range(recipe, int(model.noise_scheduler.config.num_train_timesteps))
        return [float(t) for t in fixed_timesteps(lo, hi, count)]

    def timestep_tensor(self, values: Sequence[float], device: torch.device) -> torch.Tensor:
        return torch.tensor([int(v) for v in values], dtype=torch.long, device=device)

    # ------------------------------------------------------------------ memory
    def offload_blocks(self, denoiser: nn.Module) -> list[list[nn.Module]]:
        """The UNet's checkpointed units: its ResNets, then its attentions' transformer blocks, each list in the
        order the forward runs them. The mid block's first ResNet is left out: diffusers runs it outside
        checkpointing (``UNetMidBlock2DCrossAttn.forward``)."""
        unet = denoiser
        stages = [*unet.down_blocks, *([unet.mid_block] if unet.mid_block is not None else []), *unet.up_blocks]
        resnets = [r for stage in stages for r in stage.resnets if not (stage is unet.mid_block and r is stage.resnets[0])]
        blocks = [t for stage in stages for a in getattr(stage, "attentions", None) or () for t in a.transformer_blocks]
        return [lst for lst in (resnets, blocks) if lst]

    # ------------------------------------------------------------------ network
    def denoiser_targets(self, network: NetworkConfig) -> tuple[str, ...]:
        return unet_targets(network.type, network.target_modules)

    def text_encoder_targets(self, model: LoadedModel, index: int, network: NetworkConfig) -> tuple[str, ...]:
        return text_encoder_targets(network.type)

    def kohya_state_dict(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> dict[str, torch.Tensor]:
        return lora.kohya_state_dict(denoiser, text_encoders, alpha)

    def diffusers_lora(
        self, denoiser: nn.Module, text_encoders: Sequence[nn.Module], alpha: float | None = None
    ) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
        """peft keys (``unet.<module>.lora_A.weight``) and diffusers' ``lora_adapter_metadata`` (the LoraConfig, so
        alpha != rank survives), as ``StableDiffusionPipeline.save_lora_weights`` writes them."""
        import json

        adapter = lora.diffusers_adapter_metadata(denoiser, text_encoders, alpha)
        meta = {"format": "pt", "lora_adapter_metadata": json.dumps(adapter, indent=2, sort_keys=True)}
        return lora.diffusers_state_dict(denoiser, text_encoders), meta

    def load_lora_file(
        self, path: Path, network: NetworkConfig, denoiser: nn.Module, text_encoders: Sequence[nn.Module],
        skipped: list[str],
    ) -> int:
        """kohya / LyCORIS files (ours and other trainers', either spelling of SDXL's UNet names) and diffusers
        files; a plain LoRA file also starts a LoCon or DoRA network."""
        if network.type != "lora":
            from guitrainer.engine.network.lycoris_keys import load_variant_file

            return load_variant_file(lora.read_lora_as_kohya(path)[0], denoiser, text_encoders, skipped=skipped)
        return lora.load_kohya_lora(path, denoiser, text_encoders, strict=False, skipped=skipped)

    def metadata(self, config: TrainingConfig, model: LoadedModel | None) -> dict[str, str]:
        name = self.name
        return {
            "ss_base_model_version": self.facts.base_model_version,
            "ss_v2": "False",
            "modelspec.architecture": f"{self.facts.modelspec_architecture}/lora",
            "modelspec.implementation": IMPLEMENTATIONS.get(name, "diffusers"),
        }

    # ------------------------------------------------------------------ sampling
    def pipeline(self, model: LoadedModel, scheduler: str = "default", device: Any = None, dtype: torch.dtype | None = None) -> Any:
        """A diffusers text-to-image pipeline sharing ``model``'s modules (nothing is copied).

        One text encoder makes a ``StableDiffusionPipeline`` (no safety checker), two a
        ``StableDiffusionXLPipeline`` (no watermark). ``scheduler`` is "default" / "ddim" (samples during
        training) or "dpm++" (DPM-Solver++, class images), made from the model's noise-scheduler config.
        """
        from diffusers import (
            DDIMScheduler,
            DPMSolverMultistepScheduler,
            StableDiffusionPipeline,
            StableDiffusionXLPipeline,
        )

        kinds = {"default": DDIMScheduler, "ddim": DDIMScheduler, "dpm++": DPMSolverMultistepScheduler}
        if scheduler not in kinds:
            raise ValueError(f"scheduler must be one of {sorted(kinds)}, got {scheduler!r}")
        sched = kinds[scheduler].from_config(
            model.noise_scheduler.config, **recipe_math.sampler_options(model.noise_scheduler)
        )
        if len(model.text_encoders) > 1:
            pipe = StableDiffusionXLPipeline(
                vae=model.vae, text_encoder=model.text_encoders[0], text_encoder_2=model.text_encoders[1],
                tokenizer=model.tokenizers[0], tokenizer_2=model.tokenizers[1], unet=model.denoiser, scheduler=sched,
                add_watermarker=False,
            )
        else:
            pipe = StableDiffusionPipeline(
                vae=model.vae, text_encoder=model.text_encoders[0], tokenizer=model.tokenizers[0], unet=model.denoiser,
                scheduler=sched, safety_checker=None, feature_extractor=None, requires_safety_checker=False,
            )
        if device is not None or dtype is not None:
            pipe.to(*(x for x in (device, dtype) if x is not None))
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def size_multiple(self, model: LoadedModel) -> int:
        """Image sides are multiples of this: the VAE's and the UNet's downscaling together."""
        vae_blocks = len(model.vae.config.block_out_channels)
        unet_blocks = len(model.denoiser.config.block_out_channels)
        return 2 ** (vae_blocks - 1) * 2 ** (unet_blocks - 1)

    def sample(self, pipe: Any, model: LoadedModel, prompt: SamplePrompt, width: int, height: int, generator: torch.Generator) -> Any:
        """One image (PIL): the pipeline's latents decoded in the VAE's own dtype (an fp32 VAE stays fp32 under
        fp16 training)."""
        latents = pipe(
            prompt.prompt,
            negative_prompt=prompt.negative_prompt or None,
            num_inference_steps=prompt.steps,
            guidance_scale=prompt.guidance_scale,
            height=height,
            width=width,
            generator=generator,
            output_type="latent",
        ).images
        vae = model.vae
        lat = latents.to(vae.device, vae.dtype) / vae.config.scaling_factor
        image = torch.nan_to_num(vae.decode(lat).sample.float())
        return pipe.image_processor.postprocess(image, output_type="pil")[0]
