"""Outbound proxies from the environment: ``HTTPS_PROXY``, ``HTTP_PROXY``, ``NO_PROXY``.

The variables (either case; lowercase first, as curl and ``urllib`` read them) are read
once, when a :class:`Proxies` is made (the gateway's transports at startup, a client when
built), with the standard library's rules (:func:`urllib.request.getproxies_environment`,
:func:`urllib.request.proxy_bypass_environment`): the proxy for a URL is the variable of
its scheme; ``NO_PROXY`` lists hosts (``example.com`` also covers its subdomains, an
optional ``:port``) or ``*`` that go direct. ``ALL_PROXY`` is not used (SOCKS is
not supported).

Why not aiohttp's ``trust_env=True``: it looks the variables up again on every request,
in a worker thread (``asyncio.to_thread``), a thread hop per upstream call on the hot
path. Resolving once per URL and passing ``proxy=`` gives the same routing for free
(credentials in the proxy URL, ``http://user:pass@proxy:3128``, are sent as
``Proxy-Authorization`` by aiohttp, on the request itself or on the CONNECT).

>>> p = Proxies({"http": "http://proxy:3128", "no": "localhost,.internal"})
>>> p.for_url("http://api.example.com/v1"), p.for_url("http://localhost:8000/v1")
('http://proxy:3128', None)
>>> p.for_url("https://api.example.com/v1") is None   # no HTTPS_PROXY
True
"""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping
from urllib.parse import urlsplit

__all__ = ["Proxies"]

_MAX_CACHED = 1024


class Proxies:
    """The proxy settings read once (``None``: from the environment now)."""

    __slots__ = ("_cache", "_settings")

    def __init__(self, settings: Mapping[str, str] | None = None) -> None:
        if settings is None:
            settings = urllib.request.getproxies_environment()
        self._settings = dict(settings)
        self._cache: dict[str, str | None] = {}

    def __bool__(self) -> bool:
        """True when any proxy is set (so most gateways skip the lookup entirely)."""
        return any(key != "no" and value for key, value in self._settings.items())

    def for_url(self, url: str) -> str | None:
        """The proxy URL to reach ``url`` through, or None to go direct."""
        try:
            return self._cache[url]
        except KeyError:
            pass
        proxy = self._lookup(url)
        if len(self._cache) >= _MAX_CACHED:
            self._cache.clear()
        self._cache[url] = proxy
        return proxy

    def _lookup(self, url: str) -> str | None:
        parts = urlsplit(url)
        proxy = self._settings.get(parts.scheme.lower())
        if not proxy or not parts.hostname:
            return None
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        # (in urllib since Python 2, not in typeshed's stubs)
        if urllib.request.proxy_bypass_environment(host, self._settings):  # type: ignore[attr-defined]
            return None
        # "proxy:3128" (curl takes it) means an HTTP proxy.
        return proxy if "://" in proxy else f"http://{proxy}"
