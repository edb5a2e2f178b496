"""YAML to plain data for ``crank apply``: ``yaml.safe_load``'s answer, with less memory and time.

``yaml.safe_load`` is PyYAML's pure-Python loader; even its C variant
(``CSafeLoader``) first composes the whole document into a tree of node
objects (each scalar a node with two marks), and only then builds the values.
For a 10,000-operation file that tree is hundreds of megabytes and most of the
time (docs/performance.md, "Applying a large file"). ``load`` reads libyaml's
events and builds the values directly, so the only large thing alive is the
result.

It handles what operation files hold: block and flow mappings and sequences,
plain and quoted scalars resolved exactly as the safe loader resolves them
(its own resolver and constructors: null, bool, int, float, timestamp, str),
anchors and aliases. Anything else — an explicit non-standard tag, a merge key
(``<<``), a complex key, a second document — is handed to ``CSafeLoader``
(``SafeLoader`` without libyaml) from the start, so its answer and its errors
stay the safe loader's. A syntax error is libyaml's, the same error with the
same marks that the safe loader raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import yaml
from yaml import events
from yaml.nodes import ScalarNode

_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STR: Final = "tag:yaml.org,2002:str"
_MAP: Final = "tag:yaml.org,2002:map"
_SEQ: Final = "tag:yaml.org,2002:seq"
# Scalar tags built here through the safe loader's own constructors.
_SCALARS: Final = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp")
)


_NO_KEY: Final = object()  # a mapping waiting for its next key


class _Unsupported(Exception):
    """Something this loader leaves to the safe loader."""


def safe_load(data: str | bytes) -> Any:
    """What ``yaml.load(data, CSafeLoader)`` returns, or raises."""
    if _SafeLoader is yaml.SafeLoader:  # no libyaml: no event stream worth reading
        return yaml.load(data, Loader=_SafeLoader)  # noqa: S506 - the safe loader
    try:
        return _Builder(data).document()
    except _Unsupported:
        return yaml.load(data, Loader=_SafeLoader)  # noqa: S506 - the safe loader


class _Builder:
    def __init__(self, data: str | bytes) -> None:
        self.loader: Any = _SafeLoader(data)  # PyYAML's C parser is untyped
        self.anchors: dict[str, Any] = {}
        self.plain: dict[str, str] = {}  # plain scalar -> its resolved tag
        self.constructors: dict[Any, Callable[[Any, Any], Any]] = self.loader.yaml_constructors

    def document(self) -> Any:
        get = self.loader.get_event
        try:
            get()  # StreamStartEvent
            if isinstance(get(), events.StreamEndEvent):
                return None
            value = self._value(get())
            get()  # DocumentEndEvent
            if not isinstance(get(), events.StreamEndEvent):
                raise _Unsupported  # a second document: the safe loader refuses it
            return value
        finally:
            self.loader.dispose()

    def _value(self, event: events.Event) -> Any:
        """The value that starts with ``event``, built without recursion."""
        # Each open container: (the container, the key awaiting its value or None).
        stack: list[list[Any]] = []
        while True:
            if isinstance(event, events.ScalarEvent):
                value = self._scalar(event)
            elif isinstance(event, events.MappingStartEvent):
                self._check_tag(event, _MAP)
                value = {}
                self._remember(event, value)
                stack.append([value, _NO_KEY])
                event = self.loader.get_event()
                continue
            elif isinstance(event, events.SequenceStartEvent):
                self._check_tag(event, _SEQ)
                value = []
                self._remember(event, value)
                stack.append([value, _NO_KEY])
                event = self.loader.get_event()
                continue
            elif isinstance(event, events.MappingEndEvent | events.SequenceEndEvent):
                value = stack.pop()[0]
            elif isinstance(event, events.AliasEvent):
                if event.anchor not in self.anchors:
                    raise _Unsupported  # undefined: the safe loader says so
                value = self.anchors[event.anchor]
            else:
                raise _Unsupported
            if not stack:
                return value
            top = stack[-1]
            container = top[0]
            if isinstance(container, list):
                container.append(value)
            elif top[1] is _NO_KEY:
                if isinstance(value, dict | list):
                    raise _Unsupported  # a complex key: the safe loader refuses it
                top[1] = value
            else:
                container[top[1]] = value
                top[1] = _NO_KEY
            event = self.loader.get_event()

    def _scalar(self, event: events.ScalarEvent) -> Any:
        tag = event.tag
        if tag is None or tag == "!":
            if event.implicit[0]:  # plain: resolved by its text, as the safe loader does
                tag = self.plain.get(event.value)
                if tag is None:
                    tag = self.loader.resolve(ScalarNode, event.value, event.implicit)
                    self.plain[event.value] = tag
            else:
                tag = _STR
        if tag == _STR:
            value: Any = event.value
        elif tag in _SCALARS:
            node = ScalarNode(tag, event.value, style=event.style)
            value = self.constructors[tag](self.loader, node)
        else:
            raise _Unsupported  # merge keys, !!binary, custom tags...
        self._remember(event, value)
        return value

    def _check_tag(self, event: events.CollectionStartEvent, standard: str) -> None:
        if event.tag not in (None, "!", standard):
            raise _Unsupported

    def _remember(self, event: events.NodeEvent, value: Any) -> None:
        if event.anchor is not None:
            if event.anchor in self.anchors:
                raise _Unsupported  # a duplicate anchor: the safe loader refuses it
            self.anchors[event.anchor] = value
