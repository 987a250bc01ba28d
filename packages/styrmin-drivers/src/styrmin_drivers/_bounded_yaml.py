"""YAML read with bounded work; a light module (PyYAML only) so that the chart render process loads fast.

PyYAML shares the value of an alias (``*name``) with its anchor, so a few hundred bytes can stand
for billions of values, which every later walk over the data (duplicate keys, pydantic, JSON) pays
for; its scanner looks ahead past nested ``[``/``{`` in quadratic time and its composer recurses once
per level. :class:`BoundedSafeLoader` counts each value as often as aliases repeat it and refuses a
stream past its budget of values (``YAML_MAX_NODES`` by default) or ``YAML_MAX_DEPTH`` levels, while
scanning and composing, before any of that work.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from styrmin_drivers.limits import YAML_MAX_DEPTH, YAML_MAX_NODES


class YamlTooLarge(yaml.MarkedYAMLError):
    """The document holds more values, or deeper nesting, than Styrmin reads."""


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents past the node and depth limits while composing."""

    def __init__(self, stream: str, max_nodes: int = YAML_MAX_NODES) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values it stands for, aliases expanded
        self._budget = max_nodes  # values left for this stream, all its documents together
        self._max_nodes = max_nodes

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        # The scanner looks ahead past every "[" or "{" that may start a key, in quadratic time:
        # stop it at the depth limit, before the composer would.
        if self.flow_level >= YAML_MAX_DEPTH:
            raise YamlTooLarge(None, None, _too_deep(), self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def _next_mark(self) -> yaml.Mark:
        mark: yaml.Mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
        return mark

    def compose_document(self) -> yaml.Node | None:
        self._sizes = {}
        node: yaml.Node | None = super().compose_document()
        if node is not None:
            self._budget -= self._sizes[id(node)]
        self._sizes = {}
        return node

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._sizes:
                raise YamlTooLarge(
                    None,
                    None,
                    f"the alias *{event.anchor} is used inside the value it names; "
                    "a value cannot contain itself",
                    event.start_mark,
                )
            aliased: yaml.Node | None = super().compose_node(parent, index)
            return aliased
        self._depth += 1
        try:
            if self._depth > YAML_MAX_DEPTH:
                raise YamlTooLarge(None, None, _too_deep(), self._next_mark())
            composed = super().compose_node(parent, index)
            assert composed is not None
            node: yaml.Node = composed
        finally:
            self._depth -= 1
        size = 1
        if isinstance(node, yaml.SequenceNode):
            size += sum(self._sizes[id(item)] for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            size += sum(self._sizes[id(key)] + self._sizes[id(value)] for key, value in node.value)
        if size > self._budget:
            raise YamlTooLarge(
                None,
                None,
                f"the YAML stands for more than {self._max_nodes:,} values once its aliases (*name) "
                "are expanded; write the values out, or repeat fewer of them",
                node.start_mark,
            )
        self._sizes[id(node)] = size
        return node


def _too_deep() -> str:
    return f"lists and mappings are nested more than {YAML_MAX_DEPTH} deep; flatten them"


def load_all(text: str, max_nodes: int = YAML_MAX_NODES) -> Iterator[Any]:
    """Each YAML document in ``text``, with at most ``max_nodes`` values in all of them together.

    Raises:
        YamlTooLarge: past the limits (``problem_mark`` says where).
        yaml.YAMLError: if a document is not valid YAML.
        ValueError: for a value Python cannot hold (an integer of too many digits).
    """
    loader = BoundedSafeLoader(text, max_nodes)
    try:
        while loader.check_data():  # type: ignore[no-untyped-call]
            yield loader.get_data()  # type: ignore[no-untyped-call]
    finally:
        loader.dispose()
