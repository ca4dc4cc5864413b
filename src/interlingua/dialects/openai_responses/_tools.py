"""Responses ``tools`` / ``tool_choice`` <-> neutral :class:`ToolSpec` / :class:`ToolChoice`.

* ``function`` tools are function ToolSpecs. Trap: an omitted ``strict`` means TRUE in
  Responses (docs/protocols.md, "Responses: request body"), so the neutral ``strict`` is
  ``True`` then (marked ``meta["responses_strict_omitted"]`` so a Responses upstream gets
  the body unchanged); a tool of another dialect is always rendered with an explicit
  ``strict`` (``None`` -> ``false``, the Chat default) and a ``parameters`` schema.
* ``custom`` tools are custom ToolSpecs (``format`` kept).
* A ``namespace`` tool (a named group of function/custom tools, called with
  ``function_call.namespace``) is flattened: member ``t`` of namespace ``ns`` is the
  neutral tool ``ns__t``, its calls are named the same, and ``meta["responses_namespace"]``
  holds the namespace's own keys, so rendering regroups the members into one namespace
  tool at the position of its first member. Another dialect sees plain tools.
* Hosted tools (``web_search``, ``file_search``, ``code_interpreter``, ``tool_search``,
  ``mcp``, ...) and empty namespaces have no neutral form: they are kept verbatim with
  their position in ``extra["_responses_tools"]`` for a Responses upstream; other
  dialects never see them.
* ``tool_choice``: the string modes and ``{type: function|custom, name}`` are neutral
  (rendering picks ``custom`` when the named tool is custom). A choice naming a member
  of a namespace (by its own name, or with a ``namespace`` key) names the flattened
  neutral tool ``ns__t``, and rendering gives the member's own name back; ``allowed_tools``, hosted
  and ``mcp`` choices are kept whole in ``extra["tool_choice"]`` (re-emitted for a
  Responses upstream), with the closest neutral mode for other dialects.
"""

from __future__ import annotations

from typing import Any

from ...core import ToolChoice, ToolSpec
from ...errors import InvalidRequestError
from .._common import expect_type
from ._items import NAMESPACE_SEP, bad_value, required_str

__all__ = ["parse_tool_choice", "parse_tools", "render_tool_choice", "render_tools"]

TOOL = "responses_tool"  # ToolSpec.meta: the tool's keys with no neutral field
STRICT_OMITTED = "responses_strict_omitted"
NAMESPACE = "responses_namespace"  # ToolSpec.meta: the namespace's keys except `tools`
HOSTED = "_responses_tools"  # extra: [[position in `tools`, raw tool], ...]
# extra, from parse_tools to parse_tool_choice only (popped there): {member name: ns__name}
_FLAT = "_responses_namespaced"

_SPEC_KEYS = ("type", "name", "description", "parameters", "strict", "format")


def parse_tools(raw: Any, extra: dict[str, Any]) -> tuple[ToolSpec, ...]:
    """Validate and convert ``tools``; hosted tools go to ``extra``."""
    if raw is None:
        return ()
    expect_type(raw, list, "tools", "an array")
    specs: list[ToolSpec] = []
    hosted: list[list[Any]] = []
    for i, tool in enumerate(raw):
        p = f"tools[{i}]"
        expect_type(tool, dict, p, "an object")
        kind = required_str(tool, "type", f"{p}.type")
        if kind in ("function", "custom"):
            specs.append(_spec(tool, p, kind, None))
        elif kind == "namespace" and tool.get("tools"):
            specs.extend(_namespace(tool, p))
        else:
            hosted.append([i, tool])
    if hosted:
        extra[HOSTED] = hosted
    top = {s.name for s in specs if NAMESPACE not in s.meta}  # these win a shared name
    flat = {n: s.name for s in specs if NAMESPACE in s.meta and (n := _own_name(s)) not in top}
    if flat:
        extra[_FLAT] = flat
    return tuple(specs)


def _own_name(spec: ToolSpec) -> str:
    """A namespace member's name inside its namespace (``t`` of the neutral ``ns__t``)."""
    own = spec.meta.get(NAMESPACE)
    if own is None:
        return spec.name
    prefix = own["name"] + NAMESPACE_SEP
    return spec.name[len(prefix) :] if spec.name.startswith(prefix) else spec.name


def _namespace(tool: dict[str, Any], p: str) -> list[ToolSpec]:
    name = required_str(tool, "name", f"{p}.name")
    members = expect_type(tool["tools"], list, f"{p}.tools", "an array")
    own = {k: v for k, v in tool.items() if k != "tools"}
    specs = []
    for j, member in enumerate(members):
        q = f"{p}.tools[{j}]"
        expect_type(member, dict, q, "an object")
        kind = required_str(member, "type", f"{q}.type")
        if kind not in ("function", "custom"):
            raise bad_value(f"{q}.type", kind, ("function", "custom"))
        specs.append(_spec(member, q, kind, (name, own)))
    return specs


