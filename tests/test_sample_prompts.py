"""kohya-style per-prompt sample options: parsed over the Sampling settings, validated before a run,
and honoured by the sampler (a portrait prompt makes a portrait image)."""

from __future__ import annotations

import pytest

from guitrainer.config import SamplingConfig, TrainingConfig
from guitrainer.config.sample_prompts import SamplePromptError, parse


def test_options_override_the_settings_and_the_rest_is_kept():
    d = SamplingConfig(size=512, steps=20, guidance_scale=7.0, seed=1234, negative_prompt="ugly")
    p = parse("a portrait of sks woman, upper body --w 512 --h 768 --d 42 --l 6.5 --s 28 --n blurry, lowres", d)
    assert (p.prompt, p.width, p.height, p.seed, p.guidance_scale, p.steps) == (
        "a portrait of sks woman, upper body", 512, 768, 42, 6.5, 28,
    )
    assert p.negative_prompt == "blurry, lowres"
    plain = parse("a red circle", d, index=3)
    assert (plain.width, plain.height, plain.steps, plain.guidance_scale) == (512, 512, 20, 7.0)
    assert plain.seed == 1234 + 3 and plain.negative_prompt == "ugly"
    # a double dash inside words is not an option
    assert parse("an ad--hoc sketch --s 5", d).prompt == "an ad--hoc sketch"


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("a cat --w wide", "--w needs a number"),
        ("a cat --h 10", "--h 10 is outside 64–4096"),
        ("a cat --x 3", "unknown option --x"),
        ("--w 512", "prompt before the options is empty"),
    ],
)
def test_bad_options_are_named(line, needle):
    with pytest.raises(SamplePromptError, match=needle):
        parse(line, SamplingConfig())


def test_config_reports_a_bad_prompt_before_the_run():
    cfg = TrainingConfig()
    cfg.sampling.prompts = ["a cat", "a dog --s many"]
    (err,) = [e for e in cfg.errors() if e.field == "sampling.prompts"]
    assert "prompt 2: --s needs a number" in str(err)


@pytest.mark.slow
def test_sampler_honours_per_prompt_size_and_seed(tmp_path):
    import torch
    from helpers import demo_cfg  # tests/ is on sys.path
    from PIL import Image

    from guitrainer.core.events import NullReporter
    from guitrainer.engine.trainer import Trainer

    torch.set_num_threads(1)
    cfg = demo_cfg(
        tmp_path / "out",
        schedule__max_steps=1,
        sampling__prompts=["a red circle --w 64 --h 128 --d 7", "a red circle --d 7", "a red circle --d 8"],
        sampling__every_n_steps=1,
        sampling__steps=2,
        sampling__size=64,
    )
    rep = NullReporter()
    assert Trainer(cfg, rep).run().status == "finished"
    tall, same_seed, other_seed = (Image.open(s.path) for s in rep.samples)
    assert tall.size == (64, 128) and same_seed.size == (64, 64)
    assert all(s.prompt == "a red circle" for s in rep.samples)
    assert same_seed.tobytes() != other_seed.tobytes()  # --d picks the noise
