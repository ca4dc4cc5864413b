"""A batch run to its end in a terminal: the event loop, the signals, the summary.

:func:`run_batch` is what ``interlingua batch run`` calls and what a script calls to get
the same behaviour; :class:`~.runner.BatchRunner` is the engine it drives, for code that
wants the result inside its own event loop (no signal handlers, no summary or resume hints).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import TextIO

from .progress import format_summary
from .runner import BatchOptions, BatchResult, BatchRunner

__all__ = ["report", "run_batch"]


def _install_signals(loop: asyncio.AbstractEventLoop, runner: BatchRunner) -> None:
    def on_signal() -> None:
        if runner.stopping:
            runner.say("batch: aborting (the requests in flight are not written)")
            runner.abort()
            return
        runner.say(
            f"batch: stopping — finishing {runner.in_flight} requests in flight "
            "(press Ctrl-C again to abort)"
        )
        runner.stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when installed (uvicorn[standard] brings it), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _main(runner: BatchRunner) -> BatchResult:
    _install_signals(asyncio.get_running_loop(), runner)
    return await runner.run()


class _Say(logging.Handler):
    """Log records written the way the run writes its messages: above a progress bar."""

    def __init__(self, runner: BatchRunner) -> None:
        super().__init__(logging.WARNING)
        self.runner = runner

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.runner.say(self.format(record))
        except Exception:
            self.handleError(record)


@contextlib.contextmanager
def _showing_logs(runner: BatchRunner, show: bool) -> Iterator[None]:
    """WARNING lines of interlingua's loggers (a failed line, a retry after the first)
    shown with the run's messages while it runs; Python's last-resort handler would write
    them across the progress bar."""
    if not show:
        yield
        return
    package = logging.getLogger("interlingua")
    handler = _Say(runner)
    package.addHandler(handler)
    try:
        yield
    finally:
        package.removeHandler(handler)


def run_batch(
    options: BatchOptions, *, stream: TextIO | None = None, show_logs: bool = False
) -> int:
    """Run a batch to the end and report; the exit status (0 done, 130 interrupted).

    ``show_logs=True`` (the command line's way) writes the WARNING lines of interlingua's
    loggers with the progress display; a program with its own logging leaves it off."""
    out = stream if stream is not None else sys.stderr
    command = options.command or "the same command"
    factory = _loop_factory()
    try:
        with asyncio.Runner(loop_factory=factory) as aio:
            runner = BatchRunner(options, stream=out)
            with _showing_logs(runner, show_logs):
                result = aio.run(_main(runner))
    except OSError as exc:  # the input cannot be read or the output written
        print(f"batch: error: {exc}", file=out)
        print(f"batch: fix it, then resume with the same command:\n  {command}", file=out)
        return 1
    return report(result, options, out)


def report(result: BatchResult, options: BatchOptions, out: TextIO) -> int:
    """Print how a run ended (summary, resume and retry hints); its exit status."""
    command = options.command or "the same command"
    print(format_summary(result.stats, os.fspath(options.output)), file=out)
    if result.interrupted:
        how = "aborted" if result.aborted else "interrupted"
        print(
            f"batch: {how}; lines not written are redone on resume. "
            f"Resume with the exact same command:\n  {command}",
            file=out,
            flush=True,
        )
        return 130
    if result.compacted:
        print(
            f"batch: compacted the output ({result.compacted} superseded lines removed)", file=out
        )
    if result.stats.failed:
        retry = command if command.endswith(" --retry-failed") else command + " --retry-failed"
        print(
            f'batch: {result.stats.failed} lines failed (see their "error"); re-run only '
            f"those with:\n  {retry}",
            file=out,
        )
    return 0
