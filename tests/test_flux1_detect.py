"""Flux.1's files recognised from their headers alone (names and shapes, no torch): dev / schnell, with or
without ComfyUI's prefix, the variants refused by name, and each part of a split install."""

from __future__ import annotations

from guitrainer.core.families import flux1
from guitrainer.core.families.registry import facts

H = 3072


def header(shapes: dict[str, list[int]], prefix: str = "") -> dict[str, dict]:
    return {prefix + k: {"dtype": "BF16", "shape": v, "data_offsets": [0, 0]} for k, v in shapes.items()}


def transformer(*, dev: bool = True, channels: int = 64) -> dict[str, list[int]]:
    """The fingerprint keys of a full-size BFL transformer (a real file has 780; these are the ones that tell)."""
    shapes = {
        "img_in.weight": [H, channels],
        "txt_in.weight": [H, 4096],
        "vector_in.in_layer.weight": [H, 768],
        "double_blocks.0.img_attn.norm.key_norm.scale": [128],
        "double_blocks.0.img_attn.qkv.weight": [3 * H, H],
        "single_blocks.37.linear1.weight": [3 * H + 4 * H, H],
        "final_layer.linear.weight": [64, H],
    }
    if dev:
        shapes |= {"guidance_in.in_layer.weight": [H, 256], "guidance_in.in_layer.bias": [H]}
    return shapes


T5 = {"encoder.block.0.layer.0.SelfAttention.q.weight": [4096, 4096], "shared.weight": [32128, 4096],
      "encoder.block.0.layer.1.DenseReluDense.wi_0.weight": [10240, 4096]}
CLIP_L = {"text_model.encoder.layers.0.self_attn.q_proj.weight": [768, 768],
          "text_model.embeddings.position_embedding.weight": [77, 768]}
CLIP_G = {"text_model.encoder.layers.0.self_attn.q_proj.weight": [1280, 1280],
          "text_model.embeddings.position_embedding.weight": [77, 1280], "text_projection.weight": [1280, 1280]}
AE = {"encoder.conv_in.weight": [128, 3, 3, 3], "encoder.conv_out.weight": [32, 512, 3, 3],
      "decoder.conv_in.weight": [512, 16, 3, 3]}
SD_VAE = {"encoder.conv_in.weight": [128, 3, 3, 3], "encoder.conv_out.weight": [8, 512, 3, 3],
          "decoder.conv_in.weight": [512, 4, 3, 3], "quant_conv.weight": [8, 8, 1, 1]}


def detect(tensors: dict, name: str = "model.safetensors", metadata: dict | None = None):
    return flux1.detect_file(tensors, metadata or {}, name)


def test_dev_and_schnell_are_told_apart_by_the_guidance_embedder_with_or_without_the_prefix():
    for prefix in ("", "model.diffusion_model."):
        ok, level, message, pred = detect(header(transformer(dev=True), prefix))
        assert ok and pred is None and "Flux.1 dev" in message
        ok, level, message, _ = detect(header(transformer(dev=False), prefix))
        assert ok and "Flux.1 schnell" in message
        assert flux1.variant_of(header(transformer(dev=False), prefix)) == "schnell"


def test_a_transformer_only_file_is_accepted_with_a_warning_naming_the_three_files_to_add():
    ok, level, message, _ = detect(header(transformer()), "flux1-dev.safetensors")
    assert ok and level == "warning"
    for needed in ("t5xxl_fp16.safetensors", "clip_l.safetensors", "ae.safetensors", "T5-XXL", "CLIP-L", "VAE"):
        assert needed in message, message


def test_a_comfyui_checkpoint_with_every_part_is_complete():
    tensors = header(transformer(), "model.diffusion_model.") | header(T5, flux1.T5_PREFIX)
    tensors |= header(CLIP_L, flux1.CLIP_L_PREFIX) | header(AE, "vae.")
    ok, level, message, _ = detect(tensors)
    assert (ok, level) == (True, "info"), message
    assert set(flux1.file_parts(tensors)) == {"transformer", "t5", "clip_l", "vae"}


def test_a_diffusers_named_transformer_file_is_flux():
    tensors = header({
        "x_embedder.weight": [H, 64], "transformer_blocks.0.attn.add_k_proj.weight": [H, H],
        "single_transformer_blocks.0.proj_mlp.weight": [4 * H, H],
        "time_text_embed.guidance_embedder.linear_1.bias": [H],
    })
    ok, _level, message, _ = detect(tensors, "diffusion_pytorch_model.safetensors")
    assert ok and "Flux.1 dev" in message and "diffusers" in message


def test_the_variants_and_later_families_are_refused_by_name():
    cases = {
        "Fill": header(transformer(channels=384)),
        "Depth or Canny": header(transformer(channels=128)),
        "FLUX.2": header({"single_stream_modulation.lin.weight": [3 * H, H], "double_blocks.0.img_attn.norm.key_norm.scale": [128]}),
    }
    for what, tensors in cases.items():
        ok, level, message, _ = detect(tensors)
        assert (ok, level) == (False, "error") and what in message, message
    ok, _level, message, _ = detect(header(transformer()), "flux1-kontext-dev.safetensors")
    assert not ok and "Kontext" in message
    ok, _level, message, _ = detect(header(transformer()), "model.safetensors", {"modelspec.title": "FLUX.1 Kontext [dev]"})
    assert not ok and "Kontext" in message


