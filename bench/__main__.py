"""``python -m bench``: the gateway benchmark (see bench/README.md).

python -m bench                      # every scenario at 1, 10, 50 connections (~4 min)
python -m bench --quick              # the same, 2 s per run (~1 min): a smoke run
python -m bench --peers litellm      # LiteLLM's proxy side by side (installs it once)
python -m bench --profile passthrough,a2o  # + py-spy hot spots of those scenarios
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from .run import RESULTS, Options, run_cli
from .scenarios import ALL, BY_NAME

PEERS = ("litellm",)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def build_parser() -> argparse.ArgumentParser:
    """The command line (its --help is the reference)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Load-test interlingua against an nginx mock upstream with wrk, next to "
        "the direct nginx baseline and optional peers; writes bench/results/<date>.md.",
    )
    parser.add_argument("--quick", action="store_true", help="2 s runs: a ~1 minute smoke run")
    parser.add_argument("--duration", type=float, help="seconds per load run (default 7, quick 2)")
    parser.add_argument("--warmup", type=float, help="warm-up seconds per scenario (default 1)")
    parser.add_argument(
        "--connections",
        default="1,10,50",
        help="comma-separated connection counts (default 1,10,50)",
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(s.name for s in ALL),
        help=f"comma-separated subset of: {', '.join(BY_NAME)}",
    )
    parser.add_argument(
        "--team",
        action="store_true",
        help="also price keys + usage log + metrics: the gateway with them on and with them "
        "off, loaded at the same time on one shared CPU (passthrough and Anthropic→OpenAI, "
        "stream and not)",
    )
    parser.add_argument("--peers", default="", help="comma-separated peers to run too: litellm")
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway worker processes (if the CLI has --workers)"
    )
    parser.add_argument(
        "--profile",
        default="",
        metavar="SCENARIO",
        help="py-spy an extra run of each (comma-separated) gateway SCENARIO (needs py-spy)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="load runs per scenario and connection count; the median by req/s is kept",
    )
    parser.add_argument(
        "--no-micro", action="store_true", help="skip the translation microbenchmarks"
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for the report")
    parser.add_argument("--litellm-spec", default="", help="pip requirement for the LiteLLM venv")
    return parser


def options(argv: Sequence[str]) -> Options:
    """Parse and check the command line into :class:`Options`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    scenarios = _csv(args.scenarios)
    unknown = [s for s in scenarios if s not in BY_NAME]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    # A gateway scenario is meaningless without its direct baseline in the same run.
    needed = {BY_NAME[s].baseline for s in scenarios if BY_NAME[s].baseline}
    scenarios = tuple(s.name for s in ALL if s.name in scenarios or s.name in needed)
    peers = _csv(args.peers)
    if any(p not in PEERS for p in peers):
        parser.error(f"unknown peer in {args.peers!r}; known: {', '.join(PEERS)}")
    profiled = _csv(args.profile)
    if any(name not in scenarios or BY_NAME[name].direct for name in profiled):
        parser.error(f"--profile {args.profile}: name gateway scenarios among those run")
    try:
        connections = tuple(int(c) for c in _csv(args.connections))
    except ValueError:
        parser.error(f"--connections {args.connections!r}: expected numbers like 1,10,50")
    if not connections or min(connections) < 1:
        parser.error("--connections: at least one count, each 1 or more")
    return Options(
        duration=args.duration or (2.0 if args.quick else 7.0),
        warmup=args.warmup if args.warmup is not None else 1.0,
        connections=connections,
        scenarios=scenarios,
        peers=peers,
        team=args.team,
        workers=max(1, args.workers),
        profile=profiled,
        repeat=max(1, args.repeat),
        micro=not args.no_micro,
        results=args.results,
        command=shlex.join(["python", "-m", "bench", *argv]),
        litellm_spec=args.litellm_spec,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    return run_cli(options(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
