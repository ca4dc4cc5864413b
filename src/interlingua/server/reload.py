"""Live config: one config's serving objects as one swappable bundle, and the reload.

A :class:`Live` is everything a request reads that the config decides: the gateway (and
its router, deployments and upstreams), the key ring, the accounting and the admin key.
The handlers read ``handlers.live`` once, as a request begins, and use that bundle to its
end, so a reload -- one assignment of ``handlers.live`` -- never changes a request's
config halfway: requests in flight finish on the objects they started with.

:class:`Reloader` re-reads the file the server was started with (on SIGHUP, or
``POST /admin/reload``), builds a new bundle next to the old one and swaps it in, or
refuses the file with the reason and leaves the old one serving. What was unchanged is
reused, the same objects, so its counts carry over: an upstream whose entry is equal
(its connection pool and its limits), a key whose name, digest, models and limits are
equal (its rpm/tpm/day counts; the keys of the database, server/stored_keys.py, are
not the file's: they stay, unchanged ones the same objects), and the cooldown book (kept by deployment: a deployment
of the same upstream and model stays cooling). An upstream that left is closed once the
requests that started on the old bundle have ended (:attr:`Live.users`, counted by the
front layer: server/middleware.py).

What a process sets up once cannot change live: ``server`` (but ``api_keys``), ``state``,
``usage``, ``metrics`` and ``responses``. A reload that changes them applies the rest,
keeps their old values, and names them in a warning (and in the admin call's answer).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import hmac
import logging
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import orjson

from ..config import Config, ConfigError, default_config, fake_config, load_config
from ..dialects import Dialect, get_dialect
from ..errors import (
    AuthenticationError,
    InterlinguaError,
    InvalidRequestError,
    NotFoundError,
    PermissionDeniedError,
)
from ..limits import SharedCounters
from ..routing import CooldownBook, Cooldowns, Router
from ..upstreams import Transports, build_upstreams, check_config
from ..upstreams.base import Upstream
from ..usage.cost import Pricing
from ..usage.log import UsageLog
from ..usage.record import RecordSink
from .accounting import Accounting
from .asgi_io import BytesResponse
from .budgets import SpendBook, warn_unpriced
from .gateway import Gateway
from .keys import KeyRing, presented_key
from .stored_keys import StoredKeys

__all__ = ["ConfigSource", "Holder", "Live", "Process", "Reloader", "build_live", "check_admin"]

log = logging.getLogger("interlingua.server")
OPENAI = get_dialect("openai")

#: the sections (and ``server`` keys) a running process cannot change
RESTART_ONLY = ("state", "usage", "metrics", "responses")


@dataclass(frozen=True)
class ConfigSource:
    """Where the serving config came from, to read it again: the file (None: ``--fake``
    or the default config, which a reload cannot change) and the ``--host``/``--port``
    flags that override it; ``workers``: how many processes serve it."""

    path: str | None = None
    fake: bool = False
    host: str | None = None
    port: int | None = None
    workers: int = 1

    def load(self) -> Config:
        """The config as ``serve`` resolves it (ConfigError when the file is invalid)."""
        if self.fake:
            config = fake_config()
        elif self.path:
            config = load_config(self.path)
        else:
            config = default_config()
        server = config.server
        if self.host:
            server = replace(server, host=self.host)
        if self.port:
            server = replace(server, port=self.port)
        return replace(config, server=server)


class Live:
    """One config's serving objects (see the module docstring)."""

    __slots__ = (
        "accounting",
        "admin",
        "config",
        "gateway",
        "keys",
        "retired",
        "upstreams",
        "users",
    )

    def __init__(
        self,
        config: Config,
        gateway: Gateway,
        keys: KeyRing,
        accounting: Accounting | None,
        upstreams: Mapping[str, Upstream],
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.keys = keys
        self.accounting = accounting
        self.upstreams = upstreams
        #: the admin key's digest; None: no admin section (no /admin route answers)
        self.admin = config.admin.digest() if config.admin is not None else None
        #: requests (and sockets) that began on this bundle and have not ended
        self.users = 0
        #: called once no user is left, after a reload replaced this bundle
        self.retired: Callable[[], None] | None = None

    def left(self) -> None:
        """A user ended (the front layer's ``finally``): the last one of a replaced
        bundle lets its upstreams that left go."""
        self.users -= 1
        if not self.users and self.retired is not None:
            retired, self.retired = self.retired, None
            retired()


@dataclass
class Process:
    """What one serving process builds once and every config it serves shares."""

    transports: Transports | None
    counters: SharedCounters | None
    responses: Dialect
    sinks: Sequence[RecordSink] = ()
    observe: Callable[[str, str], None] | None = None
    continued: Callable[[str, str], None] | None = None
    #: the keys' spend toward their budgets, kept across reloads (server/budgets.py)
    spend: SpendBook = dataclasses.field(default_factory=SpendBook)
    #: where the spend so far is read from when a key gets a budget
    usage_log: UsageLog | None = None
    #: the database's keys, kept current (None: keys do not live in the database)
    stored: StoredKeys | None = None

    def router(
        self, config: Config, upstreams: Mapping[str, Upstream], old: Live | None = None
    ) -> Router:
        """``config``'s router; ``old``'s cooldown book (by deployment) carries over
        (its rules are changed once the new bundle serves: :func:`_cooldown_rules`)."""
        if old is not None:
            cooldowns = old.gateway.router.cooldowns
        else:
            cooldowns = _cooldowns(config, self.counters)
        return Router(
            config, upstreams, cooldowns=cooldowns, observe=self.observe, continued=self.continued
        )


def build_live(
    config: Config,
    process: Process,
    upstreams: Mapping[str, Upstream],
    old: Live | None = None,
    *,
    router: Router | None = None,
) -> Live:
    """The bundle serving ``config`` over the built ``upstreams`` (and ``router``, when
    built already), reusing ``old``'s keys and cooldowns where they are unchanged
    (ConfigError: a key's variable unset, ...)."""
    router = router or process.router(config, upstreams, old)
    secrets = [key for cfg in config.upstreams.values() if (key := cfg.api_key())]
    gateway = Gateway(config, router, secrets, process.responses)
    book = process.spend
    stored = process.stored.rows() if process.stored is not None else None
    previous = old.keys if old else None
    keys = KeyRing.from_config(config, process.counters, previous, book, stored=stored)
    pricing = Pricing(config)
    accounting = old.accounting if old is not None else None
    if accounting is None and (process.sinks or any(key.limited for key in keys.keys)):
        accounting = Accounting(process.sinks, pricing)
    elif accounting is not None:
        accounting.reprice(pricing)  # (the prices the reloaded config names)
    if accounting is not None:
        gateway.note_row = accounting.add_row  # (a continued stream's broken attempts)
        accounting.spend = book if book.any else None
    warn_unpriced(config, pricing)
    if old is not None:  # (what the continuation learnt of each deployment)
        gateway.prefill_refused = old.gateway.prefill_refused
    return Live(config, gateway, keys, accounting, upstreams)


def _cooldowns(config: Config, counters: SharedCounters | None) -> CooldownBook:
    """The router's cooldowns: in this process, or shared through Redis (``state.url``)."""
    local = Cooldowns(config.routing.cooldown)
    return counters.cooldowns(local) if counters is not None else local


def _cooldown_rules(book: Any, config: Config) -> None:
    """``config``'s cooldown rules on the book that carried over, for the deployments
    cooling now too (a shared book keeps a local one: limits/shared_cooldowns.py)."""
    for each in (book, getattr(book, "local", None)):
        if each is not None and hasattr(each, "config"):
            each.config = config.routing.cooldown


class Holder(Protocol):
    """What holds the current bundle (server/app.py's ``Handlers``)."""

    live: Live


@dataclass(frozen=True)
class Outcome:
    """What a reload changed, and what it could not."""

    changes: list[str]
    warnings: list[str]


class Reloader:
    """Re-read the config and swap the bundle (see the module docstring)."""

    def __init__(
        self,
        source: ConfigSource | None,
        holder: Holder,
        process: Process,
        on_swap: Callable[[Live], None] = lambda live: None,
    ) -> None:
        self.source = source
        self.holder = holder
        self.process = process
        self.on_swap = on_swap
        self._lock = asyncio.Lock()
        #: upstreams that left, waiting for their last request (closed at shutdown else)
        self._leaving: set[Upstream] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def reload(self) -> Outcome:
        """Read the config again and serve it; ConfigError (the old config serving on)
        when it is refused."""
        async with self._lock:
            try:
                outcome = await self._reload()
            except ConfigError as exc:
                log.error("config reload refused, the old config serves on: %s", exc)
                raise
        for warning in outcome.warnings:
            log.warning("config reload: %s", warning)
        log.info("config reloaded: %s", "; ".join(outcome.changes) or "nothing changed")
        return outcome

    async def _reload(self) -> Outcome:
        if self.source is None or not (self.source.path or self.source.fake):
            raise ConfigError("no config file to re-read (the server was started without one)")
        old = self.holder.live
        new = self.source.load()
        check_config(new)
        warnings, new = _keep_restart_only(old.config, new)
        upstreams, built = self._upstreams(old, new)
        try:
            for upstream in built:
                await upstream.start()
            live = build_live(new, self.process, upstreams, old)
            await self._seed_budgets(live)
        except BaseException:
            for upstream in built:
                await upstream.aclose()
            raise
        self.holder.live = live  # the swap: requests that begin from now on use it
        _cooldown_rules(live.gateway.router.cooldowns, new)
        self.on_swap(live)
        kept = {id(u) for u in upstreams.values()}
        self._retire(old, [u for u in old.upstreams.values() if id(u) not in kept])
        return Outcome(_changes(old.config, new), warnings)

    async def _seed_budgets(self, live: Live) -> None:
        """The spend so far of keys that just got a budget, read from the usage log
        before the new bundle serves (the records that ended are written first)."""
        process, usage_log = self.process, self.process.usage_log
        if process.spend.pending and usage_log is not None:
            if live.accounting is not None:
                live.accounting.drain()
            await usage_log.flush()
            await process.spend.seed(usage_log.db)

    def _upstreams(self, old: Live, new: Config) -> tuple[dict[str, Upstream], list[Upstream]]:
        """``new``'s upstreams: the old object of each unchanged entry, the others built."""
        same = {
            name: old.upstreams[name]
            for name, cfg in new.upstreams.items()
            if old.config.upstreams.get(name) == cfg and name in old.upstreams
        }
        changed = {n: c for n, c in new.upstreams.items() if n not in same}
        process = self.process
        built = build_upstreams(
            replace(new, upstreams=changed), process.transports, process.counters
        )
        every = {name: same[name] if name in same else built[name] for name in new.upstreams}
        return every, [*built.values()]

    def _retire(self, old: Live, leaving: list[Upstream]) -> None:
        """Close ``leaving`` once the requests on ``old`` have ended."""
        self._leaving.update(leaving)

        def close() -> None:
            task = asyncio.get_running_loop().create_task(self._close(leaving))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

        if old.users:
            old.retired = close
        elif leaving:
            close()

    async def _close(self, upstreams: list[Upstream]) -> None:
        for upstream in upstreams:
            self._leaving.discard(upstream)
            try:
                await upstream.aclose()
            except Exception:
                log.exception("closing upstream %s after a reload", upstream.name)

    async def aclose(self) -> None:
        """At shutdown: close the serving upstreams and those still leaving."""
        await self._close([*self.holder.live.upstreams.values(), *self._leaving])

    def on_hangup(self) -> None:
        """SIGHUP: reload in the background (the outcome is logged)."""
        task = asyncio.get_running_loop().create_task(self._logged())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _logged(self) -> None:
        try:
            await self.reload()
        except ConfigError:
            pass  # (logged by reload)
        except Exception:
            log.exception("config reload failed, the old config serves on")

    def listen(self) -> Callable[[], None]:
        """Reload on SIGHUP in the running loop (the serving process's main thread);
        what stops it (at shutdown: no reload while draining)."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGHUP, self.on_hangup)
        return lambda: loop.add_signal_handler(signal.SIGHUP, _ignored)

    async def admin_reload(self, request: Any) -> BytesResponse:
        """``POST /admin/reload``: the admin key only; 200 with what changed, or 400
        with why the file was refused (the old config serving on)."""
        live = self.holder.live
        gateway, request_id = live.gateway, request.scope.get("state", {}).get("request_id", "")
        try:
            check_admin(live, request)
            try:
                outcome = await self.reload()
            except ConfigError as exc:
                raise InvalidRequestError(
                    f"config reload refused (the old config serves on): {exc}",
                    code="config_invalid",
                ) from None
        except InterlinguaError as err:
            return gateway.error_response(OPENAI, err, request_id)
        if self.source is not None and self.source.workers > 1:
            # the other workers: the supervisor forwards a SIGHUP to each (this one too,
            # whose second reload finds nothing changed)
            os.kill(os.getppid(), signal.SIGHUP)
        body = {"reloaded": True, **dataclasses.asdict(outcome)}
        return BytesResponse(orjson.dumps(body))


def _ignored() -> None:
    """A SIGHUP while shutting down (its default action would kill the process)."""


def check_admin(live: Live, request: Any) -> None:
    """404 without an admin section, 401 without a key, 403 with another key."""
    if live.admin is None:
        where = f"{request.scope.get('method', 'POST')} {request.scope['path']}"
        raise NotFoundError(f"Unknown request URL: {where}.", code="unknown_url")
    headers = request.headers
    presented = presented_key(headers)
    if presented is None:
        raise AuthenticationError(
            "This route needs the admin key, as 'Authorization: Bearer <key>' or "
            "'x-api-key: <key>'.",
            code="invalid_api_key",
        )
    digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
    if not hmac.compare_digest(digest, live.admin):
        raise PermissionDeniedError("This route needs the admin key.", code="not_admin")


def _keep_restart_only(old: Config, new: Config) -> tuple[list[str], Config]:
    """``new`` with what cannot change live put back as it was, and a warning for each."""
    warnings = []
    server = replace(old.server, api_keys=new.server.api_keys)
    for field in dataclasses.fields(old.server):
        if getattr(new.server, field.name) != getattr(server, field.name):
            warnings.append(f"server.{field.name} changed: it takes a restart (kept as it was)")
    for name in RESTART_ONLY:
        if getattr(new, name) != getattr(old, name):
            warnings.append(f"{name} changed: it takes a restart (kept as it was)")
    kept = {name: getattr(old, name) for name in RESTART_ONLY}
    return warnings, replace(new, server=server, **kept)


def _changes(old: Config, new: Config) -> list[str]:
    """What differs, section by section, by name ("models added: smart")."""
    out = []
    for what, before, after in (
        ("upstreams", old.upstreams, new.upstreams),
        ("models", _by_name(old.models), _by_name(new.models)),
        ("keys", _by_name(old.keys), _by_name(new.keys)),
    ):
        added = [n for n in after if n not in before]
        removed = [n for n in before if n not in after]
        changed = [n for n in after if n in before and before[n] != after[n]]
        for verb, names in (("added", added), ("removed", removed), ("changed", changed)):
            if names:
                out.append(f"{what} {verb}: {', '.join(names)}")
    for section in ("routing", "admin"):
        if getattr(old, section) != getattr(new, section):
            out.append(f"{section} changed")
    if old.server.api_keys != new.server.api_keys:
        out.append("server.api_keys changed")
    return out


def _by_name(entries: Sequence[Any]) -> dict[str, list[Any]]:
    """Entries by name (a model name may have several deployments: all of them)."""
    out: dict[str, list[Any]] = {}
    for entry in entries:
        out.setdefault(entry.name, []).append(entry)
    return out
