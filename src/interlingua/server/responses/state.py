"""Stored state for ``POST /v1/responses``: resolve ``previous_response_id``, generate,
remember the answer.

Three steps, each a function the HTTP handler and the WebSocket handler share:

* :func:`resolve` -- turn a request body into a :class:`Turn`: its own input items
  normalized (a string input is one user message; every item gets an id, ``msg_...``
  and the like, when it has none), and, when ``previous_response_id`` names a
  conversation we hold, the body to generate from (``input`` = the conversation's items,
  per response its input then its output, oldest first, then the new input). The previous
  response's ``instructions`` are not inherited (docs/protocols.md,
  "Responses: stored responses"): only the new body's own apply. An unknown id may be a
  Responses upstream's own: the request goes on unchanged, to the deployments that relay it
  as it is (passthrough) and to no other, since a translating one would get the new input
  without its conversation; with none in the request's plan it is a 400
  ``previous_response_not_found``.
* :func:`remember` -- store the final response object with the turn's own items. It
  never raises: a store that fails is logged and the answer, already delivered or about
  to be, stands.
* :func:`respond` -- both around :meth:`Gateway.generate`.

Every stored response belongs to the key that stored it (:func:`owner_of`: the key's
name, ``''`` without named keys): a conversation is continued, and a response kept, only
within one owner. Another owner's id is answered as an unknown one (the same 400), and
is never relayed to a Responses upstream either: that upstream may hold it too, under
the gateway's one upstream key, and would continue another team's conversation.

Nothing here runs for the Chat or Messages endpoints, and a request with ``store: false``
and no ``previous_response_id`` touches no database. ``background: true`` is refused
(400 ``unsupported_parameter``): the gateway runs no response outside its request.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Receive

from ...dialects import random_id
from ...dialects.openai_responses.response import STATE
from ...errors import InvalidRequestError, UpstreamError
from ...usage import Chain, ResponseStore, StoredResponse, StoreError
from ..asgi_io import BytesResponse, StreamResponse
from ..gateway import Gateway, NotRelayable
from ..keys import ClientKey

__all__ = [
    "Foreign",
    "Lookup",
    "Turn",
    "foreign_in",
    "item_ids",
    "lookup_in",
    "normalize_input",
    "owner_of",
    "previous_not_found",
    "remember",
    "resolve",
    "respond",
    "store_unavailable",
]

log = logging.getLogger("interlingua.server")

#: ``response_id -> its conversation`` (None: unknown). The store's ``chain``; a
#: WebSocket connection may put its own in-memory chain in front of it.
Lookup = Callable[[str], Awaitable[Chain | None]]
#: ``response_id -> whether another owner holds it`` (the store's ``held_by_another``)
Foreign = Callable[[str], Awaitable[bool]]

# The id prefix of each input item kind, as the API names them; others get "item_".
_PREFIXES = {
    "message": "msg_",
    "function_call": "fc_",
    "function_call_output": "fco_",
    "custom_tool_call": "ctc_",
    "custom_tool_call_output": "ctco_",
    "reasoning": "rs_",
}


@dataclass(slots=True)
class Turn:
    """One Responses request with its ``previous_response_id`` resolved.

    ``body`` is what to generate from (the client's body itself when there was nothing
    to resolve); ``items`` / ``ids`` this request's own input items and their ids (what
    is stored); ``store`` whether to remember the answer; ``ancestors`` the ids of the
    conversation it continues.
    """

    body: dict[str, Any]
    items: list[dict[str, Any]] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    previous_response_id: str | None = None
    store: bool = False
    ancestors: frozenset[str] = frozenset()
    #: the id a translated answer gets when it is stored: ours, so it is unique (an
    #: upstream's own may repeat, and a repeated id would knot a conversation)
    response_id: str | None = None
    #: the ``previous_response_id`` left for the upstream to find (``body`` goes on as
    #: the client sent it): only a deployment that relays it unchanged may answer
    relayed: str | None = None

    @property
    def echo(self) -> dict[str, Any] | None:
        """The codec marker: what the rendered response says of ``store`` and
        ``previous_response_id``, and its id when stored. None when there is nothing to
        say (not stored, no previous id: the codec's default), so a stateless request
        costs no copy of its parsed request."""
        if not self.store and self.previous_response_id is None:
            return None
        state = {"store": self.store, "previous_response_id": self.previous_response_id}
        if self.store:
            if self.response_id is None:
                self.response_id = random_id("resp_")
            state["id"] = self.response_id
        return {STATE: state}


def normalize_input(value: Any) -> list[dict[str, Any]]:
    """The request's ``input`` as a list of items in the API's listed form: a string is
    one user message, an easy message (no ``type``) a ``message`` item, a message's
    string content a list of ``input_text`` (``output_text`` for the assistant) parts.

    Malformed input is kept as it is: the codec's validation, after this, names it.
    """
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": [_text_part("user", value)]}]
    if not isinstance(value, list):
        return [value]
    items: list[dict[str, Any]] = []
    for item in value:
        if isinstance(item, dict) and "role" in item and item.get("type", "message") == "message":
            item = {"type": "message", **item}
            if isinstance(item.get("content"), str):
                item["content"] = [_text_part(item["role"], item["content"])]
        items.append(item)
    return items


def _text_part(role: Any, text: str) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}


def item_ids(items: list[dict[str, Any]]) -> list[str]:
    """Each item's own ``id``, or a new one with the API's prefix for its kind."""
    ids = []
    for item in items:
        own = item.get("id") if isinstance(item, dict) else None
        if isinstance(own, str) and own:
            ids.append(own)
        else:
            kind = item.get("type") if isinstance(item, dict) else None
            ids.append(random_id(_PREFIXES.get(str(kind), "item_")))
    return ids


def owner_of(key: ClientKey | None) -> str:
    """Whose stored responses a request may see and makes: the name of its ``keys:``
    key; ``''`` when the gateway has no keys, and for a ``server.api_keys`` key (they
    have no name: they share one owner, as they share everything else).

    >>> owner_of(None)
    ''
    """
    if key is None or key.name is None:
        return ""
    return key.name


def previous_not_found(response_id: str, missing: str | None = None) -> InvalidRequestError:
    """The API's 400 for a ``previous_response_id`` nobody holds (or whose conversation
    lost a response: deleted, or expired). Another key's response is not held, for the
    caller: the same 400, no word of an owner."""
    if missing is None or missing == response_id:
        message = f"Previous response with id '{response_id}' not found."
    else:
        message = (
            f"Previous response with id '{response_id}' cannot be continued: response "
            f"'{missing}' earlier in its conversation was deleted or has expired."
        )
    return InvalidRequestError(
        message, param="previous_response_id", code="previous_response_not_found"
    )


def _check(body: dict[str, Any]) -> str | None:
    """``previous_response_id`` (None when absent), after the checks of the fields this
    layer reads; the codec validates the rest."""
    if body.get("background") is True:
        raise InvalidRequestError(
            "background responses are not supported by this gateway: send the request "
            "without 'background' (stream it to follow a long answer).",
            param="background",
            code="unsupported_parameter",
        )
    store = body.get("store")
    if store is not None and not isinstance(store, bool):
        raise InvalidRequestError(
            "Invalid type for 'store': expected a boolean.", param="store", code="invalid_type"
        )
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous):
        raise InvalidRequestError(
            "Invalid type for 'previous_response_id': expected a non-empty string.",
            param="previous_response_id",
            code="invalid_type",
        )
    if previous is not None and body.get("conversation") is not None:
        raise InvalidRequestError(
            "'previous_response_id' and 'conversation' cannot be used together.",
            param="previous_response_id",
            code="mutually_exclusive_parameters",
        )
    return previous


def store_unavailable(exc: StoreError) -> UpstreamError:
    """A 503 for a store that cannot be reached (the cause is logged, not shown)."""
    log.error("stored responses unavailable: %s", exc)
    return UpstreamError("Stored responses are unavailable right now; retry later.", status=503)


def lookup_in(store: ResponseStore, owner: str = "") -> Lookup:
    """``store``'s chains of ``owner`` as a :data:`Lookup` whose failures are a 503."""

    async def lookup(response_id: str) -> Chain | None:
        try:
            return await store.chain(response_id, owner=owner)
        except StoreError as exc:
            raise store_unavailable(exc) from exc

    return lookup


