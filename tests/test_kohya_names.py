"""Key names of full-size SD 1.5 and SDXL files (meta device) are kohya sd-scripts' names.

kohya trains SDXL on the original (LDM/SGM) UNet layout, so its SDXL files say ``input_blocks_4_1`` where the
diffusers spelling is ``down_blocks_1_attentions_0``; SD 1.x keeps the diffusers spelling. The literal names
below are the ones in kohya-trained SDXL / SD 1.5 LoRA and LoCon files as ComfyUI and A1111 load them; the
layer behind every name is checked with the test helper's own layout table (tests/helpers/lycoris_reader.py),
which is written from the LDM UNet's construction, not from guitrainer's mapping.
"""

from __future__ import annotations

import copy

import pytest
import torch
from helpers import lycoris_reader

from guitrainer.config import NetworkConfig
from guitrainer.engine.memory import model_spec
from guitrainer.engine.network import lycoris_keys, variants

pytestmark = pytest.mark.slow  # every test here builds full-size models on the meta device or a tiny one

SDXL_NAMES = {
    "lora": [
        "lora_unet_input_blocks_4_1_transformer_blocks_0_attn1_to_q",
        "lora_unet_input_blocks_8_1_transformer_blocks_9_attn2_to_k",
        "lora_unet_middle_block_1_transformer_blocks_9_ff_net_2",
        "lora_unet_middle_block_1_proj_in",
        "lora_unet_output_blocks_0_1_proj_out",
        "lora_unet_output_blocks_5_1_transformer_blocks_1_ff_net_0_proj",
        "lora_te1_text_model_encoder_layers_0_self_attn_q_proj",
        "lora_te2_text_model_encoder_layers_31_self_attn_out_proj",
    ],
    "locon": [
        "lora_unet_input_blocks_1_0_in_layers_2",
        "lora_unet_input_blocks_3_0_op",
        "lora_unet_input_blocks_4_0_skip_connection",
        "lora_unet_middle_block_2_emb_layers_1",
        "lora_unet_output_blocks_2_2_conv",
        "lora_unet_output_blocks_5_2_conv",
        "lora_unet_output_blocks_8_0_out_layers_3",
        "lora_te2_text_model_encoder_layers_31_mlp_fc2",
    ],
}
SD15_NAMES = {
    "lora": [
        "lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn1_to_q",
        "lora_unet_mid_block_attentions_0_proj_in",
        "lora_unet_up_blocks_3_attentions_2_transformer_blocks_0_ff_net_2",
        "lora_te_text_model_encoder_layers_11_self_attn_v_proj",
    ],
    "locon": [
        "lora_unet_down_blocks_0_resnets_0_conv1",
        "lora_unet_down_blocks_0_downsamplers_0_conv",
        "lora_unet_up_blocks_0_upsamplers_0_conv",
        "lora_unet_mid_block_resnets_1_time_emb_proj",
        "lora_te_text_model_encoder_layers_0_mlp_fc1",
    ],
}


@pytest.fixture(scope="module", params=["sd15", "sdxl"])
def meta_models(request):
    family = request.param
    unet = model_spec.build_on_meta(family, "unet")
    parts = [p for p in ("text_encoder", "text_encoder_2") if p in model_spec.component_configs(family)]
    return family, unet, [model_spec.build_on_meta(family, p) for p in parts]


def _injected(unet, tes, kind):
    unet, tes = copy.deepcopy(unet), [copy.deepcopy(te) for te in tes]
    net = NetworkConfig(type=kind, rank=4, alpha=2, conv_rank=4, conv_alpha=2, target_modules="attention_ff_proj")
    with torch.device("meta"):
        variants.inject_unet(unet, net)
        for te in tes:
            variants.inject_text_encoder(te, net)
    return unet, tes


@pytest.mark.parametrize("kind", ["lora", "locon", "lokr"])
def test_full_size_key_names_are_kohyas(meta_models, kind):
    family, base_unet, base_tes = meta_models
    unet, tes = _injected(base_unet, base_tes, kind)
    modules = {k.partition(".")[0] for k in lycoris_keys.key_names(unet, tes)}
    expected = SDXL_NAMES if family == "sdxl" else SD15_NAMES
    wanted = expected["lora"] + (expected["locon"] if kind != "lora" else [])
    if kind == "lora":  # plain LoRA trains the text encoders' attention only
        wanted = [n for n in wanted if "_mlp_" not in n]
    assert set(wanted) <= modules, sorted(set(wanted) - modules)
    unet_names = [m for m in modules if m.startswith("lora_unet_")]
    diffusers_spelling = [m for m in unet_names if any(b in m for b in ("down_blocks", "mid_block", "up_blocks"))]
    if family == "sdxl":
        assert diffusers_spelling == []
    else:
        assert len(diffusers_spelling) == len(unet_names)


def test_every_name_means_the_layer_it_was_trained_on(meta_models):
    """Each name the writer gives a UNet layer is, in the helper's independent layout table, that same layer."""
    family, base_unet, base_tes = meta_models
    unet, _ = _injected(base_unet, [], "locon")
    names = list(dict.fromkeys(k.partition(".")[0] for k in lycoris_keys.key_names(unet, [])))
    paths = list(variants.adapter_layers(unet))
    assert len(names) == len(paths) > 100
    table = lycoris_reader.key_map(base_unet, [])
    base_modules = dict(base_unet.named_modules())
    for name, path in zip(names, paths):
        assert table.get(name) is base_modules[path], (name, path)
