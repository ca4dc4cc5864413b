"""``interlingua batch run``: the command-line face of :func:`~.terminal.run_batch`.

``cli.py`` calls :func:`add_batch_parser` to mount the ``batch`` group; everything about
the batch flags lives here so the top-level CLI stays a thin dispatcher.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from .files import Columns, is_parquet
from .records import parse_shard
from .runner import BATCH_RETRIES, BatchOptions
from .terminal import run_batch

__all__ = ["add_batch_parser", "batch_command"]

_DEFAULT_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "responses": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}

_EPILOG = """\
input lines (JSONL), either form:
  {"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
  {"custom_id": "r1", "method": "POST", "url": "/v1/responses", "body": {...}}
  {"custom_id": "r1", "method": "POST", "url": "/v1/messages", "body": {...}}
  {"custom_id": "r1", "prompt": "Describe this", "images": ["cat.jpg"], "max_tokens": 200}
output lines: {"id", "custom_id", "response": {"status_code", "request_id", "body"},
  "error": {"code", "message"}}; failed lines have "error" set and never stop the run.
  The output body is in the dialect of the line's url (simple lines: of --dialect); a line
  of another dialect than --dialect is translated (--dialect responses sends /v1/responses
  lines to the server's Responses API as they are).

Parquet: an input or output path ending in .parquet is Parquet. Input: a file or a
  directory of files, one request per row (simple rows: --id-column, --prompt-column,
  --image-column; or the OpenAI Batch columns custom_id, url, body). Output: a directory of
  part files with the output lines' fields (response.body as JSON text) and a journal, so
  a crash loses no finished result.

answers that are not answers: a 2xx with no text, no tool call and no refusal is retried
(within --retries), a body that cannot be read once; if that persists the line fails with
"empty_response" or "invalid_response". The summary counts both kinds of retry.
--fold-reasoning writes each answer's reasoning into its text, datastudio BaseAPI's way:
  "<think>\\n{reasoning}\\n</think>\\n\\n{text}", both parts stripped of padding
  (message.content, the first text block, the first output_text); the reasoning fields
  stay as they came, and a body without reasoning is left as it is.

resuming: run the exact same command again after a crash, Ctrl-C or kill -9: ids already
in the output are skipped and a torn last line is repaired. First Ctrl-C: stop reading and
finish the requests in flight; second Ctrl-C: abort at once.

Ray (pip install 'interlingua[ray]'): --engine ray maps the rows through a pool of
--actors Ray actors, each with one client and --concurrency requests in flight; --rpm and
--tpm hold across all of them (a Ray actor keeps the count, or Redis with --state-url).
Results stream back to this process, which writes and resumes exactly as above; a first
Ctrl-C stops taking results (the requests in flight are redone on resume).
"""


def add_batch_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``batch`` command group (``batch run``) to the top-level subparsers."""
    batch = sub.add_parser(
        "batch",
        help="run a JSONL or Parquet file of requests (concurrent, resumable; on Ray too)",
        description="Send every request of a JSONL or Parquet file, concurrently, into a "
        "JSONL or Parquet output.",
    )
    batch_sub = batch.add_subparsers(dest="batch_command", required=True)
    run = batch_sub.add_parser(
        "run",
        help="run (or resume) a batch",
        description="Run a batch: OpenAI Batch JSONL or simple prompt JSONL (or Parquet) in, "
        "OpenAI Batch output JSONL (or Parquet) out, one record per input line.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "input",
        type=Path,
        metavar="IN",
        help="the requests: a .jsonl file, or a .parquet file or directory",
    )
    run.add_argument(
        "-o", "--output", type=Path, required=True, metavar="OUT",
        help="the results: a .jsonl file, or a .parquet directory (appended to; existing "
        "results are kept and skipped)",
    )  # fmt: skip
    _add_server_args(run)
    _add_run_args(run)
    _add_column_args(run)
    _add_engine_args(run)
    run.set_defaults(func=batch_command)


def _add_server_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--base-url",
        help="server URL (OpenAI style: ending in /v1; default $INTERLINGUA_BASE_URL, "
        "else the local gateway)",
    )
    run.add_argument("--model", help="model for lines that do not name one")
    run.add_argument(
        "--dialect", choices=["openai", "responses", "anthropic"], default="openai",
        help="the server's API: OpenAI Chat Completions, OpenAI Responses or Anthropic "
        "Messages (default openai)",
    )  # fmt: skip
    run.add_argument(
        "--api-key-env", metavar="NAME",
        help="environment variable holding the API key (default OPENAI_API_KEY, or "
        "ANTHROPIC_API_KEY for --dialect anthropic, if set)",
    )  # fmt: skip
    run.add_argument(
        "--timeout", type=float, default=600.0, metavar="SECONDS",
        help="read timeout per request: longest silence while waiting for an answer "
        "(default 600; connecting times out after 10)",
    )  # fmt: skip


def _add_run_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--concurrency", type=int, default=256, metavar="N",
        help="requests in flight at once (default 256); also bounds memory",
    )  # fmt: skip
    run.add_argument("--rpm", type=int, metavar="N", help="at most N requests per minute")
    run.add_argument("--tpm", type=int, metavar="N", help="at most N tokens per minute")
    run.add_argument(
        "--retries", type=int, default=BATCH_RETRIES, metavar="N",
        help=f"retries per request on 408/409/429/5xx and connection errors "
        f"(default {BATCH_RETRIES})",
    )  # fmt: skip
    run.add_argument(
        "--ordered", action="store_true",
        help="write results in input order (holds at most --concurrency finished results)",
    )  # fmt: skip
    run.add_argument(
        "--shard", metavar="i/n",
        help="process only the ids of shard i of n (stable CRC-32 split; run 0/n..n-1/n, "
        "each with its own output)",
    )  # fmt: skip
    run.add_argument(
        "--retry-failed", action="store_true",
        help="re-run only the ids whose latest output line is an error",
    )  # fmt: skip
    run.add_argument("--max-tokens", type=int, metavar="N", help="max_tokens for lines without one")
    run.add_argument("--system", help="system prompt for simple lines")
    run.add_argument(
        "--fold-reasoning", action="store_true",
        help='put each answer\'s reasoning in its text as "<think>\\n...\\n</think>\\n\\n" '
        "(BaseAPI's format; see below)",
    )  # fmt: skip
    run.add_argument(
        "--no-retry-empty", dest="retry_on_empty", action="store_false",
        help="record answers with no text, tool call or refusal as they are, unretried "
        "(and unreadable bodies as errors at once)",
    )  # fmt: skip
    run.add_argument(
        "--progress", choices=["auto", "bar", "log", "off"], default="auto",
        help="progress display: a bar on a terminal, log lines otherwise (default auto)",
    )  # fmt: skip
    run.add_argument(
        "--log-every", type=float, default=10.0, metavar="SECONDS",
        help="seconds between progress log lines (default 10)",
    )  # fmt: skip


