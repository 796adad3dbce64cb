"""SD 3 / 3.5 files told apart from their headers (shapes only, no torch): which model, what a checkpoint holds,
what a split install lacks, and clear refusals of everything else.

The fake headers are written from the MMDiT's structure (Stability's ``mmditx.py``, as the research note
lists it), not from guitrainer's converter; their parameter counts are the released models' own, as counted on
``meta`` from diffusers' ``SD3Transformer2DModel`` (8,056,627,520 for 3.5 Large, 2,243,171,520 for 3.5 Medium,
both without the ``pos_embed`` grid), which checks the headers themselves.
"""

from __future__ import annotations

import math

import pytest

from guitrainer.core.families import parts, registry, sd35


def mmdit_header(depth: int, *, qk: bool, dual: tuple[int, ...] = (), grid: int = 192, prefix: str = "") -> dict:
    """The original-layout tensor table of an MMDiT of ``depth`` (hidden 64·depth, MLP 4·hidden)."""
    h = 64 * depth
    t: dict[str, list[int]] = {
        "x_embedder.proj.weight": [h, 16, 2, 2], "x_embedder.proj.bias": [h], "pos_embed": [1, grid * grid, h],
        "t_embedder.mlp.0.weight": [h, 256], "t_embedder.mlp.0.bias": [h], "t_embedder.mlp.2.weight": [h, h],
        "t_embedder.mlp.2.bias": [h], "y_embedder.mlp.0.weight": [h, 2048], "y_embedder.mlp.0.bias": [h],
        "y_embedder.mlp.2.weight": [h, h], "y_embedder.mlp.2.bias": [h], "context_embedder.weight": [h, 4096],
        "context_embedder.bias": [h], "final_layer.linear.weight": [64, h], "final_layer.linear.bias": [64],
        "final_layer.adaLN_modulation.1.weight": [2 * h, h], "final_layer.adaLN_modulation.1.bias": [2 * h],
    }

    def linear(name: str, out: int, inp: int) -> None:
        t[f"{name}.weight"], t[f"{name}.bias"] = [out, inp], [out]

    for i in range(depth):
        b = f"joint_blocks.{i}"
        last = i == depth - 1
        linear(f"{b}.x_block.attn.qkv", 3 * h, h)
        linear(f"{b}.x_block.attn.proj", h, h)
        linear(f"{b}.x_block.mlp.fc1", 4 * h, h)
        linear(f"{b}.x_block.mlp.fc2", h, 4 * h)
        linear(f"{b}.x_block.adaLN_modulation.1", (9 if i in dual else 6) * h, h)
        linear(f"{b}.context_block.attn.qkv", 3 * h, h)
        streams = ["x_block.attn", "context_block.attn"]
        if i in dual:
            linear(f"{b}.x_block.attn2.qkv", 3 * h, h)
            linear(f"{b}.x_block.attn2.proj", h, h)
            streams.append("x_block.attn2")
        if qk:
            for s in streams:
                t[f"{b}.{s}.ln_q.weight"], t[f"{b}.{s}.ln_k.weight"] = [64], [64]
        if last:
            linear(f"{b}.context_block.adaLN_modulation.1", 2 * h, h)
        else:
            linear(f"{b}.context_block.attn.proj", h, h)
            linear(f"{b}.context_block.mlp.fc1", 4 * h, h)
            linear(f"{b}.context_block.mlp.fc2", h, 4 * h)
            linear(f"{b}.context_block.adaLN_modulation.1", 6 * h, h)
    return {f"{prefix}{k}": {"dtype": "BF16", "shape": s, "data_offsets": [0, 0]} for k, s in t.items()}


def large(prefix: str = "") -> dict:
    return mmdit_header(38, qk=True, grid=192, prefix=prefix)


def medium(prefix: str = "") -> dict:
    return mmdit_header(24, qk=True, dual=tuple(range(13)), grid=384, prefix=prefix)


def sd3_medium(prefix: str = "") -> dict:
    return mmdit_header(24, qk=False, grid=192, prefix=prefix)


def _entry(shape: list[int]) -> dict:
    return {"dtype": "F16", "shape": shape, "data_offsets": [0, 0]}


