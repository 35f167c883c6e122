"""The arguments of the server's commands, typed: one attrs class per shape, structured with cattrs from the one
JSON object the client sends (`arguments: [{...}]`). A wrong argument is one line for the user naming the field
and what it must be; keys a command does not know are ignored (a newer client may send more).

Numbers are numbers (a JSON integer, or its digits as a string), never booleans; strings are strings, never
numbers turned into text.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
import cattrs

from ..config import STRATEGIES

T = TypeVar("T")


class ArgumentError(ValueError):
    """A command's argument is not what the command takes; the message is for users."""


def _int(value: Any, _: type) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise TypeError(f"a whole number, got {value!r}")


def _str(value: Any, _: type) -> str:
    if isinstance(value, str):
        return value
    raise TypeError(f"a string, got {value!r}")


_converter = cattrs.Converter(forbid_extra_keys=False)
_converter.register_structure_hook(int, _int)
_converter.register_structure_hook(str, _str)


def _nonempty(_: Any, attribute: attrs.Attribute, value: str) -> None:
    if not value:
        raise ValueError(f"'{attribute.name}' must not be empty")


@attrs.frozen
class Target:
    """A module of a document: `{uri, module}`, or `{uri, line}` (0-based) for the module containing the line."""
    uri: str = attrs.field(validator=_nonempty)
    module: str | None = None
    line: int | None = None

    def __attrs_post_init__(self) -> None:
        if not self.module and self.line is None:
            raise ValueError("expected 'module' or 'line'")


@attrs.frozen
class JobArgs(Target):
    """A job command's argument: the target and, for generate, the strategy the client picked."""
    strategy: str | None = attrs.field(default=None, converter=lambda v: v or None)

    @strategy.validator
    def _known(self, _: attrs.Attribute, value: str | None) -> None:
        if value is not None and value not in STRATEGIES:
            raise ValueError(f"unknown strategy {value!r} (one of: {', '.join(STRATEGIES)})")


@attrs.frozen
class CancelArgs:
    """`{jobId}`; without one, the command's argument is a Target whose jobs are all cancelled."""
    jobId: int | None = None  # noqa: N815 - the wire's name


@attrs.frozen
class ModuleAtArgs:
    """`{uri, line}`: which module a command at that line acts on (no line: the file's modules only)."""
    uri: str = attrs.field(validator=_nonempty)
    line: int | None = None


@attrs.frozen
class AcceptArgs:
    """`{uri, module, candidate}`: put candidate `candidate` of `module` in place."""
    uri: str = attrs.field(validator=_nonempty)
    module: str = attrs.field(validator=_nonempty)
    candidate: int


@attrs.frozen
class ModuleArgs:
    """`{uri, module}`."""
    uri: str = attrs.field(validator=_nonempty)
    module: str = attrs.field(validator=_nonempty)


def parse(cls: type[T], args: tuple[Any, ...]) -> T:
    """`cls` from a command's arguments: `[{...}]` (or the object nested once more, as some clients send it)."""
    arg: Any = args[0] if args else None
    if isinstance(arg, list) and len(arg) == 1:
        arg = arg[0]
    if not isinstance(arg, dict):
        raise ArgumentError(f"expected one argument object with {_fields(cls)}")
    try:
        return _converter.structure(arg, cls)
    except cattrs.ClassValidationError as e:
        raise ArgumentError(_one_line(e, cls)) from None
    except (TypeError, ValueError) as e:  # a validator or __attrs_post_init__ of the class itself
        raise ArgumentError(str(e)) from None


def _fields(cls: type) -> str:
    return "{" + ", ".join(a.name for a in attrs.fields(cls)) + "}"


def _one_line(error: cattrs.ClassValidationError, cls: type) -> str:
    """The first thing wrong, with the field it is about: "'candidate': expected a whole number, got 'x'"."""
    with_notes, others = error.group_exceptions()
    for exc, note in with_notes:
        name = getattr(note, "name", "?")
        if isinstance(exc, KeyError):
            return f"missing {name!r} in {_fields(cls)}"
        return f"{name!r}: expected {exc}" if isinstance(exc, TypeError) else f"{name!r}: {exc}"
    return str(others[0]) if others else str(error)
