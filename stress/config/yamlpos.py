"""YAML loading that remembers where each value came from.

pydantic reports errors by path (``users.count``); users need the line. We compose the
YAML node tree once, build a ``path -> line`` map alongside the plain data, and reject
duplicate keys that PyYAML would otherwise silently collapse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[str | int, ...]
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (about 10x faster), else pure Python."""


@dataclass(slots=True)
class Located:
    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    duplicates: list[tuple[Path_, int]] = field(default_factory=list)

    def line_of(self, path: Path_) -> int | None:
        """Line of the deepest known prefix of ``path`` (1-based)."""
        for n in range(len(path), -1, -1):
            line = self.lines.get(tuple(path[:n]))
            if line is not None:
                return line
        return None


def load_located(text: str) -> Located:
    """Parse YAML text; raises ``yaml.YAMLError`` (with a mark) on bad syntax."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        out = Located(data=None)
        if node is None:
            return out
        _walk(node, (), out)
        out.data = loader.construct_document(node)  # the same tree: parsed once, not twice
        return out
    finally:
        loader.dispose()


def _walk(node: yaml.Node, path: Path_, out: Located) -> None:
    out.lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                out.duplicates.append((child, key_node.start_mark.line + 1))
            seen.add(key)
            out.lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, out)
            out.lines[child] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _walk(item, (*path, i), out)
