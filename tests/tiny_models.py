"""Tiny SD 1.5- and SDXL-layout diffusers pipelines (random weights, real CLIP tokenizer), shared by tests."""

from __future__ import annotations

from pathlib import Path

import torch

from guitrainer.base.paths import resources_dir

RES = resources_dir() / "models"


def _clip_config(hidden: int, projection: int, act: str) -> object:
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=49408,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=77,
        projection_dim=projection,
        hidden_act=act,
        bos_token_id=0,
        eos_token_id=2,  # the legacy value of the real configs: pooled output at argmax(input_ids)
        pad_token_id=1,
    )


def build_tiny(folder: Path, family: str, seed: int = 0) -> Path:
    """Write a tiny SD 1.5- or SDXL-layout diffusers pipeline into ``folder``; return it."""
    from diffusers import (
        AutoencoderKL,
        DDPMScheduler,
        EulerDiscreteScheduler,
        StableDiffusionPipeline,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    sdxl = family == "sdxl"
    te = CLIPTextModel(_clip_config(32, 32, "quick_gelu"))
    tok = CLIPTokenizer.from_pretrained(RES / family / "tokenizer")
    unet_kw: dict = dict(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        block_out_channels=(32, 64),
        layers_per_block=1,
        attention_head_dim=8,
        norm_num_groups=32,
    )
    if sdxl:
        te2 = CLIPTextModelWithProjection(_clip_config(48, 40, "gelu"))  # other width than te1, as in SDXL
        unet = UNet2DConditionModel(
            **unet_kw,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=32 + 48,
            addition_embed_type="text_time",
            addition_time_embed_dim=8,
            projection_class_embeddings_input_dim=6 * 8 + 40,
            use_linear_projection=True,
        )
    else:
        unet = UNet2DConditionModel(
            **unet_kw,
            down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
            up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            cross_attention_dim=32,
        )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        block_out_channels=(32, 32),
        layers_per_block=1,
        latent_channels=4,
        norm_num_groups=32,
        sample_size=32,
        scaling_factor=0.13025 if sdxl else 0.18215,
        force_upcast=sdxl,
    )
    sched_kw = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", steps_offset=1)
    if sdxl:
        tok2 = CLIPTokenizer.from_pretrained(RES / "sdxl" / "tokenizer_2")
        pipe = StableDiffusionXLPipeline(
            vae=vae, text_encoder=te, text_encoder_2=te2, tokenizer=tok, tokenizer_2=tok2, unet=unet,
            scheduler=EulerDiscreteScheduler(**sched_kw),
        )
    else:
        pipe = StableDiffusionPipeline(
            vae=vae, text_encoder=te, tokenizer=tok, unet=unet, scheduler=DDPMScheduler(**sched_kw),
            safety_checker=None, feature_extractor=None, requires_safety_checker=False,
        )
    pipe.save_pretrained(folder)
    return folder
