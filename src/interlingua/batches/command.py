"""``interlingua batches list | show | cancel``: the Batch API's batches, for an operator.

``cli.py`` calls :func:`add_batches_parser`. The store is the one the config's
``batches:`` names (default: ``batches.db`` in the user data dir), read directly: the
gateway need not run. An operator sees every key's batches (``--owner`` narrows the
list to one key's); ``cancel`` asks for a batch to stop as a client's cancel does, and
the process running it stops it at its next turn (within a third of ``batches.lease``).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson

from ..config import ConfigError, default_config, load_config
from ..usage import StoreError
from ..usage.db import _safe, sqlite_path
from . import BatchStore, Job, default_batches_url, open_batch_store

__all__ = ["add_batches_parser", "batches_command"]

T = TypeVar("T")

_EPILOG = """\
list:   newest first: id, owner (the key's name), status, endpoint, completed/failed/total,
        created (UTC). --json: the API's batch objects, each with its "owner".
show:   one batch's object (the API's, with "owner"), as JSON with --json.
cancel: a validating or running batch becomes "cancelling"; the process running it ends
        it as "cancelled", keeping the lines that finished.
"""


def add_batches_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``batches`` command to the top-level subparsers."""
    batches = sub.add_parser(
        "batches",
        help="list, show or cancel the Batch API's batches (the store the config names)",
        description="The batches clients created through POST /v1/batches, read from the "
        "store the config's batches: section names.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = batches.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the batches, newest first")
    listing.add_argument("--owner", metavar="KEY", help="only this key's batches")
    listing.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    show = actions.add_parser("show", help="print one batch")
    show.add_argument("batch_id")
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    cancel = actions.add_parser("cancel", help="cancel a validating or running batch")
    cancel.add_argument("batch_id")
    for parser in (listing, show, cancel):
        parser.add_argument("--config", "-c", metavar="PATH", help="YAML config")
    batches.set_defaults(func=batches_command)


def batches_command(args: argparse.Namespace) -> int:
    """Run ``interlingua batches``: 0; 1 when the store cannot be read or the batch is
    not there."""
    config = load_config(args.config) if args.config else default_config()
    url = config.batches.url or default_batches_url()
    if url.startswith("sqlite://") and not Path(sqlite_path(url)).exists():
        print(f"No batch store yet at {_safe(url)}.", file=sys.stderr)
        return 0 if args.action == "list" else 1
    try:
        store = open_batch_store(url)
    except ImportError as exc:  # (postgresql:// without the extra)
        raise ConfigError(str(exc)) from None
    try:
        if args.action == "list":
            return _list(args, _run(store, lambda: store.jobs.page(args.owner, limit=args.limit)))
        if args.action == "show":
            job = _run(store, lambda: store.jobs.get(args.batch_id))
        else:
            job = _run(store, lambda: store.jobs.cancel(args.batch_id))
    except StoreError as exc:
        print(f"interlingua: batch store: {exc}", file=sys.stderr)
        return 1
    if job is None:
        print(f"interlingua: no batch {args.batch_id!r}", file=sys.stderr)
        return 1
    if args.action == "cancel" and job.status not in ("cancelling", "cancelled"):
        print(f"interlingua: batch {job.id} is {job.status}: not cancelled", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        sys.stdout.buffer.write(orjson.dumps(_object(job), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(_text(job))
    return 0


def _run(store: BatchStore, read: Callable[[], Awaitable[T]]) -> T:
    async def run() -> T:
        try:
            await store.open()
            return await read()
        finally:
            await store.aclose()

    return asyncio.run(run())


def _object(job: Job) -> dict[str, Any]:
    return {**job.as_object(), "owner": job.owner}


def _when(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _list(args: argparse.Namespace, page: tuple[list[Job], bool] | None) -> int:
    jobs = page[0] if page else []
    if args.json:
        sys.stdout.buffer.write(
            orjson.dumps([_object(j) for j in jobs], option=orjson.OPT_INDENT_2) + b"\n"
        )
        return 0
    if not jobs:
        print("No batches.")
        return 0
    rows = [("id", "owner", "status", "endpoint", "done/failed/total", "created (UTC)")]
    for job in jobs:
        counts = f"{job.counts.completed}/{job.counts.failed}/{job.total}"
        created = _when(job.times["created_at"])
        rows.append((job.id, job.owner or "-", job.status, job.endpoint, counts, created))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def _text(job: Job) -> str:
    c = job.counts
    lines = [
        f"{job.id}  ({job.status})",
        f"  owner:     {job.owner or '-'}",
        f"  endpoint:  {job.endpoint}   model: {job.model or '-'}",
        f"  input:     {job.input_file_id}",
        f"  requests:  {job.total} total, {c.completed} completed, {c.failed} failed",
        f"  tokens:    {c.input_tokens} in, {c.output_tokens} out",
    ]
    lines += [f"  {name + ':':<15}{_when(value)} UTC" for name, value in job.times.items() if value]
    if job.output_file_id or job.error_file_id:
        lines.append(
            f"  output:    {job.output_file_id or '-'}   errors: {job.error_file_id or '-'}"
        )
    for error in job.errors or ():
        lines.append(
            f"  error: line {error.get('line')}: {error.get('code')}: {error.get('message')}"
        )
    return "\n".join(lines) + "\n"