def clip(width: int, prefix: str = "", projection: bool = True) -> dict:
    t = {f"{prefix}text_model.embeddings.position_embedding.weight": _entry([77, width]),
         f"{prefix}text_model.embeddings.token_embedding.weight": _entry([49408, width]),
         f"{prefix}text_model.encoder.layers.0.self_attn.q_proj.weight": _entry([width, width]),
         f"{prefix}text_model.final_layer_norm.weight": _entry([width])}
    if projection:
        t[f"{prefix}text_projection.weight"] = _entry([width, width])
    return t


def t5(prefix: str = "", gated: bool = True) -> dict:
    ff = "wi_0" if gated else "wi"
    return {f"{prefix}shared.weight": _entry([32128, 4096]),
            f"{prefix}encoder.block.0.layer.0.SelfAttention.q.weight": _entry([4096, 4096]),
            f"{prefix}encoder.block.0.layer.1.DenseReluDense.{ff}.weight": _entry([10240, 4096])}


def vae(prefix: str = "", channels: int = 16) -> dict:
    return {f"{prefix}encoder.conv_in.weight": _entry([128, 3, 3, 3]),
            f"{prefix}encoder.down.0.block.0.conv1.weight": _entry([128, 128, 3, 3]),
            f"{prefix}encoder.conv_out.weight": _entry([2 * channels, 512, 3, 3]),
            f"{prefix}decoder.conv_in.weight": _entry([512, channels, 3, 3])}


def detect(tensors: dict, name: str = "m.safetensors"):
    return sd35.detect_file(tensors, {}, name)


# --------------------------------------------------------------------------- the released models


def test_the_fake_headers_have_the_released_models_parameter_counts():
    """The counts diffusers' SD3Transformer2DModel gives on meta (pos_embed is a buffer, not counted)."""
    def count(header: dict) -> int:
        return sum(math.prod(e["shape"]) for k, e in header.items() if k != "pos_embed")

    assert count(large()) == 8_056_627_520
    assert count(medium()) == 2_243_171_520


@pytest.mark.parametrize(
    ("header", "label", "version", "architecture"),
    [
        (large(), "SD 3.5 Large (38 joint blocks, 8.1 B parameters)", "5-large", "stable-diffusion-v3.5-large"),
        (medium(), "SD 3.5 Medium (24 joint blocks, 2.2 B parameters)", "5-medium", "stable-diffusion-v3.5-medium"),
        (sd3_medium(), "SD 3 Medium (24 joint blocks, 2.0 B parameters)", "medium", "stable-diffusion-v3-medium"),
    ],
)
def test_each_model_is_named_as_sd_scripts_names_it(header, label, version, architecture):
    shape = sd35.mmdit_shape(header)
    assert not isinstance(shape, str)
    assert (shape.version, shape.variant.architecture) == (version, architecture)
    ok, level, message, _ = detect(header)
    assert ok and level == "warning"  # a transformer alone: the text encoders and VAE are separate files
    assert label in message
    assert "clip_l.safetensors, clip_g.safetensors, the VAE" in message


def test_stabilitys_checkpoint_with_its_vae_needs_only_the_text_encoders():
    header = {**large("model.diffusion_model."), **vae("first_stage_model.")}
    ok, level, message, _ = detect(header, "sd3.5_large.safetensors")
    assert (ok, level) == (True, "warning")
    assert "SD 3.5 Large" in message and "with its VAE" in message
    assert "clip_l.safetensors, clip_g.safetensors (and t5xxl" in message


def test_an_all_in_one_checkpoint_is_complete_with_or_without_t5():
    every = {**sd3_medium("model.diffusion_model."), **vae("first_stage_model."),
             **clip(768, "text_encoders.clip_l.transformer."), **clip(1280, "text_encoders.clip_g.transformer.")}
    ok, level, message, _ = detect({**every, **t5("text_encoders.t5xxl.transformer.")})
    assert (ok, level) == (True, "info") and "CLIP-L, CLIP-G and T5-XXL" in message
    ok, level, message, _ = detect(every)
    assert (ok, level) == (True, "info") and "no T5-XXL inside" in message


def test_an_unreleased_depth_trains_and_says_so():
    ok, _, message, _ = detect(mmdit_header(3, qk=True, dual=(0,), grid=16))
    assert ok
    assert "an SD 3.5 Medium-type MMDiT of 3 joint blocks" in message and "the released model has 24" in message


def test_names_without_shapes_are_enough_to_tell_the_models_apart():
    """A pickle's key list has no shapes: structure alone names the model (the loader checks the shapes)."""
    names = {k: None for k in medium()}
    shape = sd35.mmdit_shape(names)
    assert not isinstance(shape, str) and shape.version == "5-medium" and shape.blocks == 24


