"""FieldsLine draws what Textual's Static draws for the same text, and a tick lays out only when it must."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import Static

from gpulens.tui.widgets.fields import FieldsLine, wrap_offsets
from tests.fakes.tui_fakes import sync

_CSS = "Static, FieldsLine { padding: 0 1; height: auto; } FieldsLine { background: $panel; } Static { background: $panel; }"


def fields(*pairs: tuple[str, str]) -> Text:
    """The job screen's line: dim labels, bold values."""
    text = Text()
    for label, value in pairs:
        text.append(f"{label} ", style="dim")
        text.append(f"{value}   ", style="bold")
    return text


JOB = fields(("job", "4711"), ("user", "alice"), ("tree ID", "systemd/slurmstepd/bash/torchrun/python3.11"),
             ("hosts", "gpu-node01, gpu-node02, gpu-node03, gpu-node04"), ("GPUs", "32"), ("util", "85%"),
             ("GPU mem", "2.2TiB"), ("runtime", "3h13m"),
             ("command", "python3.11 train.py --model llama-13b --local-rank 0"))
CASES = [
    JOB,
    fields(("job", "vm:4467"), ("runtime", "9s"), ("command", "x" * 130)),  # a word wider than the line: folded
    fields(("command", "训练 モデル 🚀 " * 6)),  # wide characters
    Text("job 4711 is not running (last seen data kept below)", style="bold"),
    Text("two\nlines and   a   gap"),
    Text(""),
]


class Pair(App[None]):
    CSS = _CSS

    def __init__(self, text: Text) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        yield Static(self.text, id="static")
        yield FieldsLine(self.text, id="fields")


def cells(strips: list[Strip]) -> list[list[tuple[str, Any, Any, bool, bool]]]:
    """Each line as (character, colour, background, bold, dim) per character."""
    out = []
    for strip in strips:
        row = []
        for seg in strip:
            style = seg.style
            for ch in seg.text:
                row.append((ch, style.color if style else None, style.bgcolor if style else None,
                            bool(style and style.bold), bool(style and style.dim)))
        out.append(row)
    return out


def drawn(widget: Static | FieldsLine) -> list[Strip]:
    return widget.render_lines(Region(0, 0, widget.outer_size.width, widget.outer_size.height))


@sync
async def test_fields_line_draws_what_static_draws_at_every_width() -> None:
    for text in CASES:
        app = Pair(text)
        async with app.run_test(size=(80, 24)) as pilot:
            for width in (80, 47, 31, 12, 160):
                await pilot.resize_terminal(width, 24)
                await pilot.pause()
                static, line = app.query_one("#static", Static), app.query_one("#fields", FieldsLine)
                assert line.outer_size == static.outer_size, (text.plain[:30], width)
                assert cells(drawn(line)) == cells(drawn(static)), (text.plain[:30], width)


@sync
async def test_a_changed_figure_repaints_and_a_changed_line_count_lays_out() -> None:
    app = Pair(JOB)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        line = app.query_one("#fields", FieldsLine)
        asked: list[bool] = []
        original = line.refresh

        def refresh(*regions: Any, **kw: Any) -> Any:
            asked.append(bool(kw.get("layout")))
            return original(*regions, **kw)

        line.refresh = refresh  # type: ignore[method-assign]
        height = line.outer_size.height
        line.show(JOB.copy())  # the same text: nothing
        assert asked == []
        ticked = Text(JOB.plain.replace("3h13m", "3h14m"))
        for sp in JOB.spans:
            ticked.stylize(sp.style, sp.start, sp.end)
        line.show(ticked)
        await pilot.pause()
        assert asked == [False]  # a repaint, not a layout
        assert "3h14m" in "".join(s.text for strip in drawn(line) for s in strip)
        assert line.outer_size.height == height
        line.show(Text("job 4711 is not running"))
        await pilot.pause()
        assert asked[-1] is True and line.outer_size.height == 1  # four lines became one: laid out


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab  -/訓🚀")), max_size=120), st.integers(2, 60))
def test_wrap_offsets_are_the_ones_textual_wraps_a_static_at(plain: str, width: int) -> None:
    """At any width a character fits in (Rich gives an empty line before a 2-cell one at width 1)."""
    from rich._wrap import (
        divide_line,  # what Textual's Content wraps with (4.0 and 8.x): the reference
    )

    assert wrap_offsets(plain, width) == divide_line(plain, width, fold=True), (plain, width)


