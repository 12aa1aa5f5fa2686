"""What workers print, as the cell shows it: rank 0 as is, other ranks prefixed on request."""

from __future__ import annotations

from tpu_nb.kernel.notebook.cell_output import LinePrefixer, OutputPrinter
from tpu_nb.wire.events import Output, Progress


def printed(all_ranks: bool, *events: object) -> list[tuple[str, str]]:
    written: list[tuple[str, str]] = []
    printer = OutputPrinter(all_ranks, lambda stream, text: written.append((stream, text)))
    for event in events:
        printer.on_event(event)  # type: ignore[arg-type]
    return written


def test_rank_0_and_the_supervisor_print_as_they_are() -> None:
    assert printed(False, Output(0, "stdout", "step 1\n"), Output(None, "stderr", "note\n"), Output(1, "stdout", "hidden\n")) == [
        ("stdout", "step 1\n"),
        ("stderr", "note\n"),
    ]


def test_other_ranks_are_prefixed_line_by_line_across_chunks() -> None:
    assert printed(True, Output(1, "stdout", "a\nb"), Output(1, "stdout", "c\n"), Output(2, "stderr", "x\n")) == [
        ("stdout", "[rank 1] a\n[rank 1] b"),
        ("stdout", "c\n"),
        ("stderr", "[rank 2] x\n"),
    ]


def test_other_events_print_nothing() -> None:
    assert printed(True, Progress(0, 3, {"loss": 1.0})) == []


def test_a_prefix_begins_every_line_of_each_stream_across_pieces_and_after_a_carriage_return() -> None:
    prefixer = LinePrefixer("[host 1] ")
    assert prefixer("stdout", "a\nb") == "[host 1] a\n[host 1] b"
    assert prefixer("stderr", "50%\r") == "[host 1] 50%\r"  # each stream its own line
    assert prefixer("stdout", "c\r\nd\n") == "c\r\n[host 1] d\n"
    assert prefixer("stderr", "60%\r") == "[host 1] 60%\r"
    assert prefixer("stdout", "") == ""
