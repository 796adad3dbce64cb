"""core.dataset_report without Qt: what an import did, the summary line, the left-out images an import brings back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.report import (
    ImportReport,
    SummaryBuilder,
    SummaryParams,
    plural,
    strip_text,
    summary_html,
    without_included,
)


def test_import_report_counts_in_plain_words():
    r = ImportReport(added=1)
    assert r.message() == "Added 1 image."
    r = ImportReport(added=3, rejected=[("/a/x.gif", "not an image we read"), ("/a/y.tif", "no")], duplicates=[("/a/z.png", "dup")])
    msg = r.message()
    assert msg.startswith("Added 3 images.") and "x.gif (not an image we read) and 1 more" in msg
    assert "1 already in the dataset, skipped." in msg
    r = ImportReport(added=1, partial_folders=[("/data/cats", 1)])
    assert "the other 1 image in cats" in r.message()
    assert ImportReport(rejected=[(f"/p/{i}.x", "bad") for i in range(205)]).details().endswith("… 5 more")


def test_strip_and_html_use_singular_for_one():
    items = [ds.DatasetItem(image_path=Path("/d/a.png"), caption_path=Path("/d/a.txt"), width=512, height=512)]
    s, _freq = SummaryBuilder().compute(items, SummaryParams(resolution=512))
    assert s.image_count == 1 and s.steps_per_epoch == 1
    text = strip_text(s, loading=False)
    assert text.startswith("1 image · ") and "1 step per epoch" in text and "images" not in text
    assert strip_text(s, loading=True).endswith("reading images…")
    html = summary_html(s, 1, True)
    assert "<b>1</b> image ·" in html and "<b>1</b> step per epoch" in html
    assert plural(2, "image") == "2 images" and plural(0, "step") == "0 steps"


def test_adding_a_folder_brings_its_left_out_images_back(tmp_path):
    a, b = tmp_path / "a", tmp_path / "ab"
    excluded = [str(a / "1.png"), str(a / "sub" / "2.png"), str(b / "3.png")]
    # adding folder a brings back what is under a, not what is under the look-alike folder ab
    assert without_included(excluded, [a]) == [str(b / "3.png")]
    assert without_included(excluded, [str(a / "1.png")]) == excluded[1:]
    assert without_included(excluded, []) == excluded


def test_core_modules_import_without_qt():
    code = (
        "import sys\n"
        "import guitrainer.core.dataset.report, guitrainer.core.checks.start, guitrainer.core.dataset.captioner_catalog\n"
        "print('PySide6' in sys.modules, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