def foreign_in(store: ResponseStore, owner: str = "") -> Foreign:
    """Whether ``store`` holds an id for an owner other than ``owner``, as a
    :data:`Foreign` whose failures are a 503."""

    async def foreign(response_id: str) -> bool:
        try:
            return await store.held_by_another(response_id, owner)
        except StoreError as exc:
            raise store_unavailable(exc) from exc

    return foreign


async def resolve(
    body: dict[str, Any],
    lookup: Lookup | None,
    *,
    storing: bool = False,
    may_relay: bool = False,
    foreign: Foreign | None = None,
) -> Turn:
    """The :class:`Turn` of a Responses request body (see the module docstring).

    ``lookup`` finds conversations (None: nothing is held anywhere); ``storing`` says the
    answer may be kept (then it is, unless the body says ``store: false``); ``may_relay``
    says an id we do not hold may be an upstream's business (the turn is then
    :attr:`Turn.relayed`) -- unless ``foreign`` says we hold it for another owner.
    """
    previous = _check(body)
    store = storing and body.get("store") is not False
    if previous is None and not store:
        return Turn(body)  # the hot path: nothing to resolve, nothing to keep
    items = normalize_input(body.get("input"))
    turn = Turn(body, items, item_ids(items), previous, store)
    if previous is None:
        return turn
    chain = await lookup(previous) if lookup is not None else None
    if chain is None:
        if may_relay and (foreign is None or not await foreign(previous)):
            # The upstream's own conversation: it gets the request as sent, and what it
            # answers is not stored here (its ancestors are not ours to rebuild).
            turn.previous_response_id, turn.store = None, False
            turn.relayed = previous
            return turn
        raise previous_not_found(previous)
    if chain.missing is not None:
        raise previous_not_found(previous, chain.missing)
    rebuilt = {k: v for k, v in body.items() if k != "previous_response_id"}
    rebuilt["input"] = [*chain.context(), *items]
    turn.body = rebuilt
    turn.ancestors = frozenset(link.id for link in chain.links)
    return turn


