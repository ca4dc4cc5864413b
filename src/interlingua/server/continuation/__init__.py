"""Streams that outlive their upstream: a broken stream carried on by the next candidate
(:mod:`.runner`), its events spliced into the client's open answer (:mod:`.splice`),
with the request that asks for the rest (:mod:`.requests`)."""

from .runner import Continuer
from .splice import Splice

__all__ = ["Continuer", "Splice"]
