"""YAML read with bounded work (``_bounded_yaml.py``), and a document that remembers its lines."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import yaml

from styrmin_drivers._bounded_yaml import BoundedSafeLoader, YamlTooLarge


class YamlSyntaxError(ValueError):
    """The text is not one valid YAML document; ``line`` is 1-based when known.

    ``hint`` says what to do, unless the message already does (then it is empty: the document is
    valid YAML but past Styrmin's limits).
    """

    def __init__(self, message: str, line: int | None, hint: str = "fix the syntax") -> None:
        super().__init__(message)
        self.line = line
        self.hint = hint


@dataclass(frozen=True)
class DuplicateKey:
    """A key that appears twice in one mapping: PyYAML would silently keep the last."""

    loc: tuple[str | int, ...]
    line: int


@dataclass
class YamlSource:
    """One parsed YAML document: its data, and the nodes that hold each value's position."""

    data: Any
    root: yaml.Node | None
    duplicate_keys: list[DuplicateKey] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> YamlSource:
        """Parse ``text``, which must hold at most one YAML document.

        Raises:
            YamlSyntaxError: if ``text`` is not valid YAML or holds several documents.
        """
        loader = BoundedSafeLoader(text)
        try:
            with _yaml_errors():
                root = loader.get_single_node()
                data = loader.construct_document(root) if root is not None else None
        finally:
            loader.dispose()
        source = cls(data=data, root=root)
        if root is not None:
            source._find_duplicate_keys(root, ())
        return source

    def line_of(self, loc: Sequence[str | int], *, key: bool = False) -> int | None:
        """The 1-based line of the value at ``loc``, or of its nearest parent that exists.

        A mapping or list written under its key is placed at its key's line. With ``key``, the line
        of the key named by the last part of ``loc`` (where an unknown field is written).
        """
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            found = _child(node, part)
            if found is None:
                break
            key_node, node = found
            line = node.start_mark.line + 1
            if key_node is not None and (key or not isinstance(node, yaml.ScalarNode)):
                line = key_node.start_mark.line + 1
        return line

    def _find_duplicate_keys(self, node: yaml.Node, loc: tuple[str | int, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key_node, value_node in node.value:
                name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
                if name is not None and name in seen:
                    self.duplicate_keys.append(DuplicateKey((*loc, name), key_node.start_mark.line + 1))
                if name is not None:
                    seen.add(name)
                    self._find_duplicate_keys(value_node, (*loc, name))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                self._find_duplicate_keys(item, (*loc, index))


@contextmanager
def _yaml_errors() -> Iterator[None]:
    """Turn what PyYAML raises on bad input into :class:`YamlSyntaxError`, with the line."""
    try:
        yield
    except YamlTooLarge as error:
        mark = error.problem_mark
        raise YamlSyntaxError(
            error.problem or "too large", mark.line + 1 if mark else None, hint=""
        ) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or "invalid YAML"
        if error.context:
            problem = f"{problem} ({error.context})"
        raise YamlSyntaxError(problem, mark.line + 1 if mark else None) from None
    except yaml.YAMLError as error:
        raise YamlSyntaxError(str(error), None) from None
    except ValueError as error:  # e.g. an integer of more digits than Python converts
        raise YamlSyntaxError(str(error), None) from None


def _child(node: yaml.Node, part: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    """The (key, value) nodes of ``part`` in a mapping, or (None, item) in a list."""
    if isinstance(node, yaml.MappingNode):
        found = None
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                found = (key_node, value_node)
        return found
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None
