"""TrainingConfig: validation names fields, TOML round trip, overlays, unknown keys, migrations."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from guitrainer import config
from guitrainer.config import ConfigError, DatasetFolder, TrainingConfig, UnknownKeyWarning, config_from_dict


def test_defaults_are_valid_and_round_trip():
    cfg = TrainingConfig()
    assert cfg.errors() == []
    again = config_from_dict(config.parse_toml_text(cfg.to_toml(), "x"))
    assert again == cfg


def test_round_trip_is_lossless_for_non_default_values(tmp_path):
    cfg = TrainingConfig()
    cfg.set("network.rank", 64)
    cfg.set("network.alpha", 12.5)
    cfg.set("optimizer.lr", 3.5e-5)
    cfg.set("optimizer.betas", [0.85, 0.99])
    cfg.set("dataset.folders", [{"path": "/data/10_cat", "repeats": 10}, "/data/dogs"])
    cfg.set("sampling.prompts", ["a cat", "a “quoted” prompt, with commas"])
    cfg.set("precision.training", "bf16")
    cfg.set("output.description", "line one\nline two")
    p = tmp_path / "c.toml"
    config.save_toml(cfg, p)
    loaded = config.load_toml(p)
    assert loaded == cfg
    assert loaded.dataset.folders[0] == DatasetFolder("/data/10_cat", 10)
    assert loaded.dataset.folders[1].repeats == 1


def test_public_names_are_fixed():
    """Presets and the CLI rely on these names; renaming one breaks users' files."""
    for path in [
        "model.base", "model.family", "dataset.folders", "dataset.resolution", "network.rank", "network.alpha",
        "optimizer.name", "optimizer.lr", "schedule.batch_size", "schedule.epochs", "schedule.max_steps",
        "schedule.seed", "precision.training", "precision.save", "precision.gradient_checkpointing",
        "precision.cache_latents", "precision.gpu_index", "output.folder", "output.name",
    ]:
        config.field_info(path)  # raises if missing
    assert config.field_choices(config.field_info("precision.training")) == ("fp32", "fp16", "bf16")
    assert config.field_choices(config.field_info("precision.save")) == ("fp32", "fp16", "bf16")


def test_every_field_has_label_and_help():
    for path in config.field_paths():
        meta = config.field_info(path).metadata
        assert meta.get("label"), path
        assert meta.get("help"), path


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("network.rank", 0, "between 1 and 1024"),
        ("network.rank", 5000, "between 1 and 1024"),
        ("dataset.resolution", 32, "between 64 and 4096"),
        ("optimizer.lr", -1.0, "between 0 and 1"),
        ("precision.training", "fp8", "one of 'fp32', 'fp16', 'bf16'"),
        ("optimizer.name", "SGD", "one of"),
        ("schedule.batch_size", 1.5, "whole number"),
        ("dataset.caption_dropout", 2.0, "between 0 and 1"),
        ("precision.gradient_checkpointing", "maybe", "true or false"),
        ("precision.gpu_index", -2, "between -1 and 1023"),
        ("precision.gpu_index", 1.5, "whole number"),
        ("precision.gpu_index", "second", "whole number"),
    ],
)
def test_validation_names_field_and_range(path, value, needle):
    cfg = TrainingConfig()
    with pytest.raises(ConfigError) as ei:
        cfg.set(path, value)
    assert ei.value.field == path
    assert f"`{path}`" in str(ei.value)
    assert needle in str(ei.value)


def test_cross_field_validation():
    cfg = TrainingConfig()
    cfg.dataset.min_bucket_resolution = 2048
    cfg.dataset.max_bucket_resolution = 512
    errs = cfg.errors()
    assert [e.field for e in errs] == ["dataset.min_bucket_resolution"]
    cfg = TrainingConfig()
    cfg.set("dataset.folders", ["/a/imgs"])
    cfg.set("dataset.regularization_folders", ["/a/imgs"])
    assert [e.field for e in cfg.errors()] == ["dataset.regularization_folders"]


