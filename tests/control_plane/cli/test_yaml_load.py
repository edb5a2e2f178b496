"""``crank apply``'s YAML reader answers and fails exactly as PyYAML's safe loader does."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from control_plane.cli.yaml_load import safe_load

ROOT = Path(__file__).resolve().parents[3]
SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

DOCUMENTS = {
    "scalars": """
        plain: text
        quoted: "123"
        single: '~'
        ints: [0, -12, 0x1F, 0o17, 1_000, +7]
        floats: [1.5, -2e3, .inf, -.Inf, 6.8523015e+5]
        bools: [true, False, yes, No, on, OFF]
        nulls: [~, null, Null, ]
        empty:
        date: 2001-12-14
        stamp: 2001-12-14t21:59:43.10-05:00
        tagged: [!!str 12, !!int "7", !!float "1", !!bool "true", ! 12]
        block: |
          line one
          line two
        folded: >-
          folded
          text
        "quoted key": 1
        ? explicit
        : key
        3: int key
        null: null key
    """,
    "anchors": """
        base: &base {a: 1, b: [1, 2]}
        again: *base
        list: &items [x, y]
        same: *items
        scalar: &s hello
        copy: *s
    """,
    "flow and block": """
        operations:
        - name: op
          input: {type: object, properties: {id: {type: string}}, required: [id]}
          request: {method: GET, url: "https://x.example/{id}"}
        agents: []
    """,
    "empty": "",
    "only a comment": "# nothing\n",
    "a bare scalar": "just text",
    "a bare list": "- 1\n- two\n",
    "merge keys (left to the safe loader)": """
        base: &b {a: 1, b: 2}
        merged:
          <<: *b
          c: 3
    """,
    "a value tag (left to the safe loader)": "key: !!binary aGVsbG8=\n",
}

INVALID = {
    "unclosed flow": "a: [1, 2\nb: 3\n",
    "bad indentation": "a:\n  b: 1\n c: 2\n",
    "tab": "a:\n\tb: 1\n",
    "undefined alias": "a: *nowhere\n",
    "duplicate anchor": "a: &x 1\nb: &x 2\n",
    "two documents": "a: 1\n---\nb: 2\n",
    "custom tag": "a: !thing 1\n",
    "complex key": "? [1, 2]\n: value\n",
    "merge of a scalar": "a: {<<: 1}\n",
}


def same(left: Any, right: Any) -> bool:
    """Equal, NaN included, and of the same types all the way down."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return list(left) == list(right) and all(same(left[k], right[k]) for k in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


@pytest.mark.parametrize("text", DOCUMENTS.values(), ids=DOCUMENTS.keys())
def test_documents_load_as_the_safe_loader_loads_them(text: str) -> None:
    assert same(safe_load(text), yaml.load(text, Loader=SAFE))  # noqa: S506


def test_the_demo_file_and_nan_load_as_the_safe_loader_loads_them() -> None:
    demo = (ROOT / "control_plane" / "demo" / "demo.yaml").read_text()
    assert same(safe_load(demo), yaml.load(demo, Loader=SAFE))  # noqa: S506
    assert math.isnan(safe_load("n: .nan")["n"])


def test_an_alias_is_the_same_object_as_its_anchor_as_with_the_safe_loader() -> None:
    loaded = safe_load("a: &x {k: [1]}\nb: *x\n")
    assert loaded["a"] is loaded["b"]


@pytest.mark.parametrize("text", INVALID.values(), ids=INVALID.keys())
def test_invalid_documents_fail_with_the_safe_loaders_error(text: str) -> None:
    with pytest.raises(yaml.YAMLError) as expected:
        yaml.load(text, Loader=SAFE)  # noqa: S506
    with pytest.raises(yaml.YAMLError) as got:
        safe_load(text)
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)
