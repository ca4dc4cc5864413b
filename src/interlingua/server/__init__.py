"""The gateway server: ``create_app(config)`` returns the ASGI app."""

from .app import create_app

__all__ = ["create_app"]