def test_unknown_keys_warn_and_are_dropped():
    with pytest.warns(UnknownKeyWarning) as rec:
        cfg = config_from_dict({"network": {"rank": 8, "rnak": 4}, "bogus": {"x": 1}})
    messages = " ".join(str(w.message) for w in rec)
    assert "network.rnak" in messages and "[bogus]" in messages
    assert cfg.network.rank == 8
    assert not hasattr(cfg.network, "rnak")


def test_error_in_file_names_file_line_and_field(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[network]\nalpha = 4.0\n\nrank = -3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        config.load_toml(p)
    e = ei.value
    assert e.field == "network.rank" and e.line == 4 and str(p) in str(e)


def test_broken_toml_names_line(tmp_path):
    p = tmp_path / "broken.toml"
    p.write_text("[network]\nrank = 4\nalpha = = 3\n", encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        config.load_toml(p)
    assert ei.value.line == 3
    assert "not valid TOML" in str(ei.value)


def test_overlay_is_sparse_and_lists_replace():
    base = TrainingConfig()
    base.set("sampling.prompts", ["a", "b"])
    out = config.apply_overlay(base, {"sampling": {"prompts": ["c"]}, "network": {"rank": 8}})
    assert out.sampling.prompts == ["c"]
    assert out.network.rank == 8
    assert out.network.alpha == base.network.alpha
    assert base.network.rank == 16  # base untouched
    assert config.diff(TrainingConfig(), out) == {"sampling": {"prompts": ["c"]}, "network": {"rank": 8}}


def test_migration_hook_runs(monkeypatch):
    def v0_to_v1(d):
        d = dict(d)
        net = dict(d.pop("lora", {}))
        d["network"] = {"rank": net.get("dim", 16)}
        return d

    monkeypatch.setitem(config.MIGRATIONS, 0, v0_to_v1)
    cfg = config_from_dict({"schema_version": 0, "lora": {"dim": 48}})
    assert cfg.network.rank == 48
    assert cfg.schema_version == config.SCHEMA_VERSION


def test_newer_schema_warns():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        config_from_dict({"schema_version": 99})
    assert any("newer" in str(w.message) for w in rec)


def test_repeats_from_kohya_folder_name():
    assert config.repeats_from_name("10_mychar") == 10
    assert config.repeats_from_name("mychar") is None
    assert config.repeats_from_name("0_x") is None
    assert DatasetFolder.from_value("/x/5_style").repeats == 5


def test_set_coerces_strings_from_cli():
    cfg = TrainingConfig()
    cfg.set("precision.gradient_checkpointing", "true")
    cfg.set("network.rank", "32")
    cfg.set("dataset.folders", '["/a", "/b/3_x"]')
    assert cfg.precision.gradient_checkpointing is True
    assert cfg.network.rank == 32
    assert [(f.path, f.repeats) for f in cfg.dataset.folders] == [("/a", 1), ("/b/3_x", 3)]


def test_plain_text_for_a_list_of_text_is_one_item():
    """Prompts and paths hold commas: only a TOML array makes several items."""
    cfg = TrainingConfig()
    cfg.set("sampling.prompts", "masterpiece, 1girl, red hair")
    assert cfg.sampling.prompts == ["masterpiece, 1girl, red hair"]
    cfg.set("sampling.prompts", '["a, b", "c"]')
    assert cfg.sampling.prompts == ["a, b", "c"]
    cfg.set("sampling.prompts", "[from:to:0.5], 1girl")  # A1111 syntax, not a TOML array
    assert cfg.sampling.prompts == ["[from:to:0.5], 1girl"]
    cfg.set("sampling.prompts", "")
    assert cfg.sampling.prompts == []
    cfg.set("dataset.exclude", "/photos/me, at the beach.png")
    assert cfg.dataset.exclude == ["/photos/me, at the beach.png"]
    cfg.set("dataset.folders", "/data/5_cats, dogs")
    assert [(f.path, f.repeats) for f in cfg.dataset.folders] == [("/data/5_cats, dogs", 5)]
    cfg.set("dataset.regularization_folders", "/reg/2_a, b")
    assert [(f.path, f.repeats) for f in cfg.dataset.regularization_folders] == [("/reg/2_a, b", 2)]


def test_plain_text_for_a_list_of_numbers_splits_on_commas():
    cfg = TrainingConfig()
    cfg.set("optimizer.betas", "0.8, 0.95")
    assert cfg.optimizer.betas == [0.8, 0.95]
    cfg.set("optimizer.betas", "[0.85, 0.9]")
    assert cfg.optimizer.betas == [0.85, 0.9]
    with pytest.raises(ConfigError) as ei:
        cfg.set("optimizer.betas", "0.9, lots")
    assert ei.value.field == "optimizer.betas[1]" and "a number" in ei.value.message


@pytest.mark.parametrize("section", ["folders", "regularization_folders"])
def test_folder_table_without_repeats_takes_them_from_the_name(section):
    path = f"dataset.{section}"
    cfg = TrainingConfig()
    cfg.set(path, [{"path": "/x/3_dog"}, {"path": "/x/7_cat", "repeats": 2}, {"path": "/x/plain"}, {"path": "/x/0_z"}])
    assert [(f.path, f.repeats) for f in cfg.get(path)] == [("/x/3_dog", 3), ("/x/7_cat", 2), ("/x/plain", 1), ("/x/0_z", 1)]
    # the same from a file, where tables are what the app writes
    cfg = config_from_dict({"dataset": {section: [{"path": "/y/12_style"}, "/y/4_pose"]}})
    assert [f.repeats for f in cfg.get(path)] == [12, 4]


def test_folder_table_typo_warns_and_bad_repeats_name_the_item():
    with pytest.warns(UnknownKeyWarning, match="'repeat'"):
        cfg = config_from_dict({"dataset": {"folders": [{"path": "/x/3_dog", "repeat": 9}]}})
    assert cfg.dataset.folders[0].repeats == 3
    for bad in ("many", 2.5, True, [3]):
        with pytest.raises(ConfigError) as ei:
            config_from_dict({"dataset": {"folders": ["/ok", {"path": "/x", "repeats": bad}]}})
        assert ei.value.field == "dataset.folders[1]" and "`repeats`" in ei.value.message


@pytest.mark.parametrize(
    ("toml", "field", "needle"),
    [
        ('schema_version = "x"\n', "schema_version", "whole number"),
        ("schema_version = -1\n", "schema_version", "negative"),
        ("schema_version = 1.5\n", "schema_version", "whole number"),
        ("schema_version = true\n", "schema_version", "whole number"),
        ("schema_version = 0\n", "schema_version", "no migration"),
        ("[network]\nrank = {a = 1}\n", "network.rank", "whole number"),
        ("[optimizer]\nlr = [1, 2]\n", "optimizer.lr", "a number"),
        ("[optimizer]\nlr = 1e999\n", "optimizer.lr", "between"),
        ("[network]\nalpha = 1" + "0" * 400 + "\n", "network.alpha", "a number"),
        ("network = [1, 2]\n", "network", "must be a table"),
        ("[[network]]\nrank = 3\n", "network", "must be a table"),
        ("[sampling]\nprompts = [{a = 1}]\n", "sampling.prompts[0]", "text"),
        ('[sampling]\nprompts = "one"\n', "sampling.prompts", None),  # plain text is one prompt: valid
        ("[sampling]\nprompts = " + "[" * 300 + "]" * 300 + "\n", "sampling.prompts[0]", "nested more than"),
        ("[dataset]\nfolders = [3]\n", "dataset.folders[0]", "folder path"),
        ("[dataset]\nfolders = [{path = {a = 1}}]\n", "dataset.folders[0]", "`path` must be text"),
        ('[dataset]\nfolders = ["/a\\u0000b"]\n', "dataset.folders[0]", "must not contain a NUL"),
        ('[sampling]\nprompts = ["ok", "a\\u0000b"]\n', "sampling.prompts[1]", "must not contain a NUL"),
        ('[output]\nname = "a\\u0000b"\n', "output.name", "must not contain a NUL"),
        ("[optimizer]\nbetas = [true, 0.9]\n", "optimizer.betas[0]", "a number"),
        ("[output]\nname = 42\n", "output.name", "text"),
    ],
)
def test_malformed_files_are_config_errors_naming_file_and_field(tmp_path, toml, field, needle):
    p = tmp_path / "odd.toml"
    p.write_text(toml, encoding="utf-8")
    if needle is None:
        assert config.load_toml(p).sampling.prompts == ["one"]
        return
    with pytest.raises(ConfigError) as ei:
        config.load_toml(p)
    e = ei.value
    assert e.field == field and needle in e.message and str(p) in str(e)
    assert f"`{field}`" not in e.message  # the field is named once, in front
    assert len(str(e)) < 400  # a huge value is cut, not pasted whole into the message


def test_unreadable_files_are_config_errors(tmp_path):
    garbage = tmp_path / "garbage.toml"
    garbage.write_bytes(bytes(range(256)) * 4)
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n", encoding="utf-8")
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    for p in (garbage, deep, folder):
        with pytest.raises(ConfigError) as ei:
            config.load_toml(p)
        assert ei.value.field == "(file)" and str(p) in str(ei.value)


def test_sections_are_dataclasses_with_defaults():
    for cls in config.SECTIONS.values():
        cls()  # every field has a default
        assert dataclasses.is_dataclass(cls)


def test_gpu_index_defaults_to_automatic_and_round_trips(tmp_path):
    from guitrainer.config.presets import PresetStore

    assert TrainingConfig().precision.gpu_index == -1
    assert config.diff(TrainingConfig(), TrainingConfig()) == {}  # automatic is not written into presets
    meta = config.field_info("precision.gpu_index").metadata
    assert (meta["minimum"], meta["maximum"]) == (-1, 1023) and "automatic" in meta["help"]
    cfg = TrainingConfig()
    cfg.set("precision.gpu_index", "1")  # as from `--set precision.gpu_index=1`
    assert cfg.precision.gpu_index == 1
    p = tmp_path / "c.toml"
    config.save_toml(cfg, p)
    assert "gpu_index = 1" in p.read_text(encoding="utf-8")
    assert config.load_toml(p) == cfg
    assert config.diff(TrainingConfig(), cfg) == {"precision": {"gpu_index": 1}}
    # a user preset keeps it; a preset written without it stays automatic
    store = PresetStore(user_dir=tmp_path / "presets")
    store.save("Second GPU", cfg)
    store.reload()
    assert store.get("Second GPU").config().precision.gpu_index == 1
    sparse = config.apply_overlay(TrainingConfig(), config.parse_toml_text("[precision]\ntraining = 'bf16'\n", "p.toml"))
    assert sparse.precision.gpu_index == -1
    for name in store.names():
        if store.get(name).shipped:
            assert store.get(name).config().precision.gpu_index == -1, name


def test_gpu_index_error_in_a_file_names_its_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[precision]\ntraining = 'fp16'\ngpu_index = -5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        config.load_toml(p)
    assert ei.value.field == "precision.gpu_index" and ei.value.line == 3 and "between -1 and 1023" in ei.value.message


def test_the_readme_config_example_loads_without_errors(tmp_path):
    """The TOML a user copies from the README must be valid as written."""
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert example, "the README has no TOML example"
    path = tmp_path / "readme.toml"
    path.write_text(example.group(1), encoding="utf-8")
    cfg = config.load_toml(path)
    assert cfg.errors() == []
    assert cfg.dataset.folders[0].repeats == 10 and cfg.dataset.regularization_folders
