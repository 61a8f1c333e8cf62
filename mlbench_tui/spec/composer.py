"""The YAML composer specs are read with: YAML 1.2's core schema, a tree, within bounds.

ruamel's composer turns parser events into nodes; this one also refuses, each at its line and
without stopping at the first, what a spec cannot mean:

- a tag outside the core schema (``!!python/object``, ``!!binary``, ``!!set``, a local ``!tag``),
  or a core tag on a value it does not type (``!!int forty-two``): the node reads as nothing, so
  no other check judges it;
- an alias inside the node it names (``<<: *self``, ``a: &x [*x]``): a spec is a tree;
- a key written twice in one mapping, and a merge key (``<<``) of something not a mapping.

Implicit timestamps, which the core schema does not have, stay the strings written. It still
stops at the first node nested too deep or one too many (``TooComplex``), before building it.
Each node's path in the document is tracked so every problem names where it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ruamel.yaml.composer import Composer
from ruamel.yaml.error import MarkedYAMLError
from ruamel.yaml.events import AliasEvent, MappingStartEvent, ScalarEvent, SequenceStartEvent
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.tag import Tag

from mlbench_tui.spec.limits import MAX_YAML_DEPTH, MAX_YAML_NODES
from mlbench_tui.spec.reading import nesting_message

Loc = tuple[str | int, ...]

CORE = "tag:yaml.org,2002:"
SCALAR_TAGS = {
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "null": "null",
}
MERGE_TAG = CORE + "merge"
REFUSED_TAG = "tag:mlbench.dev,2026:refused"
"""The tag a refused node carries to the loader, which reads it as nothing."""


class TooComplex(MarkedYAMLError):
    """A document nested deeper, or holding more nodes, than a spec may."""


@dataclass(frozen=True)
class YamlProblem:
    """What a document may not hold, at ``loc`` (its path) and ``line``:``col``; ``refused``: the
    value there reads as nothing, so the loader skips every other check under it."""

    document: int
    loc: Loc
    line: int
    col: int
    message: str
    hint: str | None = None
    refused: bool = True


def shown_tag(tag: str) -> str:
    """A tag as written: ``!!int`` for the core schema's, the full tag otherwise."""
    return "!!" + tag[len(CORE) :] if tag.startswith(CORE) else tag


