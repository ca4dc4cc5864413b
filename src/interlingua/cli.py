"""Command line: ``interlingua serve | models | batch | batches | usage | keys``.

interlingua serve                      # no config: the bundled local model (needs [local])
interlingua serve --config my.yaml     # route model names to the upstreams in my.yaml
interlingua serve --fake               # a scripted fake upstream that echoes (demos, tests)
interlingua serve --print-config       # show the effective config as YAML and exit
interlingua models --config my.yaml    # list the model names clients can ask for
interlingua batch run in.jsonl -o out.jsonl --model m   # a JSONL of requests (see --help)
interlingua batches list                # the Batch API's batches (also: show ID, cancel ID)
interlingua usage --since 7d --by key,model  # requests, errors, tokens, latency per key/model
interlingua keys create --name team-c --budget-per-month 100  # a key live, its secret once
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace

from .config import Config, ConfigError, config_to_yaml, default_config, fake_config, load_config


def _effective_config(args: argparse.Namespace) -> Config:
    if args.fake:
        config = fake_config()
    elif args.config:
        config = load_config(args.config)
    else:
        config = default_config()
    server = config.server
    if getattr(args, "host", None):
        server = replace(server, host=args.host)
    if getattr(args, "port", None):
        server = replace(server, port=args.port)
    return replace(config, server=server)


def _preflight(config: Config, args: argparse.Namespace) -> None:
    """Raise ConfigError now for what would otherwise kill the app lifespan with a
    traceback (uvicorn prints it and exits 3): a ``local`` upstream without the ``local``
    extra installed, an entry its kind refuses, or an unset ``api_key_env``."""
    from .upstreams import require_local_engine

    for cfg in config.upstreams.values():
        if cfg.kind != "local":
            continue
        try:
            require_local_engine(cfg.name)
        except ConfigError as exc:
            if args.config or args.fake:
                raise
            raise ConfigError(
                f"{exc}; with no --config, serve runs the bundled local model "
                "(or try --config FILE, or --fake for a demo)"
            ) from None
    _check_config(config, args)
    for cfg in config.upstreams.values():
        cfg.api_key()


def _serve(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ConfigError("--workers must be at least 1")
    config = _effective_config(args)
    if args.print_config:
        _check_config(config, args)
        sys.stdout.write(config_to_yaml(config))
        return 0
    _preflight(config, args)
    from .upstreams import build_upstreams

    # Build the upstreams once up front (cheap: no connection, no model load) so that a
    # missing extra, model file or key variable is a clean config error, not a traceback
    # from inside the server's startup.
    build_upstreams(config, None)

    from .server.process.factory import configure_logging
    from .server.process.serve import run
    from .server.reload import ConfigSource

    configure_logging(args.log_level)
    # uvicorn with the connection guard and graceful drain (server/process/serve.py); with
    # --workers each worker process builds its own app, guard and drain. SIGHUP reads
    # the --config file again (server/reload.py).
    source = ConfigSource(args.config, args.fake, args.host, args.port)
    return run(config, workers=args.workers, log_level=args.log_level, source=source)


def _check_config(config: Config, args: argparse.Namespace) -> None:
    """The kinds' half of validation (config.py checks only what every entry shares);
    errors name the file, as load_config's do."""
    from .upstreams import check_config

    try:
        check_config(config)
    except ConfigError as exc:
        if args.fake or not args.config:
            raise
        raise ConfigError(f"{args.config}: {exc}") from None


def _models(args: argparse.Namespace) -> int:
    config = _effective_config(args)
    _check_config(config, args)
    for model in config.models:
        if model.name == "*":
            continue
        print(f"{model.name}\t{model.upstream}\t{model.model}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the CLI reference)."""
    parser = argparse.ArgumentParser(
        prog="interlingua",
        description="A gateway that lets OpenAI Chat Completions, Responses and Anthropic "
        "Messages clients talk to any LLM server.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the gateway",
        description="Serve /v1/chat/completions, /v1/messages, /v1/messages/count_tokens, "
        "/v1/responses (HTTP and WebSocket), /v1/models, /health, /metrics and /ui (the "
        "status page). With no --config, serves the bundled local model. SIGHUP reads the "
        "--config file again and serves it without a restart (docs/config.md, 'Reloading "
        "the config').",
    )
    serve.add_argument("--config", "-c", metavar="PATH", help="YAML config (see docs/config.md)")
    serve.add_argument("--host", help="interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", "-p", type=int, help="port to listen on (default 8400)")
    serve.add_argument(
        "--fake",
        action="store_true",
        help="serve a fake upstream that echoes the last user message, under any model name",
    )
    serve.add_argument(
        "--workers",
        "-w",
        type=int,
        default=1,
        metavar="N",
        help="worker processes sharing the port (default 1; one per core scales throughput)",
    )
    serve.add_argument(
        "--print-config", action="store_true", help="print the effective config as YAML and exit"
    )
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="log verbosity (default info; 'warning' silences the access log)",
    )
    serve.set_defaults(func=_serve)

    models = sub.add_parser(
        "models",
        help="list the configured model names",
        description="Print one line per model name: name, upstream, upstream model.",
    )
    models.add_argument("--config", "-c", metavar="PATH", help="YAML config")
    models.add_argument("--fake", action="store_true", help="list the --fake config's models")
    models.set_defaults(func=_models)

    from .batch.command import add_batch_parser

    add_batch_parser(sub)

    from .batches.command import add_batches_parser

    add_batches_parser(sub)

    from .usage.command import add_usage_parser

    add_usage_parser(sub)

    from .usage.keys_command import add_keys_parser

    add_keys_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``interlingua`` command."""
    args = build_parser().parse_args(argv)
    try:
        result: int = args.func(args)
    except ConfigError as exc:
        print(f"interlingua: config error: {exc}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    sys.exit(main())
