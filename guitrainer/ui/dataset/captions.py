"""Caption writes of the Dataset page: tag operations (one undo step each), auto-captioning, reloads.

:class:`CaptionOperations` does them for the page, which owns it: it is given the widgets and models it works
with and the page's callbacks in its constructor, and listens to the widgets' requests itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QUndoStack

from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.report import edit_bytes, plan_and_write, plural
from guitrainer.core.dataset.scan import CaptionEdit, DatasetItem
from guitrainer.ui.binding import ConfigBinding
from guitrainer.ui.dataset.caption_editor import CaptionEditor
from guitrainer.ui.dataset.caption_jobs import CaptionEditCommand, CaptionJobRunner
from guitrainer.ui.dataset.captioning import CaptioningPanel
from guitrainer.ui.dataset.model import DatasetFilterProxy, DatasetModel
from guitrainer.ui.dataset.tag_tools import TagToolsPanel

if TYPE_CHECKING:
    from guitrainer.engine.captioners import CaptionRunResult


class CaptionOperations:
    """Tag operations, caption reloads and auto-captioning results, applied to the page's images.

    It answers the tag tools' ``operation_requested``, the auto-captioning panel's ``start_requested``,
    ``captioned`` and ``run_finished``, the editor's ``caption_saved`` and the job runner's ``busy_changed``
    (while captions are written, nothing else edits them: the editor, the tag tools and ``undo_actions`` are
    off). What it changes on disk is one step on ``undo_stack`` each.

    Args:
        model, proxy: the page's images and the grid's filter over them.
        editor, tag_tools, captioning: the Caption, Tags and Auto-caption tabs.
        jobs: where big caption writes run (off the GUI thread).
        undo_stack, undo_actions: the page's caption undo stack, and its Undo / Redo actions.
        binding: the config (``dataset.caption_extension``).
        selected_items: the images selected in the grid, in grid order.
        show_status: says what happened on the page's status line (and in its log).
        schedule_summary: the page's summary is out of date.
        tag_operation_finished: called once per :meth:`apply_tag_operation`, when it is done, with its edit
            (None: no images, or it failed).
        filter_by_tag: make the grid show only images with this tag ("" for all), the tool bar's chip with it: a
            tag filter follows a rename of its tag, and clears (saying so) when no caption has the tag any more.
    """

    def __init__(
        self,
        *,
        model: DatasetModel,
        proxy: DatasetFilterProxy,
        editor: CaptionEditor,
        tag_tools: TagToolsPanel,
        captioning: CaptioningPanel,
        jobs: CaptionJobRunner,
        undo_stack: QUndoStack,
        undo_actions: Sequence[QAction],
        binding: ConfigBinding,
        selected_items: Callable[[], list[DatasetItem]],
        show_status: Callable[[str], None],
        schedule_summary: Callable[[], None],
        tag_operation_finished: Callable[[CaptionEdit | None], None],
        filter_by_tag: Callable[[str], None] = lambda _tag: None,
    ) -> None:
        self.model, self.proxy = model, proxy
        self.editor, self.tag_tools, self.captioning = editor, tag_tools, captioning
        self.jobs, self.undo_stack, self.undo_actions = jobs, undo_stack, tuple(undo_actions)
        self.binding = binding
        self._selected_items = selected_items
        self._show_status = show_status
        self._schedule_summary = schedule_summary
        self._finished = tag_operation_finished
        self._filter_by_tag = filter_by_tag
        self._when_idle: list[Callable[[], None]] = []  # waits for the caption jobs to finish

        tag_tools.operation_requested.connect(self.apply_tag_operation)
        captioning.start_requested.connect(self.start_captioning)
        captioning.captioned.connect(self._on_auto_caption)
        captioning.run_finished.connect(self._on_captioning_finished)
        editor.caption_saved.connect(self._on_caption_saved)
        jobs.busy_changed.connect(self._on_jobs_busy)

    def _items(self, scope: str) -> list[DatasetItem]:
        return self._selected_items() if scope == "selection" else list(self.model.items)

    def apply_tag_operation(self, description: str, op: Callable[[str], str], scope: str = "selection") -> CaptionEdit | None:
        """Run a tag operation on the selection or all images as ONE undo step; reports how many changed.

        An edit of ``jobs.min_captions`` images or more is read, changed and written in a worker thread:
        this returns None at once, the status line shows the progress, and the tag tools, caption box and
        undo / redo are disabled until it is done. A smaller one is done before this returns (and returns
        the edit). Either way ``tag_operation_finished(edit or None)`` says when it is done.
        """
        items = self._items(scope)
        if not items:
            self._show_status("Select images first, or choose “All images”.")
            self._finished(None)
            return None
        self.editor.flush()
        if self.jobs.in_background(len(items)):
            self.jobs.submit(
                description,
                lambda report: plan_and_write(items, op, description, report),
                lambda result: self._tag_operation_done(description, *result),
                lambda message: self._tag_operation_done(description, None, f"failed: {message}"),
            )
            return None
        return self._tag_operation_done(description, *plan_and_write(items, op, description))

    def _tag_operation_done(
        self, description: str, edit: CaptionEdit | None, error: str | None
    ) -> CaptionEdit | None:
        """The edit is planned and written (or failed with ``error``): push it, refresh, report."""
        if edit is None or error is not None:
            self._show_status(f"{description}: nothing changed, {error}.")
            self._finished(None)
            return None
        note = f" {edit.skipped_not_utf8} not UTF-8, left unchanged." if edit.skipped_not_utf8 else ""
        if not edit.count:
            self._show_status(f"{description}: no caption needed a change.{note}")
        else:
            self.undo_stack.push(self._command(edit))
            self.captions_changed([ch.caption_path for ch in edit.changes], edit_bytes(edit))
            n = edit.count
            s = "s" if n != 1 else ""
            follow = self._follow_tag_filter(edit.renamed)
            self._show_status(f"{description}: changed {n} caption{s} (Ctrl+Z undoes it).{note}{' ' + follow if follow else ''}")
        self._finished(edit)
        return edit

    def _command(self, edit: CaptionEdit) -> CaptionEditCommand:
        """The undo step of an edit already written; its undo / redo run as caption jobs when big."""
        return CaptionEditCommand(edit, self.captions_changed, self._show_status, self.jobs, self._after_undo_or_redo)

    def _after_undo_or_redo(self, edit: CaptionEdit, forward: bool) -> str:
        """An edit was undone or redone: the tag filter follows its rename either way (what to add to the message)."""
        renamed = edit.renamed if forward or edit.renamed is None else (edit.renamed[1], edit.renamed[0])
        return self._follow_tag_filter(renamed)

    def _follow_tag_filter(self, renamed: tuple[str, str] | None) -> str:
        """Captions changed: a tag filter follows a rename of its tag, or clears when no image has it any more.
        Returns what to tell the user ("" when the filter stays)."""
        tag, note = ds.tag_filter_after(self.proxy.tag, (it.caption for it in self.model.items), renamed)
        if tag != self.proxy.tag:
            self._filter_by_tag(tag)
        return note

    def _on_jobs_busy(self, busy: bool) -> None:
        """Nothing else edits captions while a bulk edit (or its undo / redo) is being written."""
        self.editor.set_locked(busy)
        self.tag_tools.set_busy(busy)
        for action in self.undo_actions:
            action.setEnabled(not busy)
        if not busy:
            waiting, self._when_idle = self._when_idle, []
            for fn in waiting:
                fn()

    def reload(self) -> None:
        """Read every image's caption again, from the file ``dataset.caption_extension`` names now."""
        ext = self.binding.get("dataset.caption_extension")
        self.editor.flush()
        for it in self.model.items:
            it.caption_path = ds.caption_path_for(it.image_path, ext)
            it.reload_caption()
        self.model.refresh_all()
        cur = self.editor.item
        if cur is not None:
            self.editor.set_item(None)
            self.editor.set_item(cur)
        self._schedule_summary()

    def captions_changed(self, paths: list[Path], written: Mapping[Path, bytes | None] | None = None) -> None:
        """Caption files changed on disk; ``written``: their bytes now (then the files are not read again)."""
        if written is None:
            touched = self.model.refresh_paths(paths)
        else:  # a bulk edit: decode the known bytes, one repaint for all (2,000 captions: ~10 ms, not ~100)
            touched = []
            for it in self.model.items:
                if it.caption_path in written:
                    it.set_caption(ds.decode_caption(written[it.caption_path]))
                    touched.append(it)
            if len(touched) > 50:
                self.model.refresh_all()
            else:
                for it in touched:
                    self.model.refresh_item(it)
        if self.editor.item in touched:
            self.editor.reload()
        if self.proxy.is_filtering():
            self.proxy.invalidate()
        self._schedule_summary()

    def _on_caption_saved(self, item: DatasetItem) -> None:
        self.model.refresh_item(item)
        self._schedule_summary()

    def start_captioning(self, scope: str) -> None:
        """Auto-caption the selection or all images (the panel's Start)."""
        if self.jobs.busy:  # it would write the captions being edited
            self._show_status("Captions are being written; start auto-captioning when that is done.")
            return
        items = self._items(scope)
        self.editor.flush()
        self.captioning.start(
            [it.image_path for it in items], self.binding.get("dataset.caption_extension"), self.binding.get("precision.gpu_index")
        )

    def _on_auto_caption(self, image_path: str, _text: str) -> None:
        row = self.model.row_of(image_path)
        if row is not None:
            item = self.model.item(row)
            self.captions_changed([item.caption_path])

    def _on_captioning_finished(self, result: CaptionRunResult) -> None:
        if not result.changes:
            return
        if self.jobs.busy:  # an undo / redo in flight must not lose its place on the stack
            self._when_idle.append(lambda: self._on_captioning_finished(result))
            return
        edit = CaptionEdit(f"Auto-caption {plural(len(result.changes), 'image')}", list(result.changes))
        self.undo_stack.push(self._command(edit))
        self._show_status(f"Auto-caption wrote {plural(edit.count, 'caption')} (Ctrl+Z undoes all of them).")