class SpecComposer(Composer):
    """ruamel's composer with the rules above; ``problems`` collects what it refused."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.warn_double_anchors = False  # redefining an anchor is valid YAML
        self.problems: list[YamlProblem] = []
        self.nodes = 0
        self.nesting = 0
        self.document = -1
        self._loc: Loc = ()
        self._open: list[str] = []  # anchors of the collections being composed

    # -- recording -------------------------------------------------------------------------

    def _problem(self, loc: Loc, mark: Any, message: str, hint: str | None, *, refused: bool = True) -> None:
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        self.problems.append(YamlProblem(self.document, loc, line, col, message, hint, refused))

    # -- documents and nodes ---------------------------------------------------------------

    def compose_document(self) -> Any:
        self.document += 1
        return super().compose_document()

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        loc = self._child_loc(parent, index)
        self.nodes += 1
        if self.nodes > MAX_YAML_NODES:
            raise TooComplex(
                problem=f"more than {MAX_YAML_NODES} YAML values in one file", problem_mark=event.start_mark
            )
        if isinstance(event, AliasEvent):
            if event.anchor in self._open:
                self.parser.get_event()
                self._problem(
                    loc,
                    event.start_mark,
                    f"alias *{event.anchor} is inside the node &{event.anchor} it names: a spec is a "
                    "tree, not a cycle",
                    "write the values out, or merge a mapping defined outside this one (<<: *other)",
                )
                return MappingNode(Tag(suffix=REFUSED_TAG), [], event.start_mark, event.end_mark)
            return super().compose_node(parent, index)
        collection = isinstance(event, MappingStartEvent | SequenceStartEvent)
        anchor = event.anchor if collection else None
        saved, self._loc = self._loc, loc
        self.nesting += 1
        try:
            if self.nesting > MAX_YAML_DEPTH:
                raise TooComplex(problem=nesting_message(), problem_mark=event.start_mark)
            explicit = self._check_tag(event, loc)
            if anchor is not None:
                self._open.append(anchor)
            node = super().compose_node(parent, index)
        finally:
            self.nesting -= 1
            self._loc = saved
            if anchor is not None and anchor in self._open:
                self._open.remove(anchor)
        if not explicit and isinstance(node, ScalarNode) and node.tag == CORE + "timestamp":
            node.tag = CORE + "str"  # the core schema has no timestamps: the text as written
        if isinstance(node, MappingNode):
            self._check_mapping(node, loc)
        return node

    def _child_loc(self, parent: Any, index: Any) -> Loc:
        if isinstance(parent, MappingNode):
            if index is None:  # a key: its problems are the mapping's
                return self._loc
            return (*self._loc, index.value if isinstance(index, ScalarNode) else "?")
        if isinstance(parent, SequenceNode) and isinstance(index, int):
            return (*self._loc, index)
        return self._loc if parent is not None else ()

    # -- tags --------------------------------------------------------------------------------

    def _check_tag(self, event: Any, loc: Loc) -> bool:
        """Whether ``event`` has an explicit tag; one the core schema does not allow (or not on
        this kind of node, or not for this value) is recorded and the node refused."""
        tag = getattr(event, "ctag", None)
        if tag is None or str(tag.value) == "!":
            return False
        written = str(tag.value)
        name = written[len(CORE) :] if written.startswith(CORE) else None
        kind = (
            "scalar"
            if isinstance(event, ScalarEvent)
            else "sequence"
            if isinstance(event, SequenceStartEvent)
            else "mapping"
        )
        if kind == "scalar" and name == "str":
            event.ctag = None  # plain text (a quoted scalar's implicit type is str)
            return True
        if kind == "scalar" and name in SCALAR_TAGS:
            typed = str(self.resolver.resolve(ScalarNode, event.value, (True, False)))
            if typed == written or (name == "float" and typed == CORE + "int"):
                return True
            message = f"{event.value!r} is not {SCALAR_TAGS[name]}, as its tag {shown_tag(written)} says"
            hint = "remove the tag, or write a value of that type"
        elif (kind, name) in (("mapping", "map"), ("sequence", "seq"), ("scalar", "merge")):
            return True
        elif name in (*SCALAR_TAGS, "map", "seq"):
            message = f"tag {shown_tag(written)} does not fit a {kind}"
            hint = "remove the tag"
        else:
            message = (
                f"unsupported YAML tag {shown_tag(written)!r}: a spec takes the YAML 1.2 core schema's "
                "tags only (!!str, !!int, !!float, !!bool, !!null, !!map, !!seq)"
            )
            hint = "remove the tag"
        self._problem(loc, event.start_mark, message, hint)
        event.ctag = Tag(suffix=REFUSED_TAG)
        return True

    # -- mappings ----------------------------------------------------------------------------

    def _check_mapping(self, node: MappingNode, loc: Loc) -> None:
        """Drop, with a problem each, every repeated key and every merge of a non-mapping."""
        first: dict[tuple[str, Any], ScalarNode] = {}
        kept: list[tuple[Any, Any]] = []
        for key, value in node.value:
            if isinstance(key, ScalarNode):
                merge = key.tag == MERGE_TAG
                ident = (str(key.tag), key.value)
                if ident in first:
                    earlier = first[ident].start_mark.line + 1
                    self._problem(
                        loc,
                        key.start_mark,
                        f"duplicate key {key.value!r} (first at line {earlier})",
                        "merge several mappings with one '<<: [*a, *b]'"
                        if merge
                        else "remove or merge the repeated key",
                        refused=False,
                    )
                    continue
                first[ident] = key
                if merge and not _mergeable(value):
                    what = (
                        "a scalar" if isinstance(value, ScalarNode) else "a list holding other than mappings"
                    )
                    self._problem(  # what the mapping holds is unknown: it is refused whole
                        loc,
                        value.start_mark,
                        f"'<<' merges a mapping or a list of mappings, got {what}",
                        "write '<<: *anchor' with the anchor of a mapping",
                    )
                    continue
            kept.append((key, value))
        node.value[:] = kept


def _mergeable(value: Any) -> bool:
    if isinstance(value, MappingNode):
        return True
    return isinstance(value, SequenceNode) and all(isinstance(item, MappingNode) for item in value.value)


def composer_for(problems: list[YamlProblem]) -> type[SpecComposer]:
    """A ``SpecComposer`` class whose instances record into ``problems`` (ruamel builds the
    composer itself from the class)."""

    class Recording(SpecComposer):
        def __init__(self, loader: Any = None) -> None:
            super().__init__(loader)
            self.problems = problems

    return Recording