def _spec(tool: dict[str, Any], p: str, kind: str, namespace: tuple[str, Any] | None) -> ToolSpec:
    name = required_str(tool, "name", f"{p}.name")
    if not name:
        raise InvalidRequestError(f"'{p}.name' must not be empty.", param=f"{p}.name")
    meta: dict[str, Any] = {
        TOOL: {k: v for k, v in tool.items() if k not in _SPEC_KEYS and v is not None}
    }
    if namespace is not None:
        name = namespace[0] + NAMESPACE_SEP + name
        meta[NAMESPACE] = namespace[1]
    desc = tool.get("description")
    description = None if desc is None else expect_type(desc, str, f"{p}.description", "a string")
    if kind == "custom":
        fmt = tool.get("format")
        fmt = None if fmt is None else expect_type(fmt, dict, f"{p}.format", "an object")
        return ToolSpec(name, description, meta=meta, kind="custom", format=fmt)
    params = tool.get("parameters")
    strict = tool.get("strict")
    if strict is None:
        meta[STRICT_OMITTED] = True
    return ToolSpec(
        name,
        description,
        parameters=None if params is None else expect_type(params, dict, f"{p}.parameters", "an object"),
        strict=True if strict is None else expect_type(strict, bool, f"{p}.strict", "a boolean"),
        meta=meta,
    )  # fmt: skip


def render_tools(specs: tuple[ToolSpec, ...], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``tools`` array: neutral tools (namespaces regrouped), then each kept hosted
    tool back at its original position."""
    out: list[dict[str, Any]] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for spec in specs:
        own = spec.meta.get(NAMESPACE)
        if own is None:
            out.append(_render_spec(spec, spec.name))
            continue
        name = _own_name(spec)
        members = groups.get(own["name"])
        if members is None:
            members = groups[own["name"]] = []
            out.append({**own, "tools": members})
        members.append(_render_spec(spec, name))
    for position, tool in extra.get(HOSTED, ()):
        out.insert(position, tool)
    return out


def _render_spec(spec: ToolSpec, name: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": spec.kind, "name": name}
    if spec.description is not None:
        out["description"] = spec.description
    ours = spec.meta.get(TOOL)
    if spec.kind == "custom":
        if spec.format is not None:
            out["format"] = spec.format
    else:
        if spec.parameters is not None:
            out["parameters"] = spec.parameters
        elif ours is None:  # required by the API; another dialect's tool may lack it
            out["parameters"] = {"type": "object", "properties": {}}
        if not spec.meta.get(STRICT_OMITTED):
            # explicit: omitted means true here (docs/protocols.md, "Responses: request body")
            out["strict"] = bool(spec.strict)
    if ours:
        out.update(ours)
    return out


def parse_tool_choice(value: Any, extra: dict[str, Any]) -> ToolChoice | None:
    """Validate and convert ``tool_choice`` (non-neutral forms kept in ``extra``).

    Call it after :func:`parse_tools` with the same ``extra``: a name of a namespace
    member is flattened as the tool was."""
    flat: dict[str, str] = extra.pop(_FLAT, None) or {}
    if value is None:
        return None
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise bad_value("tool_choice", value, ("auto", "none", "required"))
        return ToolChoice(mode=value)  # type: ignore[arg-type]  # checked just above
    expect_type(value, dict, "tool_choice", "a string or an object")
    kind = required_str(value, "type", "tool_choice.type")
    if kind in ("function", "custom"):
        name = required_str(value, "name", "tool_choice.name")
        if value.keys() - {"type", "name"}:
            extra["tool_choice"] = value
        namespace = value.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = namespace + NAMESPACE_SEP + name
        elif name in flat:
            name = flat[name]  # a member named by its own name: the flattened tool
        return ToolChoice(mode="tool", name=name)
    extra["tool_choice"] = value  # allowed_tools, hosted tools, mcp: OpenAI only
    if kind == "allowed_tools":
        return ToolChoice(mode="required" if value.get("mode") == "required" else "auto")
    return None


def render_tool_choice(choice: ToolChoice, specs: tuple[ToolSpec, ...]) -> Any:
    """Neutral -> ``tool_choice``; a named tool is ``custom`` when its spec is."""
    if choice.mode != "tool":
        return choice.mode
    spec = next((s for s in specs if s.name == choice.name), None)
    if spec is None:
        return {"type": "function", "name": choice.name}
    return {"type": spec.kind, "name": _own_name(spec)}  # a namespace member's own name
