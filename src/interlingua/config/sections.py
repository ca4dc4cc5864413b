"""The config's frozen values, one dataclass per section (parsed in ``__init__``, printed
by :mod:`.printing`; the team's sections are in :mod:`.team`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ._values import ConfigError
from .batches import BatchesConfig, FilesConfig
from .prices import Price, PriceTable
from .team import AdminConfig, KeyConfig, StateConfig, TelemetryConfig, UsageConfig

__all__ = [
    "COMMON_UPSTREAM_KEYS",
    "CONTINUE_MODES",
    "REDACTED",
    "SERVER_LIMIT_COUNTS",
    "SERVER_LIMIT_SECONDS",
    "STRATEGIES",
    "STREAM_BREAK_MODES",
    "WILDCARD",
    "Config",
    "CooldownConfig",
    "LimitsConfig",
    "ModelConfig",
    "ModelOptions",
    "ResponsesConfig",
    "RetriesConfig",
    "RoutingConfig",
    "ServerConfig",
    "TimeoutConfig",
    "UpstreamConfig",
]

#: A model entry with this name catches every model name not listed elsewhere.
WILDCARD = "*"
#: What ``--print-config`` writes instead of a client key; refused on load so that a
#: pasted printout fails loudly instead of accepting the literal placeholder as a key.
REDACTED = "<redacted>"
#: The keys every upstream entry may have, whatever its kind; the rest are its options.
COMMON_UPSTREAM_KEYS: tuple[str, ...] = (
    "kind",
    "base_url",
    "api_key_env",
    "headers",
    "timeout",
    "limits",
    "retries",
    "continue_with",
)

#: ``upstreams.<name>.continue_with``: how the upstream is asked to carry on an answer
#: another candidate broke off (interlingua.upstreams.prefill resolves ``auto``)
CONTINUE_MODES = ("prefill", "instruct", "none", "auto")
#: ``models[].on_stream_break``: what a stream broken after its first byte becomes
STREAM_BREAK_MODES = ("error", "continue")
#: what a model is, as ``GET /v1/models`` lists it (a model entry's ``kind``)
MODEL_KINDS = ("chat", "embedding")
#: ``models[].completions``: how ``POST /v1/completions`` reaches the model: ``native``
#: (its upstream's own text completions endpoint) or ``as_chat`` (the prompt sent as one
#: user message, the answer rendered back as a text completion: lossy)
COMPLETIONS_MODES = ("native", "as_chat")
#: The server's limits against slow or hostile clients, in seconds and in counts.
SERVER_LIMIT_SECONDS = ("header_timeout", "body_timeout", "keep_alive_timeout", "shutdown_timeout")
SERVER_LIMIT_COUNTS = ("max_header_bytes", "max_headers")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where the gateway listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8400
    max_body_mb: float = 32
    #: keys clients must present (Bearer or x-api-key); empty = no auth
    api_keys: tuple[str, ...] = ()
    #: seconds a client has to send a whole request head (408, or a close if it sent none)
    header_timeout: float = 10.0
    #: seconds of silence allowed while a request body is incomplete (then 408 and close)
    body_timeout: float = 30.0
    #: seconds an idle keep-alive connection stays open
    keep_alive_timeout: float = 5.0
    #: bytes of request line + headers beyond which the request gets 431
    max_header_bytes: int = 64 * 1024
    #: request headers beyond which the request gets 431
    max_headers: int = 256
    #: open client connections per process; None = derived from the file-descriptor limit
    max_connections: int | None = None
    #: seconds in-flight requests may run after SIGTERM before streams are ended in-band
    shutdown_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    """Seconds to wait for a connection, between two reads of an answer, and for the
    whole answer (a stream included: a drip-feeding upstream cannot hold a request
    forever; generous, since a long reasoning answer may stream for many minutes)."""

    connect: float = 10.0
    read: float = 600.0
    total: float = 3600.0
    #: a stream's time to its first event with content (None: no limit but ``read``);
    #: past it the next candidate gets the request (upstreams/deadlines.py)
    first_byte: float | None = None
    #: the longest silence between a stream's events once content came, keep-alives
    #: not counting (None: no limit but ``read``); past it the stream is broken
    idle: float | None = None


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """What the gateway allows itself toward one upstream (``limits:``); None = no limit.

    ``rpm``/``tpm`` are sliding one-minute windows (tokens estimated on admission, settled
    with the answer's usage), ``max_concurrency`` requests in flight. A request over a
    limit waits in a FIFO queue of at most ``max_queue`` requests for at most
    ``queue_timeout`` seconds, then is refused (429 / Anthropic 529) with Retry-After.
    """

    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    max_queue: int = 128
    queue_timeout: float = 60.0

    @property
    def unlimited(self) -> bool:
        """True when nothing is limited (then nothing is checked per request)."""
        return self.rpm is None and self.tpm is None and self.max_concurrency is None


@dataclass(frozen=True, slots=True)
class RetriesConfig:
    """Retries of a failed attempt toward one upstream, before the first byte reaches the
    client (``retries:``). ``max`` extra attempts (default 0: the official SDKs retry on
    their own, and a gateway retrying as well multiplies the load on a failing provider;
    a model's other deployments and fallbacks are tried whatever ``max`` says); a wait
    the upstream asks for (Retry-After) longer than ``max_wait`` seconds is not waited
    for: the next deployment is tried instead."""

    max: int = 0
    max_wait: float = 60.0


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """How to reach one upstream. ``headers`` and ``options`` must not be mutated.

    ``options`` holds the entry's kind-specific keys as written (e.g. ``bundled`` and
    ``n_ctx`` for ``local``), checked by the kind (:func:`interlingua.upstreams.check_config`).
    """

    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: TimeoutConfig = field(default_factory=TimeoutConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    retries: RetriesConfig = field(default_factory=RetriesConfig)
    options: dict[str, Any] = field(default_factory=dict)
    #: one of :data:`CONTINUE_MODES`: how this upstream continues a partial answer
    #: (``auto``: by its kind, :func:`interlingua.upstreams.prefill.continue_mode`)
    continue_with: str = "auto"

    def api_key(self) -> str | None:
        """The key read from ``api_key_env`` now; None when no variable is named.

        Raises ConfigError when the named variable is unset or empty, naming the variable
        (never its value).
        """
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ConfigError(
                f"upstreams.{self.name}.api_key_env: environment variable "
                f"{self.api_key_env} is not set (or empty)"
            )
        return value


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Per-model output processing, all off by default."""

    #: split ``<think>...</think>`` in the text into reasoning
    think_tags: bool = False
    #: parse tool calls the model wrote as text
    text_tool_calls: bool = False
    #: Claude Code: ``run_in_background: false`` in the ``Task``/agent tool calls sent back
    #: (a background subagent's result never reaches a non-Anthropic model)
    force_background_tasks_off: bool = False
    #: an answer with no content at all becomes one empty text block (Claude Code expects
    #: content in every answer)
    fill_empty_answer: bool = False
    #: a stream's first event carries the estimated input tokens instead of 0 (Claude
    #: Code shows context use from ``message_start``)
    estimate_input_tokens: bool = False


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model name clients may ask for, and where it goes.

    ``model`` is the name the upstream expects. For the wildcard entry (``name: "*"``)
    ``model == "*"`` means "the name the client asked for".
    """

    name: str
    upstream: str
    model: str = ""
    options: ModelOptions = field(default_factory=ModelOptions)
    #: this deployment's share among the deployments of ``name`` (strategy weighted)
    weight: float = 1.0
    #: model names tried in order when every deployment of ``name`` failed
    fallbacks: tuple[str, ...] = ()
    #: model names tried in order, instead of ``fallbacks``, when a deployment refuses the
    #: request because the prompt does not fit its context window
    context_fallbacks: tuple[str, ...] = ()
    #: merged into the upstream body (the client's value wins unless in ``force_params``)
    params: dict[str, Any] = field(default_factory=dict)
    force_params: tuple[str, ...] = ()
    #: removed from the upstream body before sending
    drop_params: tuple[str, ...] = ()
    #: one of :data:`STREAM_BREAK_MODES`: ``error`` ends a stream broken after its first
    #: byte with the in-band error; ``continue`` has the next candidate finish the answer
    on_stream_break: str = "error"
    #: what its tokens cost (its own ``price``, else the ``prices:`` file's match; None:
    #: unpriced, and its requests' cost is unknown, never 0)
    price: Price | None = None
    #: one of :data:`MODEL_KINDS`, as the model list shows it; None: said by its upstream
    #: (``embedding`` for a local embedding model, else ``chat``)
    kind: str | None = None
    #: one of :data:`COMPLETIONS_MODES`: how a text completion request reaches it
    completions: str = "native"

    @property
    def shapes_body(self) -> bool:
        """True when the upstream body is changed beyond ``model`` (no byte-exact relay)."""
        return bool(self.params or self.drop_params)

    def __post_init__(self) -> None:
        if not self.model:
            object.__setattr__(self, "model", self.name)


@dataclass(frozen=True, slots=True)
class ResponsesConfig:
    """Whether and where the gateway keeps Responses API objects (``previous_response_id``,
    ``GET /v1/responses/{id}``)."""

    #: False: keep nothing (then every request is answered ``store: false``)
    store: bool = True
    #: ``sqlite:///path`` or ``postgresql://...``; None: SQLite in the user data directory
    url: str | None = None
    #: seconds a stored response is kept (OpenAI keeps them 30 days)
    expire_after: float = 30 * 24 * 3600
    #: the variable holding the key that authenticates the reasoning tokens the gateway
    #: hands out as ``encrypted_content`` (the same on every replica); None: a key file
    #: in the user data directory, made on first use
    secret_env: str | None = None


#: routing strategies: by weight (random, in proportion), fewest requests in flight,
#: lowest recent latency (time to the first byte, averaged)
STRATEGIES = ("weighted", "least-busy", "lowest-latency")


@dataclass(frozen=True, slots=True)
class CooldownConfig:
    """A deployment with ``failures`` failures within ``window`` seconds is skipped for
    ``duration`` seconds (a 429 with Retry-After: for that long)."""

    failures: int = 3
    window: float = 60.0
    duration: float = 30.0


@dataclass(frozen=True, slots=True)
class RoutingConfig:
    """How a model's deployments are chosen (``routing:``)."""

    strategy: str = "weighted"
    cooldown: CooldownConfig = field(default_factory=CooldownConfig)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole effective configuration."""

    server: ServerConfig = field(default_factory=ServerConfig)
    upstreams: dict[str, UpstreamConfig] = field(default_factory=dict)
    models: tuple[ModelConfig, ...] = ()
    responses: ResponsesConfig = field(default_factory=ResponsesConfig)
    routing: RoutingConfig = field(default_factory=RoutingConfig)
    # the team's sections (config/team.py)
    keys: tuple[KeyConfig, ...] = ()
    state: StateConfig = field(default_factory=StateConfig)
    usage: UsageConfig = field(default_factory=UsageConfig)
    metrics: bool = True
    #: the ``prices:`` file as written (None: none) and its table (config/prices.py)
    prices: str | None = None
    price_table: PriceTable = ()
    #: traces over OTLP/HTTP (None: off)
    telemetry: TelemetryConfig | None = None
    #: ``/admin/*`` and its key; None: no admin routes
    admin: AdminConfig | None = None
    # the Files and Batch APIs' store (config/batches.py)
    files: FilesConfig = field(default_factory=FilesConfig)
    batches: BatchesConfig = field(default_factory=BatchesConfig)