def _restyled(text: Text, plain: str) -> Text:
    """``plain`` with ``text``'s spans (a tick's new figures in the same fields)."""
    out = Text(plain, style=text.style)
    out.spans = list(text.spans)
    return out


_SAME_WIDTH = {"a": "bcx", "-": "+/", "訓": "練🚀", "🚀": "訓"}


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab  -\n訓🚀")), max_size=120), st.integers(2, 60),
       st.lists(st.tuples(st.integers(0, 119), st.integers(0, 2)), max_size=8))
def test_a_same_shape_text_keeps_its_breaks_and_draws_what_a_fresh_wrap_draws(
        plain: str, width: int, changes: list[tuple[int, int]]) -> None:
    """The refilled lines of a changed text equal the lines a new widget wraps it into."""
    old = fields(("runtime", plain[:40]), ("command", plain[40:]))
    chars = list(old.plain)
    for at, pick in changes:
        if at < len(chars) and chars[at] in _SAME_WIDTH:
            swaps = _SAME_WIDTH[chars[at]]
            chars[at] = swaps[pick % len(swaps)]
    new = _restyled(old, "".join(chars))
    line = FieldsLine(old)
    line._lay_out(width)
    wrapped: list[int] = []
    wrap = line._wrap

    def counted(width: int) -> list[Text]:
        wrapped.append(width)
        return wrap(width)

    line._wrap = counted  # type: ignore[method-assign]
    line.show(new)
    fresh = FieldsLine(new)
    fresh._lay_out(width)
    assert [(t.plain, t.spans) for t in line._lines] == [(t.plain, t.spans) for t in fresh._lines]
    assert wrapped == []  # the same shape: no wrap


def test_a_changed_shape_is_wrapped_again() -> None:
    """A space where a letter was, a wider character, other spans or a new length: wrapped anew."""
    line = FieldsLine(JOB)
    line._lay_out(40)
    wrapped: list[int] = []
    wrap = line._wrap

    def counted(width: int) -> list[Text]:
        wrapped.append(width)
        return wrap(width)

    line._wrap = counted  # type: ignore[method-assign]
    for plain in (JOB.plain.replace("3h13m", "3h 3m"), JOB.plain.replace("3h13m", "3h1訓"),
                  JOB.plain.replace("3h13m", "3h\u00a03m"),  # a no-break space: Rich strips it at a break
                  JOB.plain.replace("3h13m", "3h13m5s")):
        wrapped.clear()
        new = _restyled(JOB, plain) if len(plain) == len(JOB.plain) else Text(plain)
        line.show(new)
        assert wrapped == [40], plain
        fresh = FieldsLine(new)
        fresh._lay_out(40)
        assert [t.plain for t in line._lines] == [t.plain for t in fresh._lines]


def test_a_no_break_space_keeps_a_label_with_its_value_at_every_width() -> None:
    """The job line at 120 columns read 'GPU' at a line's end and 'mem 230.0GiB' on the next."""
    from gpulens.tui.widgets.fields import NBSP

    pairs = [("job", "4720"), ("user", "bob"), ("util avg", "0%"), ("GPU mem", "230.0GiB"), ("runtime", "2h56m")]
    plain = "".join(f"{label} ".replace(" ", NBSP) + f"{value}   " for label, value in pairs)
    for width in range(17, 80):  # each field fits a line (a wider one is folded)
        breaks = wrap_offsets(plain, width)
        for b in breaks:
            assert plain[b - 1] == " " and plain[b] != NBSP, (width, plain[:b])  # at a plain space only