async def remember(store: ResponseStore, turn: Turn, response: bytes, owner: str = "") -> None:
    """Store ``response`` (a response object's JSON) with the turn's own input items,
    as ``owner``'s.

    Never raises: a failure is logged, as the answer is the client's whatever the store
    does. A body that is not a response object (no id) is not stored, nor one whose id
    another owner holds (the store leaves that row as it is).
    """
    try:
        obj = orjson.loads(response)
        rid = obj.get("id") if isinstance(obj, dict) else None
        if not isinstance(rid, str) or not rid:
            log.warning("answer without a response id: not stored")
            return
        if rid in turn.ancestors:
            log.warning("upstream reused response id %s of its own conversation: not stored", rid)
            return
        if (
            obj.get("store") is not True
            or obj.get("previous_response_id") != turn.previous_response_id
        ):
            # A relayed upstream's object says what the upstream did; ours is kept as a
            # client reading it back should see it.
            obj["store"] = True
            obj["previous_response_id"] = turn.previous_response_id
            response = orjson.dumps(obj)
        created = obj.get("created_at")
        await store.put(
            StoredResponse(
                id=rid,
                created_at=created if isinstance(created, int) else 0,
                response=response,
                input_items=turn.items,
                input_ids=turn.ids,
                previous_response_id=turn.previous_response_id,
                status=obj.get("status") if isinstance(obj.get("status"), str) else None,
                owner=owner,
            )
        )
    except Exception:
        log.exception("storing a response failed; the answer was delivered regardless")


async def respond(
    gateway: Gateway,
    store: ResponseStore | None,
    body: dict[str, Any],
    headers: Mapping[str, str],
    receive: Receive | None = None,
    *,
    key: ClientKey | None = None,
) -> BytesResponse | StreamResponse:
    """Answer one ``POST /v1/responses`` body with stored state (module docstring), as
    the request's authenticated ``key`` (None: the gateway is open)."""
    owner = owner_of(key)
    lookup = lookup_in(store, owner) if store is not None else None
    foreign = None
    if store is not None and body.get("previous_response_id") is not None:
        foreign = foreign_in(store, owner)
    # Any id we do not hold may be an upstream's: whether some deployment can take it is
    # decided by the attempts themselves (relay_only below), from the plan they follow.
    turn = await resolve(body, lookup, storing=store is not None, may_relay=True, foreign=foreign)
    keep = None
    if turn.store and store is not None:
        kept = store

        async def keep(response: bytes) -> None:
            await remember(kept, turn, response, owner)

    relay = turn.relayed
    try:
        return await gateway.generate(
            gateway.responses,
            turn.body,
            headers,
            receive,
            extra=turn.echo,
            keep=keep,
            relay_only=relay is not None,
        )
    except NotRelayable:
        # What a setup without a Responses upstream answers: nobody can hold the id.
        assert relay is not None
        raise previous_not_found(relay) from None
