"""Parsing option values given as text (``--set name=value``) or YAML, and coercing them to declared types."""

import os
import types
import typing

from knowledge_lm.core.errors import KlmError


def parse_bool(value) -> bool:
    """A YAML boolean, or ``--set name=true|false`` (also 1/0, yes/no)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(value)


def is_union(expected) -> bool:
    return isinstance(expected, types.UnionType) or typing.get_origin(expected) is typing.Union


def coerce_option(value, expected, *, ints_as_floats: bool = False):
    """``value`` (a YAML value, or a string from ``--set``) as the declared type ``expected``, else ValueError.

    The one rule every ``from_dict`` coerces with: a boolean through ``parse_bool``; a number from a number or its
    text, never from a boolean, and an int field refuses a float; an int given for a float field stays an int, or
    becomes ``float(x)`` with ``ints_as_floats`` (training settings: their stored values are floats); a string as it
    is (a YAML number written for a text field, e.g. ``precision: 16``, or a path: its text); a mapping for ``dict``; a
    string or a list of strings for ``tuple[str, ...]``; ``None`` for ``None``; a ``Literal`` one of its values; a
    union its first member the value fits."""
    if is_union(expected):
        for member in typing.get_args(expected):
            try:
                return coerce_option(value, member, ints_as_floats=ints_as_floats)
            except ValueError:
                pass
        raise ValueError(value)
    if typing.get_origin(expected) is typing.Literal:
        if value in typing.get_args(expected):
            return value
        raise ValueError(value)
    if expected is type(None):
        if value is None:
            return None
        raise ValueError(value)
    if expected is bool:
        return parse_bool(value)
    if expected in (int, float) and not isinstance(value, bool):
        if isinstance(value, int):
            return float(value) if expected is float and ints_as_floats else value
        if expected is float and isinstance(value, float):
            return value
        if isinstance(value, str):
            return expected(value)
    if expected is str and isinstance(value, (str, int, float, os.PathLike)) and not isinstance(value, bool):
        return value if isinstance(value, str) else str(value)
    if expected is dict and isinstance(value, typing.Mapping):
        return dict(value)
    if typing.get_origin(expected) is tuple:
        items = [value] if isinstance(value, str) else value
        if isinstance(items, (list, tuple)) and all(isinstance(item, str) for item in items):
            return tuple(items)
    raise ValueError(value)


def option_kinds(expected) -> str:
    """What values of the option type ``expected`` look like, in words (for error messages)."""
    if is_union(expected):
        return " or ".join(option_kinds(member) for member in typing.get_args(expected))
    if typing.get_origin(expected) is typing.Literal:
        return " or ".join(str(choice) for choice in typing.get_args(expected))
    return {
        bool: "a boolean",
        int: "a whole number",
        float: "a number",
        str: "a string",
        dict: "a mapping",
        type(None): "none",
        tuple: "a list of strings",
    }[typing.get_origin(expected) or expected]


def coerce_fields(cls, values: dict, refused, *, ints_as_floats: bool = False) -> dict:
    """``values`` (field name → value) each coerced to the dataclass ``cls``'s declared type (``coerce_option``);
    a value that fits none is a KlmError with the message ``refused(name, value, expected)``."""
    declared = typing.get_type_hints(cls)
    checked = {}
    for name, value in values.items():
        try:
            checked[name] = coerce_option(value, declared[name], ints_as_floats=ints_as_floats)
        except ValueError:
            raise KlmError(refused(name, value, declared[name])) from None
    return checked
