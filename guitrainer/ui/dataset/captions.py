"""Caption writes of the Dataset page: tag operations (one undo step each), auto-captioning, reloads.

A mixin of :class:`~guitrainer.ui.dataset.page.DatasetPage` (the caption concern in its own file); it uses
the page's ``model``, ``proxy``, ``editor``, ``tag_tools``, ``captioning``, ``caption_jobs``, ``undo_stack``,
``binding``, ``items``, ``selected_items``, ``show_status`` and ``_schedule_summary``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from guitrainer.core.dataset import scan as ds
from guitrainer.core.dataset.report import edit_bytes, plan_and_write, plural
from guitrainer.core.dataset.scan import CaptionEdit, DatasetItem
from guitrainer.ui.dataset.caption_editor import CaptionEditCommand


class CaptionOps:
    """Tag operations, caption reloads and auto-captioning results, applied to the page's images."""

    def apply_tag_operation(self, description: str, op: Callable[[str], str], scope: str = "selection") -> CaptionEdit | None:
        """Run a tag operation on the selection or all images as ONE undo step; reports how many changed.

        An edit of ``caption_jobs.min_captions`` images or more is read, changed and written in a worker
        thread: this returns None at once, the status line shows the progress, and the tag tools, caption
        box and undo / redo are disabled until it is done. A smaller one is done before this returns (and
        returns the edit). Either way ``tag_operation_finished(edit or None)`` says when it is done.
        """
        items = self.selected_items() if scope == "selection" else list(self.items)
        if not items:
            self.show_status("Select images first, or choose “All images”.")
            self.tag_operation_finished.emit(None)
            return None
        self.editor.flush()
        if self.caption_jobs.in_background(len(items)):
            self.caption_jobs.submit(
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
            self.show_status(f"{description}: nothing changed, {error}.")
            self.tag_operation_finished.emit(None)
            return None
        note = f" {edit.skipped_not_utf8} not UTF-8, left unchanged." if edit.skipped_not_utf8 else ""
        if not edit.count:
            self.show_status(f"{description}: no caption needed a change.{note}")
        else:
            self.undo_stack.push(self._command(edit))
            self._on_captions_changed([ch.caption_path for ch in edit.changes], edit_bytes(edit))
            n = edit.count
            plural = "s" if n != 1 else ""
            self.show_status(f"{description}: changed {n} caption{plural} (Ctrl+Z undoes it).{note}")
        self.tag_operation_finished.emit(edit)
        return edit

    def _command(self, edit: CaptionEdit) -> CaptionEditCommand:
        """The undo step of an edit already written; its undo / redo run as caption jobs when big."""
        return CaptionEditCommand(edit, self._on_captions_changed, self.show_status, self.caption_jobs)

    def _on_caption_jobs_busy(self, busy: bool) -> None:
        """Nothing else edits captions while a bulk edit (or its undo / redo) is being written."""
        self.editor.set_locked(busy)
        self.tag_tools.set_busy(busy)
        self.undo_action.setEnabled(not busy)
        self.redo_action.setEnabled(not busy)
        if not busy:
            waiting, self._when_idle = self._when_idle, []
            for fn in waiting:
                fn()

    def _show_progress(self, text: str) -> None:
        """Progress of a caption job: the status line (and window) show it; not logged, unlike show_status."""
        self.status.setText(text)
        self.status.setToolTip("")
        self.status_changed.emit(text)


    def _reload_captions(self) -> None:
        ext = self.binding.get("dataset.caption_extension")
        self.editor.flush()
        for it in self.items:
            it.caption_path = ds.caption_path_for(it.image_path, ext)
            it.reload_caption()
        self.model.refresh_all()
        cur = self.editor.item
        if cur is not None:
            self.editor.set_item(None)
            self.editor.set_item(cur)
        self._schedule_summary()


    def _on_captions_changed(
        self, paths: list[Path], written: Mapping[Path, bytes | None] | None = None
    ) -> None:
        """Caption files changed on disk; ``written``: their bytes now (then the files are not read again)."""
        if written is None:
            touched = self.model.refresh_paths(paths)
        else:  # a bulk edit: decode the known bytes, one repaint for all (2,000 captions: ~10 ms, not ~100)
            touched = []
            for it in self.items:
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

    def _start_captioning(self, scope: str) -> None:
        if self.caption_jobs.busy:  # it would write the captions being edited
            self.show_status("Captions are being written; start auto-captioning when that is done.")
            return
        items = self.selected_items() if scope == "selection" else list(self.items)
        self.editor.flush()
        self.captioning.start(
            [it.image_path for it in items], self.binding.get("dataset.caption_extension"), self.binding.get("precision.gpu_index")
        )

    def _on_auto_caption(self, image_path: str, _text: str) -> None:
        row = self.model.row_of(image_path)
        if row is not None:
            item = self.model.item(row)
            self._on_captions_changed([item.caption_path])

    def _on_captioning_finished(self, result) -> None:
        if not result.changes:
            return
        if self.caption_jobs.busy:  # an undo / redo in flight must not lose its place on the stack
            self._when_idle.append(lambda: self._on_captioning_finished(result))
            return
        edit = CaptionEdit(f"Auto-caption {plural(len(result.changes), 'image')}", list(result.changes))
        self.undo_stack.push(self._command(edit))
        self.show_status(f"Auto-caption wrote {plural(edit.count, 'caption')} (Ctrl+Z undoes all of them).")