# --------------------------------------------------------------------------- refusals


def test_a_lora_is_refused_as_a_base_model():
    lora = {"lora_unet_joint_blocks_0_x_block_attn_qkv.lora_down.weight": _entry([4, 2432])}
    ok, level, message, _ = detect(lora)
    assert (ok, level) == (False, "error") and "a LoRA for SD 3 / 3.5" in message and "Continue from LoRA" in message


def test_a_diffusers_layout_transformer_file_points_to_its_folder():
    header = {"pos_embed.proj.weight": _entry([2432, 16, 2, 2]),
              "transformer_blocks.0.attn.add_k_proj.weight": _entry([2432, 2432])}
    ok, _, message, _ = detect(header)
    assert not ok and "diffusers layout" in message and "model_index.json" in message


def test_a_conditioned_variant_with_more_input_channels_is_refused():
    header = large()
    header["x_embedder.proj.weight"]["shape"] = [2432, 32, 2, 2]
    ok, _, message, _ = detect(header)
    assert not ok and "32 input channels, not 16" in message


def test_a_scaled_fp8_file_is_refused():
    header = {**large("model.diffusion_model."), "model.diffusion_model.scaled_fp8": _entry([0])}
    header["model.diffusion_model.joint_blocks.0.x_block.attn.qkv.scale_weight"] = _entry([1])
    ok, _, message, _ = detect(header)
    assert not ok and "scaled-fp8" in message


def test_an_incomplete_transformer_is_refused():
    header = large()
    del header["final_layer.linear.weight"]
    ok, _, message, _ = detect(header)
    assert not ok and "final_layer.linear.weight is missing" in message


def test_blocks_that_do_not_fit_the_width_are_refused():
    """ComfyUI and sd-scripts build width / 64 blocks: a file with another count could not use our LoRA there."""
    header = {k: v for k, v in large().items() if not k.startswith("joint_blocks.37.")}
    ok, _, message, _ = detect(header)
    assert not ok and "37 joint blocks of width 2432" in message and "has 38" in message


def test_other_families_files_are_not_sd3s():
    assert detect({"double_blocks.0.img_attn.qkv.weight": _entry([9216, 3072]), "img_in.weight": _entry([3072, 64])}) is None
    assert detect({"model.diffusion_model.input_blocks.0.0.weight": _entry([320, 4, 3, 3])}) is None
    assert detect(clip(768)) is None


def test_the_folder_detector_reads_model_index():
    assert sd35.detect_folder({"_class_name": "StableDiffusion3Pipeline"})
    assert sd35.detect_folder({"_class_name": "StableDiffusion3Img2ImgPipeline"})
    assert not sd35.detect_folder({"_class_name": "FluxPipeline"})


# --------------------------------------------------------------------------- split files


@pytest.mark.parametrize(
    ("header", "kind"),
    [
        (large(), "transformer"),
        ({**large("model.diffusion_model."), **vae("first_stage_model.")}, "transformer"),
        (clip(768, projection=False), "clip_l"),
        (clip(1280), "clip_g"),
        (clip(768, "text_encoders.clip_l.transformer."), "clip_l"),
        (t5(), "t5"),
        (vae(), "vae"),
        (vae("first_stage_model."), "vae"),
        (vae(channels=4), None),
        (clip(1024), None),
        (t5(gated=False), None),
    ],
)
def test_part_kind_names_each_file_of_a_split_install(header, kind):
    assert sd35.part_kind(header) == kind


def test_files_of_the_wrong_kind_are_described_in_plain_words():
    assert parts.describe(vae(channels=4)) == "a 4-channel VAE (SD 1.x / SDXL)"
    assert "width 1024 (OpenCLIP ViT-H, SD 2.x's)" in parts.describe(clip(1024))
    assert "T5 v1.0" in parts.describe(t5(gated=False))
    assert parts.describe(clip(1280)) == "a CLIP-G (OpenCLIP bigG) text encoder"
    assert "LoRA" in parts.describe({"x.lora_down.weight": _entry([4, 8])})


def _check(denoiser: dict, encoders: list[tuple[str, dict]], vae_file: tuple[str, dict] | None = None):
    return sd35.check_parts(("sd3.5_large.safetensors", denoiser), encoders, vae_file)


