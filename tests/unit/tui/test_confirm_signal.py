"""The signal confirmation shows its question and its keys (it once drew an empty box: width 0)."""

from __future__ import annotations

from textual.app import App

from gpulens.tui.screens.process import ConfirmSignal
from tests.fakes.tui_fakes import sync

QUESTIONS = [
    "Send SIGTERM to pid 4711 (python train.py)?",
    "Send SIGKILL to node07 pid 4711 (node07 reports: python3.11 train.py --model llama-13b --local-rank 0 "
    "--data /datasets/imagenet/train --epochs 90 --batch-size 256)?",
]


def terminal_text(app: App[None]) -> str:
    """What the terminal shows, line by line."""
    return "\n".join("".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips())


@sync
async def test_the_question_and_the_keys_are_on_screen_at_every_size() -> None:
    for question in QUESTIONS:
        for size in ((80, 24), (200, 50), (60, 20)):
            app: App[None] = App()
            async with app.run_test(size=size) as pilot:
                app.push_screen(ConfirmSignal(question))
                await pilot.pause()
                await pilot.pause()
                shown = " ".join(terminal_text(app).replace("▌", " ").replace("▐", " ").split())
                assert "y: send n / esc: cancel" in shown, (size, shown[:300])
                words = question.split()
                assert all(w in shown for w in words), (size, [w for w in words if w not in shown])
