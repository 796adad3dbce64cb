"""Issue 27 (10, 11): every reader of a user-given path refuses a named pipe, a device, a folder where a file is
expected, a name too long and a ``~user`` with no such user at once, in words that say what the path is, through
the one helper (:mod:`guitrainer.base.safe_open`). Each call runs under a hang guard: a reader that opened a FIFO
would block forever, one that read /dev/zero would never end."""

from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import pytest

from guitrainer.config import ConfigError, TrainingConfig, load_toml
from guitrainer.config.presets import PresetStore, read_preset
from guitrainer.core.model.checkpoint import CheckpointError, detect_model, read_safetensors_header
from guitrainer.core.model.init_lora import init_lora_problem
from guitrainer.core.model.vae_choice import describe_vae
from guitrainer.core.runs import state as run_state

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo") or not Path("/dev/zero").exists(),
                                reason="named pipes and /dev as on Linux and macOS")
LONG = "n" * 300


def guarded(fn, *args, **kwargs):
    """``fn(*args)`` in a thread, failing the test when it does not return within the hang guard."""
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} hung"
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result.get("value")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    p = tmp_path / "pipe.safetensors"
    os.mkfifo(p)
    return p


# --------------------------------------------------------------------------- config and preset files


@pytest.mark.parametrize(("kind", "said"), [("fifo", "is a named pipe (FIFO), not a file"),
                                            ("/dev/zero", "is a device, not a file"),
                                            ("folder", "is a folder, not a file"),
                                            ("huge", "larger than a config file can be (4 MB)")])
def test_config_and_preset_files_that_are_not_config_files(tmp_path, kind, said):
    if kind == "fifo":
        path = tmp_path / "c.toml"
        os.mkfifo(path)
    elif kind == "folder":
        path = tmp_path
    elif kind == "huge":
        path = tmp_path / "huge.toml"
        with open(path, "wb") as f:
            f.truncate(5 << 20)  # sparse: 5 MB that are never read
    else:
        path = Path(kind)
    for reader in (load_toml, read_preset):
        with pytest.raises(ConfigError) as ei:
            guarded(reader, path)
        assert ei.value.field == "(file)" and said in ei.value.message and ei.value.source == str(path)


def test_a_pipe_among_the_user_presets_is_one_error_not_a_hang(tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    os.mkfifo(user / "stuck.toml")
    store = guarded(PresetStore, shipped_dir=tmp_path / "none", user_dir=user)
    (err,) = store.errors
    assert "named pipe" in str(err) and "stuck.toml" in str(err)


def test_odd_config_paths_are_refused_in_words(tmp_path):
    for path, said in ((f"~nosuchuser_27/{LONG[:5]}.toml", "there is no user “nosuchuser_27”"),
                       (str(tmp_path / f"{LONG}.toml"), "longer than 255 bytes")):
        with pytest.raises(ConfigError, match=said):
            load_toml(path)


# --------------------------------------------------------------------------- models


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "/dev/null", "/proc/self/mem"])
def test_a_special_file_as_the_base_model_is_an_error_at_once(fifo, special):
    path = str(fifo) if special == "fifo" else special
    if not Path(path).exists():
        pytest.skip(f"no {path} here")
    found = guarded(detect_model, path)
    assert not found.ok and found.level == "error"
    assert found.kind != "hub_id"  # never taken for a Hugging Face id
    if special != "/proc/self/mem":  # a "regular file" of 0 bytes: "not a model file"
        assert ("named pipe" if special == "fifo" else "a device") in found.message


def test_the_safetensors_header_reader_refuses_pipes_and_devices(fifo):
    for path, said in ((fifo, "named pipe"), ("/dev/zero", "a device")):
        with pytest.raises(CheckpointError, match=said):
            guarded(read_safetensors_header, path)


def test_a_special_file_or_an_odd_path_as_the_vae(fifo, tmp_path):
    assert "named pipe" in guarded(describe_vae, str(fifo)).problem
    assert "a device" in guarded(describe_vae, "/dev/zero").problem
    assert "longer than 255 bytes" in describe_vae(str(tmp_path / LONG)).problem
    assert "no user" in describe_vae("~nosuchuser_27/vae.safetensors").problem or \
        "not found" in describe_vae("~nosuchuser_27/vae.safetensors").problem


def test_a_special_file_or_an_odd_path_as_the_lora_to_continue_from(fifo, tmp_path):
    assert "named pipe" in guarded(init_lora_problem, str(fifo), "lora")
    assert "a device" in guarded(init_lora_problem, "/dev/zero", "lora")
    assert "longer than 255 bytes" in init_lora_problem(str(tmp_path / LONG), "lora")
    folder = tmp_path / "diffusers_lora"
    folder.mkdir()
    os.mkfifo(folder / "pytorch_lora_weights.safetensors")
    assert "cannot be read" in guarded(init_lora_problem, str(folder), "lora")


def test_the_engine_refuses_a_special_base_model_before_any_hub_lookup(fifo, monkeypatch):
    from guitrainer.config import ModelConfig
    from guitrainer.engine.models import hub
    from guitrainer.engine.models.loading import load_base_model
    from guitrainer.engine.models.types import ModelLoadError

    monkeypatch.setattr(hub, "download_model", lambda *a, **k: pytest.fail("looked up on the hub"))
    for path, said in ((str(fifo), "named pipe"), ("/dev/null", "a device"), (f"/tmp/{LONG}", "255 bytes")):
        with pytest.raises(ModelLoadError, match=said):
            guarded(load_base_model, ModelConfig(base=path, family="auto"), offline=False)