def test_a_complete_split_install_is_ok_and_t5_is_optional():
    denoiser = {**large("model.diffusion_model."), **vae("first_stage_model.")}
    report = _check(denoiser, [("clip_g.safetensors", clip(1280)), ("clip_l.safetensors", clip(768)),
                               ("t5xxl_fp16.safetensors", t5())])
    assert report.ok and report.notes == ()
    assert report.sources["vae"] == ("sd3.5_large.safetensors", "first_stage_model.")
    assert report.sources["clip_l"] == ("clip_l.safetensors", "")
    report = _check(denoiser, [("clip_g.safetensors", clip(1280)), ("clip_l.safetensors", clip(768))])
    assert report.ok and "T5-XXL is not given" in report.notes[0]


def test_each_missing_part_is_named():
    report = _check(large(), [("clip_l.safetensors", clip(768))])
    assert not report.ok
    assert report.problems == (
        "CLIP-G is missing (sd3.5_large.safetensors has none inside): add clip_g.safetensors",
        "VAE is missing (sd3.5_large.safetensors has none inside): add the VAE (.safetensors)",
    )


def test_a_part_of_the_wrong_kind_is_named_with_what_it_is():
    report = _check(large(), [("clip_l.safetensors", clip(768)), ("clip_g.safetensors", vae())],
                    ("sdxl_vae.safetensors", vae(channels=4)))
    assert "clip_g.safetensors is a 16-channel VAE (Flux / SD 3): a text encoder of SD 3.5 is CLIP-L, CLIP-G or T5-XXL" in report.problems
    assert "sdxl_vae.safetensors is a 4-channel VAE (SD 1.x / SDXL): SD 3.5 needs its own 16-channel VAE" in report.problems


def test_a_flux_transformer_is_not_taken_for_sd35s():
    flux = {"double_blocks.0.img_attn.qkv.weight": _entry([9216, 3072]), "img_in.weight": _entry([3072, 64])}
    report = sd35.check_parts(("flux1-dev.safetensors", flux), [("clip_l.safetensors", clip(768))])
    assert report.problems[0].startswith("flux1-dev.safetensors is a diffusion model (transformer or UNet), not a text")


def test_a_part_given_twice_is_an_error_and_a_separate_file_replaces_the_one_inside():
    every = {**large("model.diffusion_model."), **vae("first_stage_model."),
             **clip(768, "text_encoders.clip_l.transformer."), **clip(1280, "text_encoders.clip_g.transformer.")}
    report = _check(every, [("my_clip_l.safetensors", clip(768))])
    assert report.ok and report.sources["clip_l"] == ("my_clip_l.safetensors", "")
    assert "CLIP-L is taken from my_clip_l.safetensors, not from sd3.5_large.safetensors" in report.notes
    report = _check(every, [("a.safetensors", clip(768)), ("b.safetensors", clip(768))])
    assert "CLIP-L is given twice: a.safetensors and b.safetensors; keep one" in report.problems


# --------------------------------------------------------------------------- facts


def test_the_registry_finds_sd35s_facts_and_they_cite_their_sources():
    facts = registry.facts("sd35")
    assert facts is sd35.FACTS
    assert (facts.label, facts.architecture, facts.objective, facts.native_resolution) == ("SD 3.5", "transformer", "flow", 1024)
    assert (facts.latent_channels, facts.patch, facts.text_encoders) == (16, 2, ("CLIP-L", "CLIP-G", "T5-XXL"))
    assert facts.trainable_text_encoders == (0, 1)
    assert facts.precision.recommended == "bf16" and facts.precision.released == "bf16"
    assert any("Diffusers welcomes Stable Diffusion 3.5 Large" in s for s in facts.precision.sources)
    assert any("#9295" in s for s in facts.precision.sources)
    assert facts.split_files and facts.flow_defaults["sources"]
    # 1024² px -> 128² latents -> 64² tokens
    assert facts.image_tokens(1024, 1024) == 4096


def test_the_flow_defaults_resolve_to_diffusers_sd3_recipe():
    from helpers import config_with

    from guitrainer.engine import flow_matching

    s = flow_matching.settings_for(config_with(), sd35.FACTS.flow_defaults)
    assert (s.timestep_sampling, s.shift, s.model_prediction_type, s.weighting_scheme) == ("logit_normal", 3.0, "sigma_scaled", "none")
    assert (s.logit_mean, s.logit_std) == (0.0, 1.0)
