"""Presets: shipped ones load and round-trip; user presets save / rename / delete / import."""

from __future__ import annotations

from pathlib import Path

import pytest

from guitrainer.config import ConfigError, TrainingConfig, apply_overlay, config_from_dict, parse_toml_text
from guitrainer.config.presets import DEFAULT_PRESET, DEMO_PRESET, PresetStore, read_preset

SHIPPED = [
    DEMO_PRESET,
    "SD 1.5 character — 6 GB",
    "SD 1.5 style — 8 GB",
    "SDXL character — 12 GB",
    "SDXL quality — 24 GB",
]


@pytest.fixture
def store(tmp_path):
    return PresetStore(user_dir=tmp_path / "user")


def test_shipped_presets_present_and_valid(store):
    assert store.errors == []
    for name in SHIPPED:
        assert name in store.names()
        assert store.get(name).shipped
    assert DEFAULT_PRESET in store.names()


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_preset_round_trips(store, name):
    cfg = store.get(name).config()
    again = config_from_dict(parse_toml_text(cfg.to_toml(), name))
    assert again == cfg
    assert store.get(name).warnings == []


def test_overlay_semantics_every_field_filled(store):
    """Loading B after A leaves nothing of A: presets apply to the defaults, not to the current config."""
    a = store.get("SDXL quality — 24 GB").config()
    b = store.get(DEMO_PRESET).config()
    assert a.optimizer.text_encoder_lr == 1e-5 and a.precision.gradient_checkpointing is True
    defaults = TrainingConfig()
    # not in the demo file: the defaults, not A's values
    assert b.optimizer.text_encoder_lr == defaults.optimizer.text_encoder_lr
    assert b.precision.gradient_checkpointing is defaults.precision.gradient_checkpointing is False
    assert b.output.save_every_n_epochs == 0 and b.schedule.warmup_steps == 0
    assert b.model.base == "demo" and b.precision.training == "fp32"


def test_user_preset_save_load_rename_delete(store, tmp_path):
    cfg = store.get("SD 1.5 character — 6 GB").config()
    cfg.set("network.rank", 48)
    p = store.save("My char", cfg, "desc")
    assert p.path.exists() and p.path.parent == tmp_path / "user"
    text = p.path.read_text(encoding="utf-8")
    assert "rank = 48" in text and "resolution" in text  # sparse vs defaults, not vs the shipped preset
    assert "bucket_step" not in text  # default values are not written
    fresh = PresetStore(user_dir=tmp_path / "user")
    assert fresh.get("My char").config() == cfg
    fresh.rename("My char", "Renamed")
    assert not p.path.exists()
    assert PresetStore(user_dir=tmp_path / "user").get("Renamed").config() == cfg
    fresh.delete("Renamed")
    assert "Renamed" not in PresetStore(user_dir=tmp_path / "user").names()


def test_shipped_presets_are_read_only(store):
    with pytest.raises(ValueError):
        store.save(SHIPPED[0], TrainingConfig())
    with pytest.raises(ValueError):
        store.delete(SHIPPED[0])


def test_malformed_preset_reported_not_fatal(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "bad.toml").write_text('[preset]\nname = "Bad"\n[network]\nrank = "lots"\n', encoding="utf-8")
    (user / "broken.toml").write_text("[network\nrank = 3\n", encoding="utf-8")
    store = PresetStore(user_dir=user)
    assert "Bad" not in store.names()
    msgs = sorted(str(e) for e in store.errors)
    assert len(msgs) == 2
    assert any("bad.toml, line 4" in m and "`network.rank`" in m for m in msgs)
    assert any("broken.toml" in m and "line 1" in m for m in msgs)
    assert SHIPPED[0] in store.names()


def test_import_preset_file(store, tmp_path):
    src = tmp_path / "shared.toml"
    src.write_text('# from a friend\n[preset]\nname = "Friend"\n[network]\nrank = 8\n', encoding="utf-8")
    p = store.import_file(src)
    assert p.name == "Friend" and not p.shipped
    assert "# from a friend" in p.path.read_text(encoding="utf-8")
    assert store.get("Friend").config().network.rank == 8
    with pytest.raises(ConfigError):
        bad = tmp_path / "bad.toml"
        bad.write_text("[precision]\ntraining = 'fp8'\n", encoding="utf-8")
        store.import_file(bad)


