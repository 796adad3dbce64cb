"""A tiny WD14-shaped tagger (ONNX) and a stand-in for the Hugging Face hub, for the captioning tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

TAGS = [("long_hair", 0), ("short_hair", 0), ("smile", 0), ("my_char", 4), ("^_^", 0), ("general", 9)]
BIAS = [5.0, -5.0, 0.0, 5.0, 4.0, 5.0]  # sigmoid: 0.993, 0.007, ~0.5, 0.993, 0.982, 0.993


def build_tiny_tagger(folder: Path, size: int = 16) -> Path:
    """A WD14-shaped ONNX model: mean colour -> linear -> sigmoid, with its selected_tags.csv."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    n = len(TAGS)
    w = np.random.default_rng(0).normal(0, 1e-4, (3, n)).astype(np.float32)
    b = np.array(BIAS, dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["input_1"], ["mean"], axes=[1, 2], keepdims=0),
            helper.make_node("MatMul", ["mean", "W"], ["logits0"]),
            helper.make_node("Add", ["logits0", "B"], ["logits"]),
            helper.make_node("Sigmoid", ["logits"], ["predictions_sigmoid"]),
        ],
        "tiny_tagger",
        [helper.make_tensor_value_info("input_1", TensorProto.FLOAT, ["N", size, size, 3])],
        [helper.make_tensor_value_info("predictions_sigmoid", TensorProto.FLOAT, ["N", n])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    lines = ["tag_id,name,category,count"] + [f"{i},{name},{c},{100 - i}" for i, (name, c) in enumerate(TAGS)]
    (folder / "selected_tags.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


class FakeHub:
    """Stands in for ``huggingface_hub.list_repo_files`` / ``hf_hub_download`` (no network here).

    Serves ``files`` (name -> bytes) into a fake cache snapshot, driving ``tqdm_class`` in two halves
    like a real download. ``pause`` (file name -> Event) holds that file half-way until the event is set.
    """

    def __init__(self, monkeypatch, cache: Path, files: dict[str, bytes], pause: dict | None = None):
        import huggingface_hub

        self.snapshot = cache / "snapshots" / "0123abcd"
        self.files = files
        self.pause = pause or {}
        self.fetched: list[str] = []
        self.fail: Exception | None = None
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(huggingface_hub, "list_repo_files", self.list_repo_files)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", self.hf_hub_download)

    @classmethod
    def from_folder(cls, monkeypatch, cache: Path, folder: Path, **kw) -> FakeHub:
        return cls(monkeypatch, cache, {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}, **kw)

    def list_repo_files(self, repo_id: str, *, revision=None, repo_type=None, token=None) -> list[str]:
        if self.fail is not None:
            raise self.fail
        return list(self.files)

    def hf_hub_download(self, repo_id: str, filename: str, *, tqdm_class=None, **_kw) -> str:
        data = self.files[filename]
        bar = tqdm_class(total=len(data), initial=0, desc=filename, unit="B", name="huggingface_hub.http_get") if tqdm_class else None
        half = len(data) // 2
        if bar is not None:
            bar.update(half)
        if filename in self.pause:
            assert self.pause[filename].wait(10), "test never released the paused download"
        if bar is not None:
            bar.update(len(data) - half)
            bar.close()
        out = self.snapshot / filename
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        self.fetched.append(filename)
        return str(out)
