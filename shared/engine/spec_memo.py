"""Remember what a pure check of an operation spec said, by the spec's content.

``validate_operation`` and ``lint_operation`` depend on nothing but the spec.
A CI pipeline applies the same file again and again, mostly unchanged, and
each apply checks every operation of it: a second apply of a 10,000-operation
file repeated ten thousand validations and lints whose answers the process
had already given (docs/architecture.md, "Apply in batches"). The key is a
128-bit BLAKE2b digest of the spec's JSON; the answer is an immutable tuple
handed out as a fresh list, so no caller can change what another receives.
Bounded, least recently used first out.
"""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

import msgspec

from shared.engine.spec import OperationSpec

T = TypeVar("T")
MAX_ENTRIES = 20_000  # two files of 10,000 operations; digests and small tuples

_encoder = msgspec.json.Encoder()


def memoized_by_spec(
    check: Callable[[OperationSpec], list[T]],
) -> Callable[[OperationSpec], list[T]]:
    """``check`` answered from memory for a spec with the same content as one before."""
    answers: OrderedDict[bytes, tuple[T, ...]] = OrderedDict()

    @functools.wraps(check)
    def remembered(spec: OperationSpec) -> list[T]:
        key = hashlib.blake2b(_encoder.encode(spec), digest_size=16).digest()
        answer = answers.get(key)
        if answer is None:
            answer = tuple(check(spec))
            answers[key] = answer
            if len(answers) > MAX_ENTRIES:
                answers.popitem(last=False)
        else:
            answers.move_to_end(key)
        return list(answer)

    return remembered
