"""Before / after: each sample prompt's first picture beside its latest, one row per prompt.

With "Sample before training" the first picture is the base model's (step 0), so the row says what the LoRA
changed. For the built-in Demo each row also says what the shape measure reads in both pictures
(:mod:`guitrainer.core.demo.progress`: "learned", "kept", …); for other models the pictures speak for themselves.
Used by the Training page's Samples tab, the Runs page and the Output page.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import Qt
from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from guitrainer.core.demo.progress import PromptProgress, demo_progress
from guitrainer.core.events import SampleImage
from guitrainer.core.runs.samples import SamplePair, first_and_last

#: the side the pictures are shown at (a 64 px Demo sample is enlarged 2× without smoothing: pixels stay crisp)
PICTURE_SIZE = 128
EMPTY_TEXT = "Each sample prompt's first and latest pictures appear here side by side while training."


def picture(path: str, size: int = PICTURE_SIZE) -> QPixmap:
    """The sample at ``path`` scaled to ``size``: small ones by whole pixels, large ones smoothly; null if unreadable."""
    pix = QPixmap(path)
    if pix.isNull():
        return pix
    small = max(pix.width(), pix.height()) <= size
    mode = Qt.TransformationMode.FastTransformation if small else Qt.TransformationMode.SmoothTransformation
    return pix.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio, mode)


class PairRow:
    """The widgets of one prompt's row."""

    def __init__(self, pair: SamplePair, progress: PromptProgress | None, size: int = PICTURE_SIZE):
        self.pair = pair
        self.size = size
        self.progress = progress
        self.prompt = QLabel(pair.prompt or "(empty prompt)")
        self.prompt.setWordWrap(True)
        self.prompt.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.before = self._picture(pair.first, "before")
        self.after = self._picture(pair.last, "after")
        self.before_caption = QLabel(_step_text(pair.first.step, base=pair.before_training))
        self.after_caption = QLabel(_step_text(pair.last.step) if pair.last.step != pair.first.step else "no later sample yet")
        self.measure = QLabel(_measure_text(progress) if progress is not None else "")
        self.measure.setObjectName("demo_measure")
        self.measure.setWordWrap(True)
        self.measure.setTextFormat(Qt.TextFormat.RichText)

    def _picture(self, sample: SampleImage, side: str) -> QLabel:
        label = QLabel()
        label.setObjectName(f"{side}_picture")
        label.setFixedSize(self.size, self.size)
        label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        label.setFrameShape(QFrame.Shape.StyledPanel)
        pix = picture(sample.path, self.size)
        if pix.isNull():
            label.setText("(file gone)")
        else:
            label.setPixmap(pix)
        label.setToolTip(f"{sample.prompt}\nstep {sample.step}\n{sample.path}")
        return label


def _step_text(step: int, *, base: bool = False) -> str:
    return "step 0: the base model" if base else f"step {step}"


def _measure_text(p: PromptProgress) -> str:
    good = p.verdict in ("learned", "kept")
    colour = "#1b7f3b" if good else "#a15c00"
    return (
        f"<b style='color:{colour}'>{p.verdict.capitalize()}</b><br>asks for a {p.color} {p.shape}<br>"
        f"before: {p.before.describe()}<br>now: {p.after.describe()}"
    )


class BeforeAfterView(QWidget):
    """Rows of prompt | first picture | latest picture | (Demo) what the measure reads."""

    def __init__(self, parent: QWidget | None = None, *, picture_size: int = PICTURE_SIZE):
        super().__init__(parent)
        self.setObjectName("before_after")
        self.picture_size = picture_size
        self.demo = False
        self._samples: list[SampleImage] = []
        self.rows: list[PairRow] = []
        outer = QVBoxLayout(self)
        outer.setContentsMargins(4, 4, 4, 4)
        self.empty = QLabel(EMPTY_TEXT)
        self.empty.setObjectName("before_after_empty")
        self.empty.setWordWrap(True)
        outer.addWidget(self.empty)
        self.grid_host = QWidget()
        self.grid = QGridLayout(self.grid_host)
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setHorizontalSpacing(12)
        outer.addWidget(self.grid_host)
        outer.addStretch(1)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)

    def set_samples(self, samples: Iterable[SampleImage], *, demo: bool = False) -> None:
        """Show these samples (a run's, in the order made); ``demo`` reads them with the Demo's measure."""
        self._samples = list(samples)
        self.demo = demo
        self._rebuild()

    def add_sample(self, sample: SampleImage) -> None:
        self._samples.append(sample)
        self._rebuild()

    def clear(self, *, demo: bool = False) -> None:
        self.set_samples([], demo=demo)

    def measures(self) -> list[PromptProgress]:
        """What the Demo's measure read, per row that has one."""
        return [r.progress for r in self.rows if r.progress is not None]

    def _rebuild(self) -> None:
        while self.grid.count():
            item = self.grid.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        pairs = first_and_last(self._samples)
        measured: dict[str, PromptProgress] = {}
        if self.demo:
            measured = {p.prompt: p for p in demo_progress([q for q in pairs if q.last.step > q.first.step])}
        self.rows = [PairRow(pair, measured.get(pair.prompt), self.picture_size) for pair in pairs]
        self.empty.setVisible(not self.rows)
        if not self.rows:
            return
        heads = ("Prompt", "First sample", "Latest sample", "Demo measure" if self.demo else "")
        for col, text in enumerate(heads):
            if text:
                head = QLabel(f"<b>{text}</b>")
                self.grid.addWidget(head, 0, col)
        for i, row in enumerate(self.rows):
            r = 1 + 2 * i
            self.grid.addWidget(row.prompt, r, 0, 2, 1, Qt.AlignmentFlag.AlignTop)
            self.grid.addWidget(row.before, r, 1)
            self.grid.addWidget(row.after, r, 2)
            self.grid.addWidget(row.before_caption, r + 1, 1, Qt.AlignmentFlag.AlignHCenter)
            self.grid.addWidget(row.after_caption, r + 1, 2, Qt.AlignmentFlag.AlignHCenter)
            if self.demo:
                self.grid.addWidget(row.measure, r, 3, 2, 1, Qt.AlignmentFlag.AlignTop)
        self.grid.setColumnStretch(0, 1)
        self.grid.setColumnStretch(3, 2)
