"""The repository's docs hold, and its text points only into them.

docs/architecture.md names only paths that exist, so the map cannot drift from the code.
The rule: a backticked token (up to a ``:``, as in ``server/app.py:GENERATION_ROUTES``)
is a path when it has no space or placeholder (``<name>``, ``*``) and ends in ``/`` or a
file suffix below. It is resolved against ``src/interlingua/`` first, then the repository
root (``tests/``, ``bench/``, ``docs/``).

Every pointer of the form ``docs/<file>.md, "<heading>"`` (or ``CONTRIBUTING.md, ...``)
names a heading of that file, and nothing mentions a document outside the repository or a
ticket number: a reader of a clone must be able to follow every reference.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "interlingua"
SUFFIXES = (".py", ".md", ".html", ".toml", ".sse")


def named_paths(text: str) -> list[str]:
    """The paths a document names, by the rule of the module docstring."""
    tokens = (token.split(":")[0] for token in re.findall(r"`([^`\n]+)`", text))
    return [
        token
        for token in tokens
        if not re.search(r"[\s<>*]", token) and token.endswith(("/", *SUFFIXES))
    ]


def test_architecture_names_only_existing_paths() -> None:
    named = named_paths((ROOT / "docs" / "architecture.md").read_text())
    missing = [p for p in named if not (PACKAGE / p).exists() and not (ROOT / p).exists()]
    assert len(named) > 100  # the rule still finds the map's paths
    assert missing == []


# The repository stands on its own: its text points into its own docs by file and heading,
# never at documents a clone lacks, nor at ticket numbers (the reason is written instead).

#: the files and trees whose text must stand on their own
SELF_CONTAINED = (
    "src",
    "tests",
    "bench",
    "docs",
    ".ci",
    "README.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
)
#: files there that are data, not prose
DATA = (".json", ".sse", ".gguf", ".pyc", ".db", ".png", ".lua")
_PLANNING = "|".join(word.upper() for word in ("design", "protocols", "style"))
#: what a clone cannot follow: the planning documents once kept beside the repository (by
#: file name or as a bare upper-case word, as in a section reference), their folder, and
#: ticket numbers. Spelled in pieces so that this file does not match itself.
OUTSIDE = re.compile(
    "|".join(
        (
            rf"\b(?:{_PLANNING})(?:\.md)?\b",
            r"\.\./" + "shared",
            r"(?i:\bissue" + r" \d+)",
        )
    )
)
SECTION = "\N{SECTION SIGN}"
#: the sections of external standards the code cites by number: WHATWG HTML's server-sent
#: events (9.2.x, in sse.py) and RFC 2045's media types (5.1); the repository's own docs
#: are cited by heading instead
STANDARD_SECTIONS = re.compile(SECTION + r"(?:9\.2(?:\.\d+)?|5\.1)\b")
#: a pointer: a repository doc, then its quoted headings ("A", "B" and "C")
POINTER = re.compile(
    r"(?<![\w/.-])(?:docs/)?(?P<doc>[\w-]+\.md)`?,? "
    r'(?P<headings>"[^"]+"(?:(?:, and |, | and )"[^"]+")*)'
)


def _texts() -> list[tuple[Path, str]]:
    """Every prose file of :data:`SELF_CONTAINED` with its text."""
    out = []
    for name in SELF_CONTAINED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
        for file in files:
            if file.suffix in DATA or "__pycache__" in file.parts:
                continue
            try:
                out.append((file.relative_to(ROOT), file.read_text()))
            except UnicodeDecodeError:
                continue
    return out


def headings(doc: Path) -> set[str]:
    """The markdown headings of ``doc`` (outside fenced code), as their text."""
    found, fenced = set(), False
    for line in doc.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} +(.+?) *#* *$", line)):
            found.add(m.group(1))
    return found


def pointers(text: str) -> list[tuple[str, str]]:
    """Every (doc, heading) a text points to, read across line breaks and comment marks."""
    flat = re.sub(r"\s*\n\s*(?:#:? ?)?", " ", text)
    return [
        (m["doc"], heading)
        for m in POINTER.finditer(flat)
        for heading in re.findall(r'"([^"]+)"', m["headings"])
        if not heading.startswith("<")  # a placeholder, as in CONTRIBUTING.md's example
    ]


def names(known: set[str], pointed: str) -> bool:
    """Whether ``pointed`` names one of the headings ``known``: the whole heading, or its
    subject before a colon, semicolon or comma (how a long decisions entry is cited)."""
    return any(h == pointed or (h.startswith(pointed) and h[len(pointed)] in ":;,") for h in known)


def test_pointers_are_read_across_lines_and_lists() -> None:
    text = """
        # Merged (docs/protocols.md, "Traps" and
        # "Stop reasons"; CONTRIBUTING.md, "Commits", "The gates", and "Setting up").
        #: (`docs/decisions.md`, "<entry>")
    """
    assert pointers(text) == [
        ("protocols.md", "Traps"),
        ("protocols.md", "Stop reasons"),
        ("CONTRIBUTING.md", "Commits"),
        ("CONTRIBUTING.md", "The gates"),
        ("CONTRIBUTING.md", "Setting up"),
    ]
    assert names({"Shared limits: our own Lua script"}, "Shared limits")
    assert not names({"Shared limits: our own Lua script"}, "Shared")


def test_nothing_points_outside_the_repository() -> None:
    found = [
        f"{path}:{number}: {line.strip()}"
        for path, text in _texts()
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_section_numbers_are_external_standards_only() -> None:
    found = [
        f"{path}:{number}: {line.strip()}"
        for path, text in _texts()
        if path.suffix == ".py"
        for number, line in enumerate(text.splitlines(), 1)
        if line.count(SECTION) != len(STANDARD_SECTIONS.findall(line))
    ]
    assert found == []


def test_pointers_name_headings_that_exist() -> None:
    docs = [*(ROOT / "docs").glob("*.md"), ROOT / "CONTRIBUTING.md", ROOT / "README.md"]
    known = {doc.name: headings(doc) for doc in docs}
    pointed = [(path, *pointer) for path, text in _texts() for pointer in pointers(text)]
    in_src = [p for p in pointed if p[0].parts[0] == "src"]
    assert len(in_src) > 100  # the rule still finds the source's pointers
    wrong = [
        f"{path}: {doc}, {h!r}" for path, doc, h in pointed if not names(known.get(doc, set()), h)
    ]
    assert wrong == []
