"""base.errors.first_line: one line of an exception's text, never empty and never an error of its own."""

from __future__ import annotations

from guitrainer.base.errors import first_line


def test_the_first_non_empty_line_stripped():
    assert first_line(RuntimeError("\n  CUDA out of memory. Tried to allocate 2 GiB  \nmore detail")) == "CUDA out of memory. Tried to allocate 2 GiB"


def test_an_exception_without_a_message_gives_its_type_not_an_index_error():
    # str(OSError()).splitlines()[0] raises IndexError: the old inline copies hid the real error behind it
    assert first_line(OSError()) == "OSError"
    assert first_line(KeyError()) == "KeyError"
    assert first_line(RuntimeError("   \n\t\n")) == "RuntimeError"


def test_messages_and_limits():
    assert first_line("") == ""
    assert first_line("one\ntwo") == "one"
    assert first_line(ValueError("x" * 300), 200) == "x" * 199 + "…"
    assert len(first_line(ValueError("x" * 300), 200)) == 200
    assert first_line(ValueError("short"), 200) == "short"
