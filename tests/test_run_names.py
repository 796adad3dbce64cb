"""A run's file names (core/runs/names.py): one label on every file a run writes, free of every earlier run's files."""

from __future__ import annotations

import subprocess
import sys

import pytest

from guitrainer.config import TrainingConfig
from guitrainer.core.runs import names as N
from guitrainer.core.runs.names import RunFiles


def _output(folder, name: str = "ink", **changes):
    cfg = TrainingConfig()
    cfg.output.folder, cfg.output.name = str(folder), name
    for key, value in changes.items():
        setattr(cfg.output, key, value)
    return cfg.output


def test_every_file_of_a_run_carries_its_label(tmp_path):
    f = RunFiles(tmp_path, "ink_2")
    assert f.lora() == tmp_path / "ink_2.safetensors"
    assert f.lora("000003") == tmp_path / "ink_2-000003.safetensors"
    assert f.state == tmp_path / "ink_2_state"
    assert f.sample(50, 1) == tmp_path / "samples" / "ink_2_step000050_1.png"
    assert f.logs(__import__("datetime").datetime(2025, 1, 2, 3, 4, 5)) == tmp_path / "logs" / "ink_2_20250102030405"
    d = RunFiles(tmp_path, "ink_2", "diffusers")
    assert d.lora() == tmp_path / "ink_2" / "pytorch_lora_weights.safetensors" and d.lora_item() == tmp_path / "ink_2"
    assert d.lora_item("step000120") == tmp_path / "ink_2-step000120"


@pytest.mark.parametrize(
    "earlier",
    [
        "ink.safetensors",  # the LoRA
        "ink",  # a diffusers LoRA folder
        "ink-000002.safetensors",  # an epoch's save
        "ink-step000120.safetensors",  # a Save now
        "ink-000002_2.safetensors",  # an epoch saved twice
        "ink_state",  # a state (even an empty folder)
        ".ink_state.tmp-1234",  # a state swap a kill cut short
        "samples/ink_step000050_0.png",  # only the samples of an earlier run are left: still its
        "logs/ink_20250102030405",  # only its TensorBoard folder
        "INK.safetensors",  # Windows and macOS: the same file
    ],
)
def test_any_file_of_an_earlier_run_makes_its_label_taken(tmp_path, earlier):
    path = tmp_path / earlier
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".safetensors", ".png"):
        path.write_bytes(b"x")
    else:
        path.mkdir()
    files = N.choose(_output(tmp_path))
    assert files.label == "ink_2" and files.in_use() == []
    assert RunFiles(tmp_path, "ink").in_use() == [earlier]


def test_other_names_do_not_take_the_label(tmp_path):
    for name in ("inkwell.safetensors", "ink_2.safetensors", "ink.txt", "samples/inkwell_step000050_0.png",
                 "logs/ink_2_20250102030405", "ink-notes.safetensors"):  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    assert N.choose(_output(tmp_path)).label == "ink"  # ink_2.safetensors is another run's: "ink" is still free
    assert N.choose(_output(tmp_path, "ink_2")).label == "ink_2_2"


def test_the_labels_pair_where_the_old_numbering_did_not(tmp_path):
    """Before: the LoRA and the state were numbered apart (demo_lora_3.safetensors beside demo_lora_2_state)."""
    (tmp_path / "demo_lora.safetensors").write_bytes(b"x")
    (tmp_path / "demo_lora_2.safetensors").write_bytes(b"x")  # a run whose state was never written (a failed save)
    (tmp_path / "demo_lora_state").mkdir()
    f = N.choose(_output(tmp_path, "demo_lora"))
    assert f.label == "demo_lora_3"
    assert (f.lora().name, f.state.name) == ("demo_lora_3.safetensors", "demo_lora_3_state")


def test_a_resumed_run_keeps_its_label_and_overwrite_keeps_the_name(tmp_path):
    (tmp_path / "ink.safetensors").write_bytes(b"x")
    (tmp_path / "ink_2_state").mkdir()
    assert N.choose(_output(tmp_path), tmp_path / "ink_2_state").label == "ink_2"
    assert N.choose(_output(tmp_path), str(tmp_path / "ink_2_state") + "/").label == "ink_2"  # however it is spelled
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    assert N.choose(_output(elsewhere), tmp_path / "ink_2_state").label == "ink"  # a state of another folder: a new run there
    assert N.choose(_output(tmp_path), tmp_path / "my_backup").label == "ink_3"  # not a <label>_state: a label of its own
    assert N.choose(_output(tmp_path, overwrite=True)).label == "ink"
    assert N.choose(_output(tmp_path), keep="ink_2").label == "ink_3"  # taken there: the next free one
    assert N.choose(_output(elsewhere), keep="ink_2").label == "ink_2"  # free in the new folder: kept


def test_the_preview_names_every_file_of_the_next_run_with_one_label(tmp_path):
    cfg = TrainingConfig()
    cfg.output.folder, cfg.output.name = str(tmp_path), "ink"
    cfg.output.save_every_n_epochs, cfg.output.keep_last, cfg.output.tensorboard = 2, 3, True
    cfg.sampling.prompts, cfg.sampling.every_n_steps = ["a cat"], 50
    (tmp_path / "ink.safetensors").write_bytes(b"x")
    rows = N.planned(cfg)
    assert [w for w, _ in rows] == ["LoRA", "Every 2 epochs, newest 3 kept", "State (to resume)",
                                    "Sample images", "TensorBoard logs"]  # fmt: skip
    assert [p for _, p in rows] == [
        str(tmp_path / "ink_2.safetensors"), str(tmp_path / "ink_2-000002.safetensors"), str(tmp_path / "ink_2_state"),
        str(tmp_path / "samples" / "ink_2_step*_*.png"), str(tmp_path / "logs" / "ink_2_<time>"),
    ]  # fmt: skip
    running = RunFiles(tmp_path, "ink")  # a run going on shows its own names, not the next run's
    assert N.planned(cfg, running)[0][1] == str(tmp_path / "ink.safetensors")


def test_core_run_names_import_neither_torch_nor_qt():
    code = "import sys, guitrainer.core.runs.names; print('torch' in sys.modules, 'PySide6' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
