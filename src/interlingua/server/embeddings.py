"""``POST /v1/embeddings``: the OpenAI Embeddings API over the gateway's routing.

Parse (the API's checks: :func:`~interlingua.dialects.embeddings.check_request`) ->
route (the model's plan: deployments, retries, fallbacks, cooldowns, as for a generation:
server/attempts.py) -> call (each attempt's upstream :meth:`~..upstreams.base.Upstream.embed`
with the body as parsed, its ``model`` the upstream's name, shaped by the model entry's
``params`` / ``drop_params``) -> relay.

The answer is the upstream's bytes as they came (scrubbed of upstream keys), except when
its vectors are in the other encoding than the client asked (``encoding_format``,
``float`` when absent): then the gateway converts them (a server that only writes floats
still serves the openai SDK's default, base64). A request with ``dimensions`` whose
answer has vectors of another length is refused with a 400 naming ``dimensions`` (some
servers ignore the field rather than refuse it). An upstream whose API has no embeddings
(Anthropic) refuses with a 400 (``Upstream.embed``'s default). The error body of an
upstream is relayed as it came, as on the passthrough path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import orjson
from starlette.types import Receive

from ..dialects import encode_body, get_dialect
from ..dialects.embeddings import check_request, converted, decode_vector
from ..errors import InvalidRequestError
from ..routing import Route
from ..upstreams.shaping import drop_params, merge_params
from .asgi_io import JSON_CT, BytesResponse
from .attempts import run_attempts
from .gateway import Gateway, _model_of, _pause, _relayed, _went_to, relayed_failure

__all__ = ["embed"]

_OPENAI = get_dialect("openai")


async def embed(
    gateway: Gateway,
    body: dict[str, Any],
    headers: Mapping[str, str],
    receive: Receive | None = None,
) -> BytesResponse:
    """Answer an Embeddings request ``body`` (module docstring); an error the gateway
    itself finds is raised, an upstream's error answer returned as it came."""
    name = _model_of(body)
    check_request(body)
    encoding = body.get("encoding_format") or "float"
    dimensions = body.get("dimensions")
    plan = gateway.router.plan(name)
    attempt = partial(_attempt, gateway, body, headers, encoding, dimensions)
    answer = await run_attempts(gateway.router, plan, attempt, name, receive, _pause)
    assert isinstance(answer, BytesResponse)
    return answer


async def _attempt(
    gateway: Gateway,
    body: dict[str, Any],
    headers: Mapping[str, str],
    encoding: str,
    dimensions: int | None,
    route: Route,
) -> BytesResponse:
    """One deployment's try: its own copy of the body (a model name and shaping of its
    own), the upstream's answer relayed, or raised as a :class:`RelayedFailure` for the
    attempt loop to judge."""
    _went_to(route)
    sent = dict(body)
    sent["model"] = route.upstream_model
    entry = route.entry
    if entry is not None and entry.shapes_body:
        merge_params(sent, entry)
        drop_params(sent, entry)
    answer = await route.upstream.embed(encode_body(sent), headers)
    relayed = [JSON_CT, *_relayed(answer)]
    data = gateway.scrub_bytes(answer.body) if gateway.secrets else answer.body
    if answer.status >= 400:
        raise relayed_failure(data, _OPENAI.client_status(answer.status), relayed, answer)
    data = converted(data, encoding) or data
    if dimensions is not None:
        _check_dimensions(data, dimensions, route)
    return BytesResponse(data, answer.status, relayed)


def _check_dimensions(data: bytes, dimensions: int, route: Route) -> None:
    """Refuse an answer whose vectors are not ``dimensions`` long: the upstream ignored
    the field, and its vectors would not fit the client's index."""
    answer = orjson.loads(data)
    items = answer.get("data") if isinstance(answer, dict) else None
    if not items or not isinstance(items[0], dict):
        return
    vector = items[0].get("embedding")
    length = len(decode_vector(vector)) if isinstance(vector, str) else len(vector or ())
    if length != dimensions:
        raise InvalidRequestError(
            f"Model {route.upstream_model!r} (upstream '{route.upstream.name}') does not "
            f"support 'dimensions' = {dimensions}: its embeddings have {length} dimensions.",
            param="dimensions",
            code="invalid_value",
        )
