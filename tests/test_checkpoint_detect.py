"""core.checkpoint.detect_model: family and problems from key names, headers and diffusers folders."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from guitrainer.core.model.checkpoint import CheckpointError, detect_model, read_safetensors_header

UNET_IN = "model.diffusion_model.input_blocks.0.0.weight"
SD15_KEYS = {
    UNET_IN: (320, 4, 3, 3),
    "model.diffusion_model.out.2.weight": (4, 8, 3, 3),
    "cond_stage_model.transformer.text_model.embeddings.token_embedding.weight": (16, 8),
    "first_stage_model.decoder.conv_in.weight": (8, 4, 3, 3),
}
SDXL_KEYS = {
    UNET_IN: (320, 4, 3, 3),
    "conditioner.embedders.0.transformer.text_model.embeddings.token_embedding.weight": (16, 8),
    "conditioner.embedders.1.model.transformer.resblocks.0.attn.in_proj_weight": (24, 8),
    "first_stage_model.decoder.conv_in.weight": (8, 4, 3, 3),
}


def _write(path: Path, keys: dict[str, tuple[int, ...]], metadata: dict[str, str] | None = None) -> Path:
    save_file({k: np.zeros(shape, dtype=np.float16) for k, shape in keys.items()}, str(path), metadata=metadata)
    return path


def _folder(root: Path, cls: str, *, hidden: int = 768, in_channels: int = 4, prediction: str = "epsilon",
            index_extra: dict | None = None) -> Path:
    root.mkdir(parents=True)
    index = {"_class_name": cls, "unet": ["diffusers", "UNet2DConditionModel"], "text_encoder": ["transformers", "CLIPTextModel"]}
    index.update(index_extra or {})
    (root / "model_index.json").write_text(json.dumps(index))
    for sub, cfg in {
        "unet": {"in_channels": in_channels},
        "text_encoder": {"hidden_size": hidden},
        "scheduler": {"prediction_type": prediction},
    }.items():
        (root / sub).mkdir()
        name = "scheduler_config.json" if sub == "scheduler" else "config.json"
        (root / sub / name).write_text(json.dumps(cfg))
    return root


def test_sd15_single_file(tmp_path):
    d = detect_model(_write(tmp_path / "sd15.safetensors", SD15_KEYS))
    assert (d.family, d.kind, d.ok, d.level) == ("sd15", "single_file", True, "info")
    assert "SD 1.5" in d.message and d.family_label == "SD 1.5"


def test_sdxl_single_file(tmp_path):
    d = detect_model(_write(tmp_path / "xl.safetensors", SDXL_KEYS))
    assert (d.family, d.kind, d.ok) == ("sdxl", "single_file", True)


def test_sdxl_v_prediction_marker_is_a_warning(tmp_path):
    d = detect_model(_write(tmp_path / "vpred.safetensors", {**SDXL_KEYS, "v_pred": (1,)}))
    assert (d.family, d.ok, d.level, d.prediction_type) == ("sdxl", True, "warning", "v_prediction")


def test_lora_file_is_rejected_with_the_reason(tmp_path):
    kohya = {"lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight": (4, 320),
             "lora_unet_down_blocks_0_attentions_0_proj_in.lora_up.weight": (320, 4)}
    d = detect_model(_write(tmp_path / "style.safetensors", kohya, {"ss_network_module": "networks.lora"}))
    assert (d.family, d.ok, d.level) == (None, False, "error")
    assert "is a LoRA, not a base model" in d.message and "style.safetensors" in d.message
    peft = {"unet.down_blocks.0.attentions.0.to_q.lora_A.weight": (4, 320)}
    assert "LoRA" in detect_model(_write(tmp_path / "peft.safetensors", peft)).message


def test_inpainting_checkpoint_is_unsupported(tmp_path):
    d = detect_model(_write(tmp_path / "inpaint.safetensors", {**SD15_KEYS, UNET_IN: (320, 9, 3, 3)}))
    assert (d.family, d.ok) == (None, False)
    assert "inpainting" in d.message and "9 channels" in d.message


def test_sd2_and_refiner_and_unet_part_are_unsupported(tmp_path):
    sd2 = {UNET_IN: (320, 4, 3, 3), "cond_stage_model.model.transformer.resblocks.0.attn.in_proj_weight": (24, 8)}
    d = detect_model(_write(tmp_path / "sd21.safetensors", sd2))
    assert not d.ok and "2.x" in d.message
    refiner = {UNET_IN: (384, 4, 3, 3), "conditioner.embedders.0.model.transformer.resblocks.0.attn.in_proj_weight": (24, 8)}
    assert "refiner" in detect_model(_write(tmp_path / "refiner.safetensors", refiner)).message
    part = {"conv_in.weight": (320, 4, 3, 3), "down_blocks.0.resnets.0.conv1.weight": (8, 8, 3, 3)}
    d = detect_model(_write(tmp_path / "diffusion_pytorch_model.safetensors", part))
    assert not d.ok and "model_index.json" in d.message


def test_truncated_and_invalid_files_name_the_file_and_the_problem(tmp_path):
    good = _write(tmp_path / "full.safetensors", SD15_KEYS)
    data = good.read_bytes()
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[: len(data) - 1000])  # data missing: an interrupted download
    d = detect_model(cut)
    assert (d.ok, d.level) == (False, "error")
    assert "cut.safetensors" in d.message and "truncated" in d.message
    head = tmp_path / "head.safetensors"
    head.write_bytes(data[:50])  # header itself cut off
    assert "truncated" in detect_model(head).message
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(b"abc")
    assert "only 3 bytes" in detect_model(tiny).message
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(struct.pack("<Q", 5) + b"{nope" + b"\0" * 10)
    d = detect_model(junk)
    assert "junk.safetensors" in d.message and "not JSON" in d.message
    with pytest.raises(CheckpointError):
        read_safetensors_header(junk)


def test_missing_path_and_empty(tmp_path):
    d = detect_model(tmp_path / "nowhere" / "model.safetensors")
    assert (d.kind, d.ok) == ("missing", False) and "does not exist" in d.message
    assert detect_model("").kind == "missing"


def test_demo_and_hub_ids():
    d = detect_model("demo")
    assert (d.family, d.kind, d.ok) == ("demo", "demo", True)
    xl = detect_model("stabilityai/stable-diffusion-xl-base-1.0")
    assert (xl.family, xl.kind, xl.ok) == ("sdxl", "hub_id", True) and "internet" in xl.message
    assert detect_model("stable-diffusion-v1-5/stable-diffusion-v1-5").family == "sd15"
    assert detect_model("someone/mystery-model").family is None
    assert not detect_model("stabilityai/stable-diffusion-2-1").ok


def test_diffusers_folders(tmp_path):
    sd15 = detect_model(_folder(tmp_path / "sd15", "StableDiffusionPipeline"))
    assert (sd15.family, sd15.kind, sd15.ok, sd15.prediction_type) == ("sd15", "diffusers_folder", True, "epsilon")
    xl = detect_model(_folder(tmp_path / "xl", "StableDiffusionXLPipeline", hidden=1280))
    assert (xl.family, xl.ok) == ("sdxl", True)
    sd2 = detect_model(_folder(tmp_path / "sd2", "StableDiffusionPipeline", hidden=1024))
    assert (sd2.family, sd2.ok) == (None, False) and "2.x" in sd2.message
    vpred = detect_model(_folder(tmp_path / "v", "StableDiffusionPipeline", prediction="v_prediction"))
    assert (vpred.family, vpred.ok, vpred.level) == ("sd15", True, "warning") and "v-prediction" in vpred.message
    inpaint = detect_model(_folder(tmp_path / "inp", "StableDiffusionInpaintPipeline", in_channels=9))
    assert not inpaint.ok and "inpainting" in inpaint.message
    refiner = detect_model(_folder(tmp_path / "ref", "StableDiffusionXLImg2ImgPipeline", index_extra={"text_encoder": [None, None]}))
    assert not refiner.ok and "refiner" in refiner.message
    flux = detect_model(_folder(tmp_path / "flux", "FluxPipeline"))  # the Flux.1 family recognises its own folder
    assert (flux.family, flux.ok) == ("flux1", True)
    fill = detect_model(_folder(tmp_path / "fill", "FluxFillPipeline"))
    assert not fill.ok and "FluxFillPipeline" in fill.message
    # model_index.json itself chosen: the folder is meant
    assert detect_model(tmp_path / "sd15" / "model_index.json").family == "sd15"


def test_folder_without_model_index(tmp_path):
    (tmp_path / "ckpts").mkdir()
    _write(tmp_path / "ckpts" / "a.safetensors", SD15_KEYS)
    d = detect_model(tmp_path / "ckpts")
    assert not d.ok and "no model_index.json" in d.message and "a.safetensors" in d.message


def test_pickle_checkpoint_is_read_without_unpickling(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "old.ckpt"
    state = {k: torch.zeros(1) for k in SD15_KEYS}
    torch.save({"state_dict": state, "global_step": 1}, path)
    d = detect_model(path)
    assert (d.family, d.ok, d.level) == ("sd15", True, "warning")
    assert "weights_only=True" in d.message and ".safetensors" in d.message


class _CountingFile:
    """A file object that adds the bytes each read returns to ``counter[path]``."""

    def __init__(self, f, counter: dict, path: str):  # noqa: ANN001 - any binary file object
        self._f, self._counter, self._path = f, counter, path

    def _add(self, n: int) -> None:
        self._counter[self._path] = self._counter.get(self._path, 0) + n

    def read(self, *args):  # noqa: ANN002, ANN202
        data = self._f.read(*args)
        self._add(len(data))
        return data

    read1 = read

    def readinto(self, b):  # noqa: ANN001, ANN202
        n = self._f.readinto(b)
        self._add(n or 0)
        return n

    readinto1 = readinto

    def readline(self, *args):  # noqa: ANN002, ANN202
        data = self._f.readline(*args)
        self._add(len(data))
        return data

    def __iter__(self):  # noqa: ANN204
        return iter(self.readline, b"")

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc):  # noqa: ANN002, ANN204
        return self._f.__exit__(*exc)

    def __getattr__(self, name: str):  # noqa: ANN204 - seek, tell, close, ... as the real file
        return getattr(self._f, name)


def test_header_only_read_for_a_7gb_file(tmp_path, monkeypatch):
    """A sparse 7 GB file: detection reads the 8-byte length and the JSON header, not one byte of tensor data
    (counted through every file object opened on it, and no memory map: a count, not a time)."""
    import builtins
    import io
    import mmap

    big = 7 * 1024**3
    header = {UNET_IN: {"dtype": "F16", "shape": [320, 4, 3, 3], "data_offsets": [0, 23040]},
              "cond_stage_model.transformer.text_model.x": {"dtype": "U8", "shape": [big - 23040], "data_offsets": [23040, big]}}
    raw = json.dumps(header).encode()
    path = tmp_path / "huge.safetensors"
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + big)

    read: dict[str, int] = {}
    opened: list[str] = []
    maps: list[tuple] = []
    real_open, real_mmap = builtins.open, mmap.mmap
    real_os_open, real_fdopen, real_os_read = os.open, os.fdopen, os.read
    fds: set[int] = set()  # descriptors os.open opened on the file (base.safe_open opens this way)

    def counting_open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202 - open's own signature
        f = real_open(file, mode, *args, **kwargs)
        if not isinstance(file, int) and Path(file) == path:
            opened.append(mode)
            return _CountingFile(f, read, str(path))
        return f

    def counting_os_open(file, flags, *args, **kwargs):  # noqa: ANN001, ANN202
        fd = real_os_open(file, flags, *args, **kwargs)
        if Path(file) == path:
            opened.append(f"os.open {flags:#o}")
            fds.add(fd)
        return fd

    def counting_fdopen(fd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        f = real_fdopen(fd, *args, **kwargs)
        return _CountingFile(f, read, str(path)) if fd in fds else f

    def counting_os_read(fd, n):  # noqa: ANN001, ANN202
        data = real_os_read(fd, n)
        if fd in fds:
            read[str(path)] = read.get(str(path), 0) + len(data)
        return data

    def recording_mmap(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        maps.append(args)
        return real_mmap(*args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    monkeypatch.setattr(io, "open", counting_open)  # pathlib's Path.open
    monkeypatch.setattr(os, "open", counting_os_open)
    monkeypatch.setattr(os, "fdopen", counting_fdopen)
    monkeypatch.setattr(os, "read", counting_os_read)
    monkeypatch.setattr(mmap, "mmap", recording_mmap)
    d = detect_model(path)
    monkeypatch.undo()
    assert d.family == "sd15" and d.ok
    # by hand: the little-endian u64 header length (8 bytes), then the header itself (len(raw) bytes)
    print(f"\ndetect_model on a {big / 2**30:.0f} GiB file: opened {len(opened)}x, read {read.get(str(path))} bytes")
    assert opened and read.get(str(path)) == 8 + len(raw), (opened, read)
    assert maps == []


def _raw_header(path, header: dict, data: bytes = b"\0" * 64):
    raw = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize(
    ("header", "words"),
    [
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": ["0", "8"]}}, "malformed data offsets"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}}, "malformed data offsets"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, "malformed data offsets"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, None]}}, "malformed data offsets"),
        ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, "malformed shape"),
        ({"__metadata__": ["not", "a", "table"], "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}},
         "__metadata__ is not a table"),
    ],
)
def test_malformed_safetensors_headers_are_refused_in_words(tmp_path, header, words):
    path = _raw_header(tmp_path / "odd.safetensors", header)
    with pytest.raises(CheckpointError, match=words) as ei:
        read_safetensors_header(path)
    assert "odd.safetensors" in str(ei.value)
    d = detect_model(path)  # the Model page's check says the same, no traceback
    assert d.ok is False and "odd.safetensors" in d.message


def test_a_well_formed_header_with_metadata_still_reads(tmp_path):
    header = {"__metadata__": {"ss_network_dim": "4"}, "w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    tensors, meta = read_safetensors_header(_raw_header(tmp_path / "ok.safetensors", header))
    assert meta == {"ss_network_dim": "4"} and tensors["w"]["shape"] == [2]
