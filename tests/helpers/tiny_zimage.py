"""A tiny Z-Image (2 layers, one noise and one context refiner, width 64) with a tiny Qwen3 and 16-channel VAE, built
from configs with random weights and a tokenizer made here (a word-level vocabulary with Qwen's special tokens and
its chat template: no download), saved the three ways users keep Z-Image: a diffusers folder, one ComfyUI-layout
checkpoint, and split files (transformer, qwen_3_4b, ae). ``tiny_config_dir`` writes what
``resources/models/zimage`` holds, at the tiny sizes."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from guitrainer.base.paths import resources_dir
from helpers import tiny_flux

QWEN_WIDTH = 32
#: Qwen3's chat template for one user message with the assistant's turn opened, as ZImagePipeline renders it
#: (enable_thinking=True adds nothing)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer() -> Any:
    """A word-level tokenizer with Qwen's special tokens, padding on the right with <|endoftext|>."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>"]
    words = [*tiny_flux.WORDS, "user", "assistant", "shape", "1", "2", "3", "0", "sks"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(specials + words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|endoftext|>", unk_token="<unk>",
                                   additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def transformer_config() -> dict[str, Any]:
    return {
        "in_channels": 16, "dim": 64, "n_layers": 2, "n_refiner_layers": 1, "n_heads": 4, "n_kv_heads": 4,
        "cap_feat_dim": QWEN_WIDTH, "axes_dims": [4, 6, 6], "axes_lens": [256, 64, 64],
    }


def qwen3_config(vocab: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab, "hidden_size": QWEN_WIDTH, "intermediate_size": 64, "num_hidden_layers": 3,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 1024,
        "tie_word_embeddings": True, "rms_norm_eps": 1e-6, "use_cache": False,
    }


@dataclass
class TinyZimage:
    transformer: Any
    vae: Any
    qwen3: Any
    tokenizer: Any
    scheduler: Any


def build(seed: int = 0) -> TinyZimage:
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, ZImageTransformer2DModel
    from transformers import Qwen3Config, Qwen3Model

    torch.manual_seed(seed)
    tok = tokenizer()
    scheduler_cfg = json.loads((resources_dir() / "models" / "zimage" / "scheduler" / "scheduler_config.json").read_text())
    transformer = ZImageTransformer2DModel(**transformer_config())
    with torch.no_grad():  # diffusers starts the pad tokens at zero; random ones show a mix-up of the two
        transformer.x_pad_token.normal_()
        transformer.cap_pad_token.normal_()
    return TinyZimage(
        transformer=transformer,
        vae=AutoencoderKL(**tiny_flux.vae_config()),
        qwen3=Qwen3Model(Qwen3Config(**qwen3_config(len(tok)))),
        tokenizer=tok,
        scheduler=FlowMatchEulerDiscreteScheduler.from_config(scheduler_cfg),
    )


def save_diffusers(tiny: TinyZimage, folder: Path) -> Path:
    from diffusers import ZImagePipeline

    ZImagePipeline(scheduler=tiny.scheduler, vae=tiny.vae, text_encoder=tiny.qwen3, tokenizer=tiny.tokenizer,
                   transformer=tiny.transformer).save_pretrained(folder)
    return folder


def tiny_config_dir(tiny: TinyZimage, folder: Path, *, with_tokenizer: bool = True) -> Path:
    configs = {
        "transformer": {"_class_name": "ZImageTransformer2DModel", **transformer_config()},
        "vae": {"_class_name": "AutoencoderKL", **tiny_flux.vae_config()},
        "text_encoder": {"architectures": ["Qwen3Model"], "model_type": "qwen3", **qwen3_config(len(tiny.tokenizer))},
    }
    for part, cfg in configs.items():
        (folder / part).mkdir(parents=True, exist_ok=True)
        (folder / part / "config.json").write_text(json.dumps(cfg, indent=2), encoding="utf-8")
    (folder / "scheduler").mkdir(exist_ok=True)
    shutil.copy(resources_dir() / "models" / "zimage" / "scheduler" / "scheduler_config.json", folder / "scheduler")
    if with_tokenizer:
        tiny.tokenizer.save_pretrained(str(folder / "tokenizer"))
    return folder


def original_transformer(tiny: TinyZimage) -> dict[str, torch.Tensor]:
    """The transformer in the original layout, as the released file and ComfyUI keep it: written from diffusers'
    names by diffusers' renames run backwards (``convert_z_image_transformer_checkpoint_to_diffusers``'s dict), q/k/v
    fused by rows; written here, not by the app's converter, so the loading test checks that converter."""
    renames = {"all_final_layer.2-1.": "final_layer.", "all_x_embedder.2-1.": "x_embedder.",
               ".attention.to_out.0.": ".attention.out.", ".attention.norm_k.": ".attention.k_norm.",
               ".attention.norm_q.": ".attention.q_norm."}
    sd = tiny.transformer.state_dict()
    out: dict[str, torch.Tensor] = {}
    for key, value in sd.items():
        if ".attention.to_k." in key or ".attention.to_v." in key:
            continue
        if ".attention.to_q." in key:
            out[key.replace(".to_q.", ".qkv.")] = torch.cat(
                [sd[key], sd[key.replace(".to_q.", ".to_k.")], sd[key.replace(".to_q.", ".to_v.")]], dim=0)
            continue
        for old, new in renames.items():
            key = key.replace(old, new)
        out[key] = value.clone().contiguous()
    out["norm_final.weight"] = torch.ones(tiny.transformer.config.dim)  # in the released file, unused
    return out


def qwen3_file(tiny: TinyZimage) -> dict[str, torch.Tensor]:
    """``qwen_3_4b.safetensors``: Hugging Face Qwen3ForCausalLM names (``model.`` before the layers)."""
    return {f"model.{k}": v.clone() for k, v in tiny.qwen3.state_dict().items()}


def save_comfy_checkpoint(tiny: TinyZimage, path: Path) -> Path:
    from safetensors.torch import save_file

    sd = {f"model.diffusion_model.{k}": v for k, v in original_transformer(tiny).items()}
    sd |= {f"text_encoders.qwen3_4b.transformer.{k}": v for k, v in qwen3_file(tiny).items()}
    sd |= {f"vae.{k}": v for k, v in tiny_flux.ae_file(tiny).items()}  # type: ignore[arg-type]
    save_file(sd, str(path))
    return path


def save_split(tiny: TinyZimage, folder: Path) -> dict[str, Path]:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "transformer": (folder / "z_image_tiny_bf16.safetensors", original_transformer(tiny)),
        "qwen3": (folder / "qwen_3_tiny.safetensors", qwen3_file(tiny)),
        "vae": (folder / "ae.safetensors", tiny_flux.ae_file(tiny)),  # type: ignore[arg-type]
    }
    for path, sd in files.values():
        save_file(sd, str(path))
    return {part: path for part, (path, _) in files.items()}
