"""The shipped demo base model is what ``resources/make_demo_base.py`` describes, and it draws what it is asked.

Nothing is retrained here: the architecture, the tokenizer and the metadata are compared with the script's own
configuration, and the model's samples of its own captions are read with the Demo's shape measure.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

from guitrainer.core.demo.measure import read_image
from guitrainer.core.demo.shapes import BASE_SHAPES, PALETTE, SIZE
from guitrainer.engine.models.demo import (
    DEMO_MARKER,
    DEMO_VERSION,
    demo_components,
    demo_model_dir,
    demo_vocab,
    ensure_demo_model,
    write_demo_tokenizer,
)
from guitrainer.engine.models.types import ModelLoadError

ROOT = Path(__file__).resolve().parent.parent
#: the Demo's promise: of its own captions, at least this many prompts' samples show the shape and colour named
MIN_PROMPTS_SHOWN = 8


def _script():
    spec = importlib.util.spec_from_file_location("make_demo_base", ROOT / "resources" / "make_demo_base.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_demo_base", module)
    spec.loader.exec_module(module)
    return module


def _marker() -> dict:
    return json.loads((ensure_demo_model() / DEMO_MARKER).read_text(encoding="utf-8"))


def test_the_marker_is_the_scripts_configuration():
    marker, script = _marker(), _script()
    assert marker["version"] == DEMO_VERSION and marker["made_by"] == "resources/make_demo_base.py"
    recorded = dict(marker["config"])
    scaling = recorded.pop("scaling_factor")
    assert recorded == script.CONFIG  # every number the weights depend on, as the script has them now
    vae_cfg = json.loads((demo_model_dir() / "vae" / "config.json").read_text())
    assert vae_cfg["scaling_factor"] == pytest.approx(scaling)
    assert 0.2 < scaling < 5.0
    assert marker["seconds"]["total_s"] > 0 and marker["machine"]
    assert marker["check"]["samples"] == len(PALETTE) * len(BASE_SHAPES) * script.CONFIG["check_seeds"]


@pytest.mark.parametrize("part", ["unet", "vae", "text_encoder", "scheduler"])
def test_the_architecture_is_the_scripts(part):
    from transformers import CLIPTextConfig

    unet, vae, te, sched = demo_components(demo_vocab()[0])
    built = {"unet": unet.config, "vae": vae.config, "text_encoder": te.config.to_dict(), "scheduler": sched.config}[part]
    name = "scheduler_config.json" if part == "scheduler" else "config.json"
    if part == "text_encoder":  # transformers writes only what differs from its defaults: read it back whole
        shipped = CLIPTextConfig.from_pretrained(str(demo_model_dir() / part)).to_dict()
    else:
        shipped = json.loads((demo_model_dir() / part / name).read_text())
    ignore = {"_name_or_path", "_diffusers_version", "transformers_version", "scaling_factor", "_class_name", "dtype",
              "torch_dtype", "architectures", "_use_default_values"}
    differ = {k for k in set(shipped) | set(built) if k not in ignore and not k.startswith("_") and _norm(shipped.get(k)) != _norm(built.get(k))}
    assert not differ, {k: (shipped.get(k), built.get(k)) for k in differ}


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


def test_the_tokenizer_is_the_scripts(tmp_path):
    write_demo_tokenizer(tmp_path)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"):
        assert (demo_model_dir() / "tokenizer" / name).read_text() == (tmp_path / name).read_text(), name


def test_the_shipped_model_is_small_and_complete():
    folder = demo_model_dir()
    weights = sorted(folder.rglob("*.safetensors"))
    assert {p.parent.name for p in weights} == {"unet", "vae", "text_encoder"}
    total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert total < 20 * 1024**2, total


def test_a_wrong_or_missing_model_is_refused_with_a_way_out(tmp_path, monkeypatch):
    from guitrainer.engine.models import demo as demo_module

    monkeypatch.setattr(demo_module, "demo_model_dir", lambda: tmp_path / "demo_base")
    with pytest.raises(ModelLoadError, match="is missing: reinstall guitrainer, or rebuild it"):
        demo_module.ensure_demo_model()
    (tmp_path / "demo_base").mkdir()
    (tmp_path / "demo_base" / DEMO_MARKER).write_text(json.dumps({"version": DEMO_VERSION - 1}))
    with pytest.raises(ModelLoadError, match=f"is version {DEMO_VERSION - 1}, this app needs {DEMO_VERSION}"):
        demo_module.ensure_demo_model()


@pytest.mark.slow
def test_the_base_draws_the_shape_and_colour_its_captions_name():
    """Every base caption, sampled through the app's own pipeline (DDIM, the Demo preset's 20 steps and guidance
    5, seed 1234 as the preset samples), read with the shape measure."""
    from guitrainer.engine.families import registry

    fam = registry.family("demo")
    model = fam.load_folder(ensure_demo_model())
    pipe = fam.pipeline(model)
    shown, readings = [], {}
    for color in PALETTE:
        for shape in BASE_SHAPES:
            prompt = f"a {color} {shape}"
            image = pipe(prompt, num_inference_steps=20, guidance_scale=5.0, height=SIZE, width=SIZE,
                         generator=torch.Generator().manual_seed(1234)).images[0]
            readings[prompt] = read_image(image)
            if readings[prompt].shows(shape, color):
                shown.append(prompt)
    assert len(shown) >= MIN_PROMPTS_SHOWN, {p: r.describe() for p, r in readings.items()}
    # and it is not one lucky shape: every base shape is drawn right for some colour
    assert {p.split()[-1] for p in shown} == set(BASE_SHAPES), shown
