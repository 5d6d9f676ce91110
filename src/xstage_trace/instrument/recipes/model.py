"""What a recipe is: data naming the upstream sites (anchors) and the probe code inserted at each.

A recipe never carries upstream code. An anchor is a regular expression that finds one statement
by its shape in the user's tree, plus a short ``example`` of that statement (used only to name the
closest line when upstream drifted). The inserted code is ours: probe macros from
``<xstage/probe.cuh>`` and small adapter files under ``instrument/targets/<target>/files/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Where = Literal["before", "after", "replace"]


def shape(literal: str) -> str:
    """Regex for a literal statement that tolerates whitespace changes between tokens.

    ``shape("cute::tma_store_wait<0>();")`` matches ``cute::tma_store_wait< 0 >( );`` too: each
    token is escaped and runs of whitespace (or none) are allowed between tokens.
    """
    tokens = re.findall(r"\w+|[^\w\s]", literal)
    return r"\s*".join(re.escape(t) for t in tokens)


@dataclass(frozen=True)
class Anchor:
    """One insertion site.

    ``file``: glob relative to the source root; every matching file must contain the anchor
    ``count`` times. ``pattern``: regex (MULTILINE) searched in the file, from the end of the first
    match of ``after`` when given, up to the first match of ``until`` after that. ``where``: ``before``/``after`` insert whole lines before the
    first / after the last line of the match, indented like that line plus ``indent`` spaces;
    ``replace`` substitutes the match (or its named group ``at``, often empty: an inline
    insertion) with ``code`` (in a ``.py`` file the lines holding the match are rewritten and fenced
    as a block, Python having no inline comment). ``example``: the statement the pattern expects, for drift reports.
    """

    name: str
    file: str
    pattern: str
    where: Where
    code: str
    example: str
    after: str | None = None
    until: str | None = None
    count: int = 1
    indent: int = 0

    def __post_init__(self):
        if self.where not in ("before", "after", "replace"):
            raise ValueError(f"anchor {self.name}: where must be before, after or replace")
        re.compile(self.pattern, re.MULTILINE)
        for ctx in (self.after, self.until):
            if ctx is not None:
                re.compile(ctx, re.MULTILINE)


@dataclass(frozen=True)
class AddedFile:
    """A file of ours placed into the tree: ``source`` relative to the recipe's ``files`` folder
    (``instrument/targets/<target>/files/``) or the shipped probe header (``source="<xstage/probe.cuh>"``)."""

    dest: str
    source: str


@dataclass(frozen=True)
class Switch:
    """For builds that take no compiler flags (a JIT that hashes its headers): the probes are
    switched on or off by the text of one added header, which also changes the JIT cache key."""

    dest: str
    on_text: str
    off_text: str


@dataclass(frozen=True)
class Event:
    """An event id recorded by the probes; ``kind`` is ``span`` (begin/end) or ``mark``."""

    id: int
    name: str
    kind: Literal["span", "mark"]
    role: str
    payload: str = ""
    meaning: str = ""


@dataclass(frozen=True)
class Upstream:
    """An upstream commit the recipe was verified against."""

    repo: str
    commit: str
    date: str
    subject: str


@dataclass(frozen=True)
class Recipe:
    """A target: where to find it (``sentinel`` files prove the tree is the right project), what it
    records, where the probes go and how to build it. ``files``: the folder ``added`` sources are
    relative to (the target's ``files/``)."""

    name: str
    title: str
    architectures: tuple[str, ...]
    upstream: tuple[Upstream, ...]
    sentinel: tuple[str, ...]
    roles: tuple[str, ...]
    events: tuple[Event, ...]
    anchors: tuple[Anchor, ...]
    added: tuple[AddedFile, ...] = ()
    switch: Switch | None = None
    conflicts: tuple[str, ...] = ()
    flags: dict[str, str] = field(default_factory=dict)
    build_notes: str = ""
    buffer_plumbing: str = ""
    files: Path | None = None

    def __post_init__(self):
        names = [a.name for a in self.anchors]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"recipe {self.name}: duplicate anchor names {dup}")
