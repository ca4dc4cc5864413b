"""Whether the request being served is background work (a batch line): the upstream limiter serves interactive requests first."""

from contextvars import ContextVar

__all__ = ["BACKGROUND"]

BACKGROUND: ContextVar[bool] = ContextVar("interlingua_background", default=False)
