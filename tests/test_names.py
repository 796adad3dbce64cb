"""Issue 27 (13): names other systems cannot use are refused the same on every platform (presets are shared), and
every file name the app makes from user text is one Windows, macOS and Linux all write unchanged."""

from __future__ import annotations

import pytest

from guitrainer.base.names import name_problem, printable, safe_name
from guitrainer.config import ConfigError, TrainingConfig
from guitrainer.config.presets import PresetStore, slug

BAD_NAMES = [
    ("a\nb", "a newline (U+000A)"),
    ("a\tb", "a tab (U+0009)"),
    ("a\u202eb", "right-to-left override (U+202E)"),
    ("ring\x07", "a bell character (U+0007)"),
    ("zero\u200bwidth", "zero-width space"),
    ("con", "device name CON"),
    ("NUL", "device name NUL"),
    ("nul.txt", "device name NUL"),
    ("COM1", "device name COM1"),
    ("Aux.tar.gz", "device name AUX"),
    ("lpt9", "device name LPT9"),
    ("con .x", "device name CON"),  # Windows drops the space before the dot
    ("a:b*c?", ": * ?"),
    ('say"hi"', '"'),
    ("pipe|less", "|"),
    ("trailing.", "ends with a dot"),
    ("trailing ", "ends with a space"),
]


@pytest.mark.parametrize(("name", "said"), BAD_NAMES)
def test_names_no_system_can_share_are_refused_naming_what_they_hold(name, said):
    assert said in name_problem(name)
    fixed = safe_name(name)
    assert name_problem(fixed) == "" and fixed  # what is written instead is itself a name every system takes


@pytest.mark.parametrize("name", ["my_lora", "sks woman v1.2", "über-Stil", "コンソール", "console", "com10", "nul_x",
                                  "lpt", "a.b.c", "con_lora"])
def test_ordinary_names_pass_and_are_written_unchanged(name):
    assert name_problem(name) == "" and safe_name(name) == name


def test_safe_name_spells_out_what_is_written():
    assert safe_name("con") == "_con" and safe_name("nul.txt") == "_nul.txt"
    assert safe_name("a:b*c?") == "a_b_c_" and safe_name("x. ") == "x" and safe_name("a\nb") == "a_b"
    assert safe_name("...", "lora") == "lora" and safe_name("", "lora") == "lora"
    assert len(safe_name("é" * 300).encode("utf-8")) <= 255  # cut between characters, never inside one


@pytest.mark.parametrize(("name", "said"), BAD_NAMES)
def test_the_config_refuses_output_names_no_system_can_share(name, said):
    cfg = TrainingConfig()
    cfg.output.name = name
    with pytest.raises(ConfigError) as ei:
        cfg.validate()
    assert ei.value.field == "output.name" and said in ei.value.message
    assert repr(safe_name(name, "my_lora")) in ei.value.message  # says what to use instead


def test_presets_are_never_saved_under_a_device_name(tmp_path):
    store = PresetStore(shipped_dir=tmp_path / "shipped", user_dir=tmp_path / "user")
    preset = store.save("con", TrainingConfig())
    assert preset.path is not None and preset.path.name == "_con.toml"
    assert slug("NUL") == "_NUL" and slug("Aux.x") == "_Aux.x" and slug("My preset!") == "My_preset"


def test_printable_keeps_a_message_on_one_line():
    assert printable("a\nb\tc\u202ed") == "a\\nb\\tc\\u202ed" and printable("plain é") == "plain é"


def test_every_file_name_the_app_builds_from_the_output_name_is_one_every_system_writes(tmp_path):
    """The config refuses such names; a run given one anyway (the engine takes any config) still writes safe names."""
    from types import SimpleNamespace

    from guitrainer.core.runs import names as run_names
    from guitrainer.core.runs import state as run_state

    def files(name: str) -> run_names.RunFiles:  # a run's names all come from its label (core/runs/names.py)
        return run_names.choose(SimpleNamespace(name=name, folder=str(tmp_path), format="kohya", overwrite=False))

    assert run_state.state_folder(tmp_path, "con").name == "_con_state" and files("con").state.name == "_con_state"
    assert files("a:b").sample(5, 0).name == "a_b_step000005_0.png"
    assert files("nul").lora().name == "_nul.safetensors"
    assert files("aux.").logs().name.startswith("_aux_")  # the dot goes, and AUX is a device
    for name in ("my_lora", "sks woman v2"):  # an ordinary name is written as it is
        assert run_state.state_folder(tmp_path, name).name == f"{name}_state"