def test_the_engine_refuses_a_pipe_inside_a_model_folder(tmp_path):
    from guitrainer.engine.models.loading import load_folder
    from guitrainer.engine.models.types import ModelLoadError

    (tmp_path / "unet").mkdir()
    os.mkfifo(tmp_path / "unet" / "config.json")
    with pytest.raises(ModelLoadError, match="not a regular file"):
        guarded(load_folder, tmp_path)


def test_the_lora_loader_refuses_a_pipe(fifo):
    from guitrainer.engine.network.lora import LoraFormatError, read_lora_as_kohya

    with pytest.raises(LoraFormatError, match="named pipe"):
        guarded(read_lora_as_kohya, fifo)


# --------------------------------------------------------------------------- states and output folders


def test_state_folders_with_special_files_or_odd_names(tmp_path):
    state = tmp_path / "x_state"
    state.mkdir()
    os.mkfifo(state / run_state.STATE_FILE)
    assert guarded(run_state.is_state_folder, state) is False
    with pytest.raises(run_state.StateError, match="named pipe"):
        guarded(run_state.read_info, state)
    for odd in (tmp_path / LONG, "~nosuchuser_27/x_state", tmp_path / "file_not_folder"):
        assert run_state.is_state_folder(odd) is False
        with pytest.raises(run_state.StateError):
            run_state.read_info(odd)


def test_repair_interrupted_never_raises_whatever_the_output_folder(tmp_path, fifo):
    for odd in ("~nosuchuser_27/out", str(tmp_path / LONG), str(fifo), "/dev/null", f"{tmp_path}/a\x00b"):
        assert guarded(run_state.repair_interrupted, odd) == []


def test_a_pipe_among_a_states_files_is_refused_not_loaded(tmp_path):
    from guitrainer.engine import resume
    from guitrainer.engine.errors import TrainingFailed

    os.mkfifo(tmp_path / run_state.OPTIMIZER_FILE)
    with pytest.raises(TrainingFailed, match="named pipe"):
        guarded(resume._load, tmp_path, run_state.OPTIMIZER_FILE, lambda p: pytest.fail("opened"))


# --------------------------------------------------------------------------- images


def test_images_that_are_special_files_are_unreadable_with_the_reason(tmp_path):
    from guitrainer.core.dataset.scan import Flag, collect, probe_image

    os.mkfifo(tmp_path / "a.png")
    os.symlink("/dev/zero", tmp_path / "b.png")
    for name in ("a.png", "b.png"):
        info = guarded(probe_image, tmp_path / name)
        assert Flag.UNREADABLE in info.flags and "not a file" in info.problem
    col = collect([tmp_path / "gone", tmp_path / LONG, "~nosuchuser_27/x"])
    reasons = [why for _p, why in col.rejected]
    assert reasons[0] == "does not exist" and "255 bytes" in reasons[1] and "no user" in reasons[2]


def test_auto_captioning_skips_pipes_as_images_or_captions_saying_why(tmp_path):
    from PIL import Image

    from guitrainer.engine.captioners import Captioner, read_tags_csv, resolve_source, run_captioning

    class Constant(Captioner):
        def caption(self, images):
            return ["a cat"] * len(images)

    Image.new("RGB", (32, 32)).save(tmp_path / "good.png")
    Image.new("RGB", (32, 32)).save(tmp_path / "piped_caption.png")
    os.mkfifo(tmp_path / "piped_caption.txt")
    os.mkfifo(tmp_path / "piped_image.png")
    paths = [tmp_path / n for n in ("good.png", "piped_caption.png", "piped_image.png")]
    result = guarded(run_captioning, Constant(), paths, mode="overwrite")
    assert [c.caption_path.name for c in result.changes] == ["good.txt"]
    assert sorted((p.name, "named pipe" in why) for p, why in result.failed) == [("piped_caption.png", True),
                                                                                   ("piped_image.png", True)]
    os.mkfifo(tmp_path / "selected_tags.csv")
    with pytest.raises(OSError, match="named pipe"):
        guarded(read_tags_csv, tmp_path / "selected_tags.csv")
    with pytest.raises(Exception, match="255 bytes"):
        resolve_source(str(tmp_path / LONG))


def test_the_config_checks_odd_paths_without_raising(tmp_path, fifo):
    """Validation and the disk checks of a config with every path odd: messages, never an exception."""
    from guitrainer.core.checks.inputs import check_inputs

    cfg = TrainingConfig()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg.set("dataset.folders", [str(tmp_path / LONG)])
        cfg.set("model.base", str(fifo))
        cfg.set("model.vae", "~nosuchuser_27/vae")
        cfg.set("model.init_lora", "/dev/zero")
        cfg.set("validation.folder", str(fifo))
        cfg.set("output.folder", "/dev/null")
    report = guarded(check_inputs, cfg)
    fields = {line.split(":", 1)[0] for line in report.errors}
    assert fields == {"dataset.folders[0]", "model.base", "model.vae", "model.init_lora", "validation.folder",
                      "output.folder"}, report.errors
