"""Issue 16: what validation refuses (naming the field), what --check checks on disk, and a seeded fuzz test
of the shipped presets through the same path as ``guitrainer-train --check``."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import config_with
from helpers.fuzz import mutations

from guitrainer.config import ConfigError, TrainingConfig, config_from_dict, load_toml, parse_toml_text
from guitrainer.config.checks import NAME_MAX
from guitrainer.config.files import apply_overlay
from guitrainer.config.presets import DEMO_PRESET, PresetStore
from guitrainer.core.checks.inputs import check_inputs


def _field_of(**settings: object) -> str:
    with pytest.raises(ConfigError) as ei:
        config_with(**settings).validate()
    return ei.value.field


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"network__alpha": 0.0}, "network.alpha"),
        ({"optimizer__lr": 0.0}, "optimizer.lr"),
        ({"optimizer__name": "Adafactor", "optimizer__lr": 0.0}, "optimizer.lr"),  # ours runs Adafactor with an lr
        ({"network__train_text_encoder": True, "optimizer__text_encoder_lr": 0.0}, "optimizer.text_encoder_lr"),
        ({"dataset__caption_extension": ".png"}, "dataset.caption_extension"),  # each image would be its caption
        ({"dataset__caption_extension": "JPG"}, "dataset.caption_extension"),
        ({"dataset__caption_extension": ""}, "dataset.caption_extension"),
        ({"dataset__caption_extension": "." + "x" * 40}, "dataset.caption_extension"),
        ({"dataset__caption_extension": "../x"}, "dataset.caption_extension"),
        ({"dataset__folders": [{"path": "", "repeats": 2}]}, "dataset.folders[0]"),
        ({"dataset__regularization_folders": ["  "]}, "dataset.regularization_folders[0]"),
        ({"output__folder": ""}, "output.folder"),
        ({"output__folder": "/tmp/" + "d" * 300}, "output.folder"),  # one name over 255 bytes
        ({"output__folder": "/tmp/" + "/d" * 3000}, "output.folder"),  # over PATH_MAX
        ({"output__name": ""}, "output.name"),
        ({"output__name": "../escape"}, "output.name"),
        ({"output__name": "sub/dir"}, "output.name"),
        ({"output__name": "back\\slash"}, "output.name"),
        ({"output__name": "é" * (NAME_MAX // 2)}, "output.name"),  # 255 bytes: no room for "_2.safetensors"
        ({"sampling__size": 500}, "sampling.size"),
        ({"sampling__prompts": ["a cat --w 500"]}, "sampling.prompts"),
        ({"optimizer__betas": [0.9, 1.0]}, "optimizer.betas[1]"),
        ({"optimizer__betas": [-0.1, 0.999]}, "optimizer.betas[0]"),
        ({"optimizer__betas": [math.nan, 0.999]}, "optimizer.betas[0]"),
        ({"optimizer__betas": [0.9, math.inf]}, "optimizer.betas[1]"),
    ],
)
def test_values_that_train_wrongly_are_refused(settings, field):
    assert _field_of(**settings) == field


def test_valid_edges_pass():
    config_with(network__alpha=0.5, sampling__size=504, optimizer__betas=[0.0, 0.99], output__name="v1.2 final",
                dataset__caption_extension="caption").validate()


@pytest.mark.parametrize(
    ("toml", "field", "needle"),
    [
        ('[network]\nrank = "7"\n', "network.rank", "text '7'"),
        ("[dataset]\nbucketing = 5\n", "dataset.bucketing", "true or false"),
        ("[dataset]\nresolution = 512.0\n", "dataset.resolution", "whole number"),
        ('[optimizer]\nlr = "1e-4"\n', "optimizer.lr", "a number"),
        ("[optimizer]\nbetas = [0.9, nan]\n", "optimizer.betas[1]", "below 1"),
        ("[optimizer]\nbetas = [0.9, inf]\n", "optimizer.betas[1]", "below 1"),
        ('[precision]\ntraining = 16\n', "precision.training", "one of"),
    ],
)
def test_wrong_types_in_a_file_are_refused_naming_the_field(tmp_path, toml, field, needle):
    p = tmp_path / "c.toml"
    p.write_text(toml, encoding="utf-8")
    with pytest.raises(ConfigError) as ei:
        load_toml(p)
    assert ei.value.field == field and needle in ei.value.message and ei.value.line == 2


def test_text_from_set_is_still_read_as_the_type():
    cfg = TrainingConfig()
    cfg.set("network.rank", "7")  # --set and text boxes give text
    assert cfg.network.rank == 7


def test_deep_nesting_is_a_message_not_a_recursion_error():
    value: object = 1
    for _ in range(20_000):
        value = [value]
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"sampling": {"prompts": value}})
    assert ei.value.field == "sampling.prompts[0]" and "nested" in ei.value.message


def test_a_utf8_bom_at_the_start_of_a_config_is_accepted(tmp_path):
    p = tmp_path / "bom.toml"
    p.write_bytes("\ufeff[network]\nrank = 8\n".encode())
    assert load_toml(p).network.rank == 8


def _cfg_on(tmp_path: Path, folder: Path) -> TrainingConfig:
    cfg = PresetStore().find(DEMO_PRESET).config()
    cfg.set("dataset.folders", [str(folder)])
    cfg.set("output.folder", str(tmp_path / "out"))
    return cfg


def test_check_inputs_finds_missing_folders_and_models(tmp_path):
    cfg = _cfg_on(tmp_path, tmp_path / "nowhere")
    cfg.set("model.base", str(tmp_path / "model.safetensors"))
    report = check_inputs(cfg)
    assert any(e.startswith("dataset.folders[0]") and "does not exist" in e for e in report.errors)
    assert any(e.startswith("model.base") and "not found" in e for e in report.errors)
    cfg.set("model.base", "someone/some-model")  # a hub id: checked when downloaded
    assert not any(e.startswith("model.base") for e in check_inputs(cfg).errors)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_caption_paths_that_are_not_files_never_hang(tmp_path):
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    for name in ("a", "b", "c", "d"):
        Image.new("RGB", (64, 64)).save(folder / f"{name}.png")
    os.mkfifo(folder / "a.txt")  # reading it would block forever
    (folder / "b.txt").mkdir()
    os.symlink(folder / "c.txt", folder / "c.txt")  # a loop
    (folder / "d.txt").write_bytes("caf\xe9".encode("latin-1"))
    report = check_inputs(_cfg_on(tmp_path, folder))
    (broken,) = report.errors
    assert broken.startswith("dataset.folders: 3 caption path(s)") and "a.txt" in broken and "b.txt" in broken and "c.txt" in broken
    (note,) = report.notes
    assert "1 caption(s) are not UTF-8" in note and "Windows-1252" in note and "d.txt" in note


def test_cli_check_reports_a_missing_folder_and_legacy_captions(tmp_path, capsys):
    from guitrainer.cli import main

    assert main(["--preset", "demo", "--set", f"dataset.folders=[\"{tmp_path / 'gone'}\"]", "--check"]) == 1
    assert "dataset.folders[0]: The image folder" in capsys.readouterr().out  # the start check's words


# --------------------------------------------------------------------------- fuzz

FUZZ_CASES = 1200
#: configs the ``--check`` fuzz runs in its child process (a few seconds)
CHECK_FUZZ_CASES = 300


def _shipped_bases() -> list[dict]:
    store = PresetStore()
    return [parse_toml_text(Path(p.path).read_text(encoding="utf-8"), p.path) for p in store.presets.values() if p.shipped]


def test_fuzzed_presets_give_messages_naming_the_field_never_a_traceback():
    """>= 1,000 seeded mutations of every shipped preset, through the path --check uses (apply the overlay
    on the defaults, validate): each is accepted or refused with a ConfigError that names a field. The mutations
    include issue 27's odd paths and names (special files, ``~user``, names over 255 bytes, control characters)
    and huge numbers (:mod:`helpers.fuzz`)."""
    rng = random.Random(16)
    bases = _shipped_bases()
    assert bases
    accepted = refused = 0
    for _ in range(FUZZ_CASES):
        data = mutations(rng, rng.choice(bases))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unknown keys warn; that is their message
            try:
                apply_overlay(TrainingConfig(), data, source="fuzz.toml").validate()
            except ConfigError as e:
                assert e.field and e.field != "(file)" or "nested" in e.message, str(e)
                assert f"`{e.field}`" in str(e)
                refused += 1
            else:
                accepted += 1
    assert accepted + refused == FUZZ_CASES and refused > FUZZ_CASES // 2
    print(f"fuzz: {FUZZ_CASES} mutations, {refused} refused naming the field, {accepted} accepted, 0 tracebacks")


@pytest.mark.skipif(not hasattr(os, "mkfifo") or not hasattr(signal, "setitimer"), reason="needs FIFOs and timers")
def test_fuzzed_config_files_through_the_cli_check(tmp_path):
    """Issue 27: fuzzed config files, with every odd path and name in the settings and as the config file itself
    (a named pipe, /dev/zero, /dev/null, /proc/self/mem, a folder, a ``~user`` with no such user, a name over 255
    bytes, control characters), run through ``guitrainer-train FILE --check`` in a child process with a watchdog per
    config, a memory limit and an audit hook on every open: 0 tracebacks, 0 hangs, 0 reads without end, no named
    pipe or device ever opened, and every refusal names its field."""
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), str(repo / "tests")]),
           "GUITRAINER_HOME": str(tmp_path / "home")}
    proc = subprocess.run([sys.executable, "-m", "helpers.fuzz", "27", str(CHECK_FUZZ_CASES), str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=repo, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    figures = {k: stats[k] for k in ("configs", "tracebacks", "hangs", "endless_reads", "special_opens", "refusals",
                                     "unnamed_refusals")}
    print(f"check fuzz: {figures}, exit codes {stats['codes']}")
    assert stats["tracebacks"] == stats["hangs"] == stats["endless_reads"] == stats["special_opens"] == 0, stats
    assert stats["unnamed_refusals"] == 0 and stats["refusals"] > stats["configs"] // 2, stats
    assert stats["configs"] >= CHECK_FUZZ_CASES and set(stats["codes"]) <= {"0", "1", "2"}, stats
