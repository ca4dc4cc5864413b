"""``interlingua usage``: the usage log summed per key and model, as a table or JSON.

``cli.py`` calls :func:`add_usage_parser`; the work is :func:`~.report.read_summary`.
The database is the one the config's ``usage:`` names (default: ``usage.db`` in the user
data dir), opened only to read: a log that does not exist yet is reported, not created.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from ..config import ConfigError, default_config, load_config
from .db import StoreError, _safe
from .log import default_usage_url
from .report import format_table, parse_by, parse_since, read_summary

__all__ = ["add_usage_parser", "usage_command"]

_EPILOG = """\
--since: a duration back from now (90s, 30m, 24h, 7d, 2w) or an ISO 8601 date or time
  (2026-05-01, 2026-05-01T12:00, 2026-05-01T12:00+02:00; without an offset, UTC).
--json: a list of objects, one per group: the --by names (key, model, ...), requests,
  errors, client_disconnects, continued, input_tokens, output_tokens, cached_tokens,
  cache_write_tokens, reasoning_tokens, cost_usd (US dollars to the millionth; null when
  no request of the group was priced), unpriced (requests whose model has no price),
  p50_latency_s, p95_latency_s (seconds). An error is a request that
  failed: a status of 400 or more, or a stream that broke after it began (and that no
  other attempt continued). continued: attempts whose broken stream another attempt
  continued; their tokens are in the group's, but they are not requests.
"""


def add_usage_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``usage`` command to the top-level subparsers."""
    usage = sub.add_parser(
        "usage",
        help="summarize the usage log (requests, errors, tokens, latency per key and model)",
        description="Print requests, errors, input/output tokens and p50/p95 latency per "
        "key and model (or per --by columns) since a time, from the usage log the config "
        "names.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    usage.add_argument("--config", "-c", metavar="PATH", help="YAML config (its usage: section)")
    usage.add_argument(
        "--since", default="24h", metavar="WHEN", type=_since,
        help="from when: 30m, 24h, 7d or an ISO date (default 24h)",
    )  # fmt: skip
    usage.add_argument(
        "--by", default="key,model", metavar="COLUMNS", type=_by,
        help="group by these, comma-separated, among key, model, upstream, dialect "
        "(default key,model)",
    )  # fmt: skip
    usage.add_argument(
        "--cost", action="store_true",
        help="add the cost in US dollars and the unpriced requests of each group",
    )  # fmt: skip
    usage.add_argument("--json", action="store_true", help="print JSON instead of a table")
    usage.set_defaults(func=usage_command)


def _since(text: str) -> float:
    try:
        return parse_since(text, now=time.time())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _by(text: str) -> tuple[str, ...]:
    try:
        return parse_by(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def usage_command(args: argparse.Namespace) -> int:
    """Run ``interlingua usage``: 0, or 1 when the database cannot be read."""
    config = load_config(args.config) if args.config else default_config()
    if not config.usage.enabled:
        where = args.config or "the default config"
        raise ConfigError(f"{where}: the usage log is off (usage: false)")
    url = config.usage.url or default_usage_url()
    since: float = args.since
    by: tuple[str, ...] = args.by
    try:
        summary, total = asyncio.run(_read(url, since, by))
    except StoreError as exc:
        print(f"interlingua: usage log: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # (postgresql:// without the extra)
        raise ConfigError(str(exc)) from None
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(summary or [], option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    start = datetime.fromtimestamp(since, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    if summary is None:
        print(f"No usage log yet at {_safe(url)}.")
    elif not summary:
        print(f"No requests since {start}.")
    else:
        print(f"Usage since {start}:\n")
        whole = total if len(summary) > 1 else summary[0]
        sys.stdout.write(
            format_table(summary, by, whole if len(summary) > 1 else None, cost=args.cost)
        )
        if args.cost and whole is not None:
            print(f"\n{_unpriced(whole['unpriced'], whole['requests'])}")
    return 0


def _unpriced(count: int, requests: int) -> str:
    if not count:
        return f"Every one of the {requests:,} requests was priced."
    return (
        f"{count:,} of {requests:,} requests were unpriced (no price for their model): "
        "their cost is unknown and not in the sums."
    )


async def _read(
    url: str, since: float, by: tuple[str, ...]
) -> tuple[list[dict[str, Any]] | None, dict[str, Any] | None]:
    summary = await read_summary(url, since, by)
    if not summary or len(summary) < 2:
        return summary, None
    totals = await read_summary(url, since, ())
    return summary, totals[0] if totals else None
