"""Build frozen, typed dataclasses from YAML mappings, validating as we go.

Every config in mtdnn (task definitions, run configs) goes through :func:`build`, so
unknown keys, wrong types and out-of-range values all fail the same way: with an error
that names the file, the dotted key, what was found and what is allowed.

A field may carry ``metadata={"check": (predicate, "what is allowed")}`` for range checks.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, Literal, TypeVar, Union

import yaml

from mtdnn.errors import MtdnnError, did_you_mean
from mtdnn.files import read_text

T = TypeVar("T")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin is dict:
        return f"a mapping of {_type_name(typing.get_args(tp)[1])}"
    if tp is type(None):
        return "null"
    if dataclasses.is_dataclass(tp):
        return f"a mapping with keys {', '.join(f.name for f in dataclasses.fields(tp))}"
    return {str: "a string", int: "an integer", float: "a number", bool: "true/false"}.get(
        tp, getattr(tp, "__name__", str(tp))
    )


def _convert(tp: Any, value: Any, source: str | Path | None, key: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def fail() -> typing.NoReturn:
        raise MtdnnError(
            f"found {value!r} ({type(value).__name__}), expected {_type_name(tp)}",
            file=source,
            key=key,
            allowed=_type_name(tp) if origin is Literal else None,
        )

    if tp is Any:  # free-form (validated later by whoever reads it)
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _convert(arg, value, source, key)
            except MtdnnError:
                if len([a for a in args if a is not type(None)]) == 1:
                    raise
        fail()
    if origin is Literal:
        if value in args:
            return value
        raise MtdnnError(f"unknown value {value!r}{did_you_mean(value, args)}", file=source,
                         key=key, allowed=", ".join(map(str, args)))
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            fail()
        return tuple(_convert(args[0], v, source, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            fail()
        return {str(k): _convert(args[1], v, source, f"{key}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            fail()
        return build(tp, value, source=source, prefix=key)
    if tp in (bool, float, int, str):
        return _scalar(tp, value, source, key, fail)
    raise TypeError(f"schema: unsupported field type {tp!r} for {key}")


def _scalar(tp: type, value: Any, source: str | Path | None, key: str,
            fail: typing.Callable[[], typing.NoReturn]) -> Any:
    """A YAML scalar as ``tp``: an int is a float, a number written as a string (YAML 1.1
    reads 3e-5 so) is one too, and a boolean is not a string (``yes``/``no``)."""
    if tp is bool and isinstance(value, bool):
        return value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            raise MtdnnError(
                f"found {value!r} (a boolean: YAML reads unquoted yes/no/on/off/true/false as "
                "booleans), expected a string", file=source, key=key,
                allowed="quote it, e.g. labels: ['yes', 'no']")
    fail()


def nearest_key(word: str, cls: type, hidden: tuple[str, ...] = ()) -> str:
    """`` (did you mean 'x'?)`` for the key of ``cls`` nearest ``word``: a field, a field of
    one of its sections (``optimizer.lr`` for ``lr``), or one a field is also known by in
    the ecosystem (``learning_rate``: its ``aliases``)."""
    spellings: dict[str, str] = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.name in hidden:
            continue
        for spelling in (field.name, *field.metadata.get("aliases", ())):
            spellings.setdefault(spelling, field.name)
        section = field.default if field.default is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(section):
            for sub in dataclasses.fields(section):
                for spelling in (sub.name, *sub.metadata.get("aliases", ())):
                    spellings.setdefault(spelling, f"{field.name}.{sub.name}")
    import difflib

    close = difflib.get_close_matches(str(word), list(spellings), n=1, cutoff=0.6)
    return f" (did you mean '{spellings[close[0]]}'?)" if close else ""


def build(cls: type[T], data: dict[str, Any] | None, *, source: str | Path | None = None,
          prefix: str = "", hidden: tuple[str, ...] = ()) -> T:
    """Build dataclass ``cls`` from ``data``, rejecting unknown keys and wrong types.

    Missing keys take the field's default; a field without a default is required.
    ``hidden`` fields are filled by the caller and not offered to the user.
    """
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise MtdnnError(f"expected a mapping, found {type(data).__name__}", file=source,
                         key=prefix or None)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        offered = [f for f in fields if f not in hidden]
        raise MtdnnError(f"unknown key '{unknown[0]}'{nearest_key(unknown[0], cls, hidden)}",
                         file=source,
                         key=f"{prefix}.{unknown[0]}" if prefix else unknown[0],
                         allowed=", ".join(offered))
    values = {}
    for name, field in fields.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in data:
            no_default = field.default is dataclasses.MISSING
            if no_default and field.default_factory is dataclasses.MISSING:
                raise MtdnnError("required key is missing", file=source, key=key,
                                 allowed=_type_name(hints[name]))
            continue
        value = _convert(hints[name], data[name], source, key)
        check = field.metadata.get("check")
        if check is not None and value is not None and not check[0](value):
            raise MtdnnError(f"value {value!r} is out of range", file=source, key=key,
                             allowed=check[1])
        values[name] = value
    return cls(**values)


def to_dict(obj: Any) -> Any:
    """Plain-data (YAML/JSON-ready) view of a dataclass, tuples turned into lists."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise MtdnnError(f"duplicate key '{key}' (first at line {seen[key]})",
                             file=loader.name, line=key_node.start_mark.line + 1)
        seen[key] = key_node.start_mark.line + 1
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: str | Path) -> Any:
    """Parse a YAML file strictly; syntax errors and duplicate keys name file and line."""
    path = Path(path)
    text = read_text(path)
    loader = _StrictLoader(text)
    loader.name = str(path)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        raise MtdnnError(f"invalid YAML: {getattr(error, 'problem', error)}", file=path,
                         line=mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()