def test_read_preset_unknown_key_is_a_warning(tmp_path):
    p = tmp_path / "w.toml"
    p.write_text('[preset]\nname = "W"\n[network]\nrank = 8\nfuture_knob = 1\n', encoding="utf-8")
    preset = read_preset(p)
    assert any("network.future_knob" in w for w in preset.warnings)
    assert apply_overlay(TrainingConfig(), {"network": {"rank": 8}}) == preset.config()


MALFORMED = {
    "sv_string.toml": b'schema_version = "x"\n[preset]\nname = "SV"\n[network]\nrank = 8\n',
    "sv_negative.toml": b"schema_version = -2\n",
    "table_for_number.toml": b"[network]\nrank = { value = 8 }\n",
    "list_for_table.toml": b"network = [8, 16]\n",
    "list_for_header.toml": b"preset = [1]\n",
    "name_not_text.toml": b"[preset]\nname = 3\n",
    "binary.toml": bytes(range(256)) * 8,
    "nul_bytes.toml": b"\x00\x01\x02[network]\x00",
    "deep.toml": b"x = " + b"[" * 4000 + b"]" * 4000 + b"\n",
}


def test_every_malformed_user_preset_is_listed_and_the_rest_load(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    for name, data in MALFORMED.items():
        (user / name).write_bytes(data)
    (user / "good.toml").write_text('[preset]\nname = "Good"\n[network]\nrank = 8\n', encoding="utf-8")
    (user / "future.toml").write_text('schema_version = 9\n[preset]\nname = "Future"\n[network]\nrank = 6\n', encoding="utf-8")
    (user / "dir.toml").mkdir()  # a folder named like a preset
    store = PresetStore(user_dir=user)
    assert all(isinstance(e, ConfigError) for e in store.errors)
    bad = sorted(Path(e.source).name for e in store.errors)
    assert bad == sorted([*MALFORMED, "dir.toml"])
    assert store.get("Good").config().network.rank == 8
    future = store.get("Future")  # newer schema: its known keys load, with a warning
    assert future.config().network.rank == 6 and any("newer" in w for w in future.warnings)
    assert set(SHIPPED) <= set(store.names())
    by_file = {Path(e.source).name: e for e in store.errors}
    assert by_file["sv_string.toml"].field == "schema_version" and "whole number" in by_file["sv_string.toml"].message
    assert by_file["sv_negative.toml"].field == "schema_version" and "negative" in by_file["sv_negative.toml"].message
    assert by_file["table_for_number.toml"].field == "network.rank" and by_file["table_for_number.toml"].line == 2
    assert by_file["list_for_table.toml"].field == "network" and by_file["list_for_table.toml"].line == 1
    assert by_file["name_not_text.toml"].field == "preset.name"
    assert by_file["binary.toml"].field == "(file)"


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_read_preset_raises_only_config_errors(tmp_path, name):
    p = tmp_path / name
    p.write_bytes(MALFORMED[name])
    with pytest.raises(ConfigError) as ei:
        read_preset(p)
    assert str(p) in str(ei.value)


def test_unexpected_errors_while_reading_become_config_errors(tmp_path, monkeypatch):
    """A case the checks miss is still reported against the file, not raised into the app."""
    import guitrainer.config.presets as presets_module

    def boom(*args, **kwargs):
        raise KeyError("surprise")

    monkeypatch.setattr(presets_module, "config_from_dict", boom)
    user = tmp_path / "user"
    user.mkdir()
    (user / "any.toml").write_text("[network]\nrank = 8\n", encoding="utf-8")
    store = PresetStore(shipped_dir=tmp_path / "none", user_dir=user)
    assert store.names() == []
    assert len(store.errors) == 1 and "KeyError" in str(store.errors[0]) and "any.toml" in str(store.errors[0])