def test_files_that_are_no_flux_transformer_are_left_to_others():
    assert detect(header(T5)) is None  # a part, not a model
    assert detect(header({"model.diffusion_model.input_blocks.0.0.weight": [320, 4, 3, 3]})) is None  # SD
    lora = header({"lora_unet_double_blocks_0_img_attn_qkv.lora_down.weight": [4, H]})
    assert detect(lora) is None
    # Chroma keeps Flux's block names but is a family of its own (core/families/chroma.py takes its files)
    assert detect(header(transformer(dev=False) | {"distilled_guidance_layer.in_proj.bias": [5120]})) is None


def test_part_kind_recognises_each_file_of_a_split_install():
    assert flux1.part_kind(header(transformer())) == "transformer"
    assert flux1.part_kind(header(T5)) == "t5"
    assert flux1.part_kind(header(CLIP_L)) == "clip_l"
    assert flux1.part_kind(header({k.removeprefix("text_model."): v for k, v in CLIP_L.items()})) == "clip_l"
    assert flux1.part_kind(header(CLIP_G)) == "clip_g"
    assert flux1.part_kind(header(AE)) == "vae"
    assert flux1.vae_latent_channels(header(AE)) == 16 and flux1.vae_latent_channels(header(SD_VAE)) == 4
    assert flux1.part_kind(header({"foo.weight": [3]})) is None


def _problems(*files: tuple[str, dict]) -> list[str]:
    return flux1.split_install_problems([(name, header(shapes)) for name, shapes in files])


def test_a_complete_split_install_has_no_problem_in_any_order():
    assert _problems(("flux1-dev.safetensors", transformer()), ("ae.safetensors", AE), ("clip_l.safetensors", CLIP_L),
                     ("t5xxl_fp16.safetensors", T5)) == []


def test_split_install_problems_name_the_missing_and_the_wrong_parts():
    missing = _problems(("flux1-dev.safetensors", transformer()), ("t5xxl_fp16.safetensors", T5), ("ae.safetensors", AE))
    assert len(missing) == 1 and "CLIP-L" in missing[0] and "clip_l.safetensors" in missing[0]

    wrong = _problems(("flux1-dev.safetensors", transformer()), ("t5.safetensors", T5), ("clip_g.safetensors", CLIP_G),
                      ("ae.safetensors", AE))
    assert any("clip_g.safetensors is a CLIP-G" in p and "clip_l.safetensors" in p for p in wrong), wrong
    assert any("Missing" in p and "CLIP-L" in p for p in wrong)

    sd_vae = _problems(("flux1-dev.safetensors", transformer()), ("t5.safetensors", T5), ("clip_l.safetensors", CLIP_L),
                       ("sd_vae.safetensors", SD_VAE))
    assert any("sd_vae.safetensors is a 4-channel VAE" in p for p in sd_vae), sd_vae

    twice = _problems(("flux1-dev.safetensors", transformer()), ("a.safetensors", T5), ("b.safetensors", T5),
                      ("clip_l.safetensors", CLIP_L), ("ae.safetensors", AE))
    assert twice == ["The T5-XXL text encoder was chosen twice: a.safetensors and b.safetensors; keep one."]

    first = _problems(("t5xxl_fp16.safetensors", T5), ("clip_l.safetensors", CLIP_L), ("ae.safetensors", AE))
    assert "t5xxl_fp16.safetensors is the T5-XXL text encoder file, not the Flux transformer" in first[0]

    fill = _problems(("fill.safetensors", transformer(channels=384)), ("t5.safetensors", T5),
                     ("clip_l.safetensors", CLIP_L), ("ae.safetensors", AE))
    assert any("Fill" in p for p in fill)

    stray = _problems(("flux1-dev.safetensors", transformer()), ("notes.safetensors", {"foo.weight": [3]}))
    assert any("notes.safetensors is no part of a Flux model" in p for p in stray)


def test_folder_detection_takes_only_the_flux_pipeline():
    assert flux1.detect_folder({"_class_name": "FluxPipeline"})
    for other in ("FluxFillPipeline", "FluxKontextPipeline", "StableDiffusion3Pipeline", ""):
        assert not flux1.detect_folder({"_class_name": other})


def test_the_facts_the_rest_of_the_app_reads():
    f = facts("flux1")
    assert f is flux1.FACTS and f.label == "Flux.1" and f.objective == "flow" and f.split_files
    assert f.image_tokens(1024, 1024) == 4096  # (1024 / 8 / 2)²: one token per 2x2 latent pixels
    assert f.trainable_text_encoders == (0,) and f.text_encoders == ("CLIP-L", "T5-XXL")
    assert f.precision.recommended == "bf16" and any("9097" in s for s in f.precision.sources)
    assert f.flow_defaults["discrete_flow_shift"] == 3.1582 and f.flow_defaults["timestep_sampling"] == "shift"
