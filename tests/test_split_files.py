"""core.model.split_files: the files of a split install picked together are sorted into their roles by their tensors,
whatever their names and order; a set without a transformer, or lacking a part, says so."""

from __future__ import annotations

import random

import pytest

from guitrainer.core.model.split_files import arrange

pytestmark = pytest.mark.slow  # builds a tiny Flux (a few seconds)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    from helpers import tiny_flux

    folder = tmp_path_factory.mktemp("flux_parts")
    files = tiny_flux.save_split(tiny_flux.build(), folder)
    renamed = {}
    for part, path in files.items():  # names say nothing: the tensors decide
        new = path.with_name(f"file_{part[::-1]}.safetensors")
        path.rename(new)
        renamed[part] = new
    return renamed


def test_four_files_in_any_order_find_their_places(split):
    paths = [str(p) for p in split.values()]
    random.Random(3).shuffle(paths)
    choice = arrange(paths)
    assert choice.ok, choice.problems
    assert choice.family == "flux1" and choice.base == str(split["transformer"]) and choice.vae == str(split["vae"])
    assert set(choice.text_encoders) == {str(split["clip_l"]), str(split["t5"])}


def test_a_missing_part_and_a_set_without_a_transformer(split):
    no_t5 = arrange([str(split["transformer"]), str(split["clip_l"]), str(split["vae"])])
    assert not no_t5.ok and any("T5" in p for p in no_t5.problems)
    parts_only = arrange([str(split["clip_l"]), str(split["vae"])])
    assert parts_only.family is None and "transformer" in parts_only.problems[0]
