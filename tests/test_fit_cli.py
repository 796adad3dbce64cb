"""guitrainer-train --fit-to: the savers Fit chooses are printed and made before the run (here --check shows the
config they give), a card size in any usual spelling is read, a bad one or a card nothing fits is refused."""

from __future__ import annotations

import pytest

from guitrainer.base.units import GiB, MiB
from guitrainer.cli import main
from guitrainer.fit_cli import parse_size

SDXL = ["--set", "model.family=sdxl", "--set", "model.base=stabilityai/stable-diffusion-xl-base-1.0",
        "--set", "dataset.resolution=1024", "--set", "precision.training=bf16"]


@pytest.fixture(autouse=True)
def _ram(monkeypatch):
    """Fit weighs this computer's RAM: a fixed 64 GB, so the tests do not depend on the machine's."""
    from guitrainer.base.units import GiB
    from guitrainer.core.memory import system_ram

    monkeypatch.setattr(system_ram, "machine_ram", lambda: 64 * GiB)


@pytest.mark.parametrize(("text", "size"), [("12GB", 12 * GiB), ("12 gb", 12 * GiB), ("8G", 8 * GiB),
                                             ("11264MB", 11264 * MiB), ("7.5GB", int(7.5 * GiB))])
def test_card_sizes_read_as_cards_are_sold(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["twelve", "12TB", "", "100MB"])
def test_a_bad_size_is_refused_in_words(text):
    with pytest.raises(ValueError, match="--fit-to"):
        parse_size(text)


def test_fit_to_8gb_changes_the_config_check_prints(capsys):
    code = main(["--preset", "demo", *SDXL, "--fit-to", "8GB", "--check"])
    out, err = capsys.readouterr()
    assert code in (0, 1)  # --check: 1 only for the demo preset's own notes about the disk, never for memory
    assert "fit to a card of 8.0 GB: Fits" in err
    assert "precision.gradient_checkpointing = True (was False)" in err
    assert "gradient_checkpointing = true" in out  # the config --check prints is the fitted one


def test_a_card_nothing_fits_is_refused(capsys):
    code = main(["--preset", "demo", *SDXL, "--fit-to", "1GB", "--check"])
    _out, err = capsys.readouterr()
    assert code == 2 and "Nothing fits" in err


def test_a_bad_size_exits_2(capsys):
    assert main(["--preset", "demo", "--fit-to", "lots", "--check"]) == 2
    assert "is not a card size" in capsys.readouterr().err


def test_settings_that_fit_the_card_but_not_this_computers_ram_are_printed_to_plan_with(capsys, monkeypatch):
    from guitrainer.base.units import GiB
    from guitrainer.core.memory import system_ram

    monkeypatch.setattr(system_ram, "machine_ram", lambda: 16 * GiB)  # Flux.1 dev needs far more to load
    code = main(["--preset", "Flux.1 dev — 12 GB", "--fit-to", "24GB", "--check"])
    _out, err = capsys.readouterr()
    assert code == 1  # not bad input (2): the settings exist, this computer's RAM is short
    assert "Settings that fit 24.0 GB exist" in err and "this computer has 16.0 GB" in err
    assert "to plan with: precision." in err and "(was " in err
