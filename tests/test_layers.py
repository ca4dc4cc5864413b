"""The layer rules of docs/architecture.md, "The floors", executed: who may import whom
inside `interlingua`.

Every import counts, including function-local and `TYPE_CHECKING` ones: a late import
hides a back-edge from the interpreter, not from the design (that is how `config` once
came to import `upstreams`). The floors, bottom to top:

    errors, sse, config, proxies nothing of ours
    tracing                      nothing of ours (a request's W3C trace context)
    http_pool                    proxies (and the package's __version__): the engines
                                 under upstreams and client
    core, retry, limits          errors
    dialects, text               core, errors, sse
    upstreams                    the floors below (and the package's __version__)
    client                       core, dialects, errors, sse, retry, limits, proxies,
                                 http_pool
    routing, batch               what they sit on
    usage                        errors, config (the stores: plain SQL, no codecs)
    batches                      errors, config, usage (the Files and Batch store, on
                                 the usage log's database layer and migrations)
    server                       anything but cli (the Batch API's executor reads and
                                 writes lines as the batch runner does: batch.records)
    cli                          anything

and no module-level import circle anywhere; a private `_module` is imported only from
inside its own package (others use what the package exports).

Inside ``server``, by concern, bottom to top:

    server.views                 nothing else of server (they read records and the router)
    the request path             views never; the modules at the top of server/ but app
    server.responses             the request path
    server.batches               the request path, server.responses (a file's owner is
                                 a stored response's: ``owner_of``)
    server.app, server.services  all of the above (the app's assembly and its lifespan)
    server.process               anything in server (serve, factory, the connection guard)
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "interlingua"

_LOW = {"errors", "sse", "config", "core", "retry", "limits", "proxies", "tracing"}
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "errors": set(),
    "sse": set(),
    "config": set(),
    "proxies": set(),
    "tracing": set(),
    "http_pool": {"__init__", "proxies"},
    "core": {"errors"},
    "retry": {"errors"},
    "limits": {"errors"},
    "dialects": {"core", "errors", "sse"},
    "text": {"core", "errors", "sse"},
    "upstreams": _LOW | {"__init__", "dialects", "text", "http_pool"},
    "client": {"core", "dialects", "errors", "sse", "retry", "limits", "proxies", "http_pool"},
    "routing": _LOW | {"dialects", "text", "upstreams"},
    "usage": {"errors", "config"},
    "batches": {"errors", "config", "usage"},
    "batch": _LOW | {"dialects", "client"},
    "server": _LOW
    | {"__init__", "dialects", "text", "upstreams", "routing", "usage", "batches", "batch"},
    "cli": _LOW
    | {"__init__", "dialects", "upstreams", "routing", "server", "batch", "client", "usage"}
    | {"batches"},
}


#: server's concerns (see the module docstring) -> the concerns each may import
SERVER_ALLOWED: dict[str, set[str]] = {
    "views": set(),
    "request path": set(),
    "responses": {"request path"},
    "batches": {"request path", "responses"},
    "app": {"views", "request path", "responses", "batches"},
    "process": {"views", "request path", "responses", "batches", "app"},
}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["interlingua", *path.relative_to(PACKAGE).with_suffix("").parts]
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _targets(module: str, is_package: bool, node: ast.AST, known: set[str]) -> list[str]:
    """The modules of ours that one import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            here = here[: len(here) - node.level + 1]
            base = ".".join([*here, *([node.module] if node.module else [])])
        # `from pkg import sub` loads the submodule; `from pkg import name` loads pkg
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    else:
        return []
    out = []
    for name in names:
        if name.split(".")[0] != "interlingua":
            continue
        while name not in known:
            name = name.rsplit(".", 1)[0]
        out.append(name)
    return out


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Every module's imports of ours (parsed once for the tests that read it)."""
    modules = _modules()
    known = set(modules)
    edges: dict[str, set[str]] = defaultdict(set)
    for name, (path, is_package) in modules.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(name, is_package, node, known):
                if target != name:
                    edges[name].add(target)
    return edges


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while component[-1:] != [node]:
                        component.append(stack.pop())
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return found


def test_every_layer_is_known() -> None:
    assert {_layer(m) for m in _modules()} <= set(ALLOWED)


def test_imports_follow_the_floors() -> None:
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in _graph().items()
        for b in targets
        if _layer(a) != _layer(b) and _layer(b) not in ALLOWED[_layer(a)]
    )
    assert not wrong, "imports against the layer rules:\n" + "\n".join(wrong)


def _server_concern(module: str) -> str | None:
    parts = module.split(".")
    if parts[1:2] != ["server"] or len(parts) < 3:
        return None  # (server/__init__.py re-exports create_app: the package's face)
    if parts[2] in ("views", "responses", "batches", "process") and len(parts) > 3:
        return parts[2]
    return "app" if parts[2] in ("app", "services") else "request path"


def test_server_concerns_follow_their_floors() -> None:
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in _graph().items()
        for b in targets
        if (here := _server_concern(a)) is not None
        and (there := _server_concern(b)) is not None
        and here != there
        and there not in SERVER_ALLOWED[here]
    )
    assert not wrong, "server imports against its concerns' floors:\n" + "\n".join(wrong)


def test_no_import_circle() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_circle_finder_finds_circles(
    edges: dict[str, set[str]], expected: list[list[str]]
) -> None:
    assert sorted(_cycles(edges)) == expected


def test_a_late_import_counts() -> None:
    tree = ast.parse("def f():\n    from .upstreams import known_kinds\n")
    known = {"interlingua", "interlingua.upstreams", "interlingua.config"}
    late = [
        t for node in ast.walk(tree) for t in _targets("interlingua.config", False, node, known)
    ]
    assert late == ["interlingua.upstreams"]


def test_private_modules_stay_private() -> None:
    """A ``_module`` is its package's business: others import what the package exports."""
    wrong = sorted(
        f"{a} -> {b}"
        for a, targets in _graph().items()
        for b in targets
        if b.rsplit(".", 1)[-1].startswith("_") and not _inside(a, b.rsplit(".", 1)[0])
    )
    assert not wrong, "imports of another package's private module:\n" + "\n".join(wrong)


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")