def _add_column_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--id-column", default="custom_id", metavar="NAME",
        help="the key or column of a row's id (default custom_id)",
    )  # fmt: skip
    run.add_argument(
        "--prompt-column", default="prompt", metavar="NAME",
        help="the key or column of a simple row's prompt (default prompt)",
    )  # fmt: skip
    run.add_argument(
        "--image-column", default="images", metavar="NAME",
        help="the key or column of a simple row's images: paths, URLs, data: URIs or bytes "
        "(default images)",
    )  # fmt: skip


def _add_engine_args(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--engine", choices=["single", "ray"], default="single",
        help="single: this process (default); ray: a pool of Ray actors (see below)",
    )  # fmt: skip
    run.add_argument(
        "--address", metavar="ADDR",
        help="--engine ray: the Ray cluster to join (auto: the one this machine belongs "
        "to); default: start a local Ray instance for this run",
    )  # fmt: skip
    run.add_argument(
        "--actors", type=int, default=2, metavar="N",
        help="--engine ray: actors in the pool, each with one client (default 2)",
    )  # fmt: skip
    run.add_argument(
        "--state-url", metavar="URL",
        help="--engine ray: keep the --rpm/--tpm counts in Redis (redis://...), shared with "
        "every job that uses the same server URL; default: a Ray actor of this run",
    )  # fmt: skip


def _engine_flags(args: argparse.Namespace) -> list[tuple[str, object, object]]:
    """The column and engine flags of the resume command: (flag, value, default)."""
    return [
        ("--id-column", args.id_column, "custom_id"),
        ("--prompt-column", args.prompt_column, "prompt"),
        ("--image-column", args.image_column, "images"),
        ("--engine", args.engine, "single"), ("--address", args.address, None),
        ("--actors", args.actors, 2), ("--state-url", args.state_url, None),
    ]  # fmt: skip


def _command_line(args: argparse.Namespace) -> str:
    """The command that resumes this run (the same flags, in canonical form)."""
    words = ["interlingua", "batch", "run", os.fspath(args.input), "-o", os.fspath(args.output)]
    flags = [
        ("--base-url", args.base_url, None), ("--model", args.model, None),
        ("--dialect", args.dialect, "openai"), ("--api-key-env", args.api_key_env, None),
        ("--timeout", args.timeout, 600.0), ("--concurrency", args.concurrency, 256),
        ("--rpm", args.rpm, None), ("--tpm", args.tpm, None),
        ("--retries", args.retries, BATCH_RETRIES), ("--shard", args.shard, None),
        ("--max-tokens", args.max_tokens, None), ("--system", args.system, None),
        ("--progress", args.progress, "auto"), ("--log-every", args.log_every, 10.0),
    ]  # fmt: skip
    for flag, value, default in flags + _engine_flags(args):
        if value != default:
            words += [flag, str(value)]
    switches = (
        ("--ordered", args.ordered), ("--fold-reasoning", args.fold_reasoning),
        ("--no-retry-empty", not args.retry_on_empty), ("--retry-failed", args.retry_failed),
    )  # fmt: skip
    for flag, on in switches:
        if on:
            words.append(flag)
    return shlex.join(words)


def _fail(message: str) -> int:
    print(f"interlingua batch: error: {message}", file=sys.stderr)
    return 2


def batch_command(args: argparse.Namespace) -> int:
    """``interlingua batch run``: validate the flags, run, return the exit status."""
    if not (args.input.is_file() or (is_parquet(args.input) and args.input.is_dir())):
        return _fail(f"input file not found: {args.input}")
    if args.output.resolve() == args.input.resolve():
        return _fail("the output file must differ from the input file")
    if args.concurrency < 1:
        return _fail("--concurrency must be at least 1")
    if args.engine != "ray" and (args.address or args.state_url or args.actors != 2):
        return _fail("--address, --actors and --state-url need --engine ray")
    if args.actors < 1:
        return _fail("--actors must be at least 1")
    shard = None
    if args.shard is not None:
        try:
            shard = parse_shard(args.shard)
        except ValueError as exc:
            return _fail(str(exc))
    key_env = args.api_key_env or _DEFAULT_KEY_ENV[args.dialect]
    api_key = os.environ.get(key_env)
    if args.api_key_env and not api_key:
        return _fail(f"--api-key-env {args.api_key_env}: that environment variable is not set")
    command = _command_line(args)
    options = BatchOptions(
        input=args.input, output=args.output, base_url=args.base_url, model=args.model,
        dialect=args.dialect, api_key=api_key, concurrency=args.concurrency,
        requests_per_minute=args.rpm, tokens_per_minute=args.tpm, retries=args.retries,
        ordered=args.ordered, shard=shard, retry_failed=args.retry_failed,
        max_tokens=args.max_tokens, system=args.system, timeout=args.timeout,
        progress=args.progress, log_every=args.log_every,
        command=command.removesuffix(" --retry-failed"),
        columns=Columns(args.id_column, args.prompt_column, args.image_column),
        retry_on_empty=args.retry_on_empty, fold_reasoning=args.fold_reasoning,
    )  # fmt: skip
    if args.engine == "ray":
        from .ray import RaySettings, run_ray_batch  # Ray is imported only for Ray runs

        settings = RaySettings(address=args.address, actors=args.actors, state_url=args.state_url)
        return run_ray_batch(options, settings)
    return run_batch(options, show_logs=True)
