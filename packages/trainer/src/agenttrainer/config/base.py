"""What every config shares: its keys, loading from a mapping or a YAML file, and its help.

A config is a dataclass whose fields carry their help once (``metadata["help"]``; a subclass that
only changes a default inherits it). Related fields may live together in a group, a dataclass of
their own (``OnlineRLConfig.sampling.temperature``); config files and flags still name every field
flat, by its own name (``temperature: 0.7``, ``--temperature 0.7``), so each field has one key.
A field holds a group when its metadata says so: ``field(default_factory=G, metadata={"group": G})``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agenttrainer.config.files import ConfigError, read_config_file

C = TypeVar("C", bound="Config")

# Errors echo only what looks like a field name or a short plain value, never a file's text.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_.+-]{1,32}")


def _shown(value: Any) -> str:
    """``value`` for an error message: short plain values as they are, anything else described."""
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, str) and _PLAIN_VALUE.fullmatch(value):
        return repr(value)
    size = f" of {len(value)} characters" if isinstance(value, str) else ""
    return f"a {type(value).__name__}{size}"


def _coerce(name: str, type_name: str, value: Any, source: str) -> Any:
    """Numbers written as strings (YAML 1.1 reads ``2e-5`` as text) become numbers."""
    for prefix, convert in (("float", float), ("int", int)):
        if type_name.startswith(prefix) and isinstance(value, str):
            try:
                return convert(value)
            except ValueError:
                raise ConfigError(f"{source}: {name} must be a number, got {_shown(value)}") from None
    if type_name.startswith("float") and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


@dataclass(frozen=True)
class Key:
    """One key of a config file, and one flag: the field it sets and what it says."""

    name: str
    group: str | None  # the config's attribute holding the field's group; None for a field of its own
    type: str
    default: Any
    help: str
    choices: Any = None  # () -> {choice: summary}, for a field whose values are a registry's names


def _metadata(owner: type, name: str) -> dict[str, Any]:
    """Field ``name``'s metadata, a subclass's over its bases' (an override that only sets a default keeps the help)."""
    merged: dict[str, Any] = {}
    for klass in reversed(owner.__mro__):
        found = getattr(klass, "__dataclass_fields__", {}).get(name)
        if found is not None:
            merged.update(found.metadata)
    return merged


@dataclass
class Config:
    """Base of every config: its flat keys, ``from_dict`` / ``from_yaml`` / ``to_dict`` and help."""

    @classmethod
    def flat_keys(cls) -> dict[str, Key]:
        """Every key a config file or the command line may set, in field order (a group's fields in its place)."""
        keys: dict[str, Key] = {}
        for f in dataclasses.fields(cls):
            inner = f.metadata.get("group")
            members = [(m, inner) for m in dataclasses.fields(inner)] if inner else [(f, cls)]
            for member, owner in members:
                if member.name in keys:
                    raise TypeError(f"{cls.__name__}: two fields named {member.name}")
                meta = _metadata(owner, member.name)
                default = member.default_factory() if member.default is dataclasses.MISSING else member.default
                group_name = f.name if inner else None
                keys[member.name] = Key(
                    member.name, group_name, str(member.type), default, meta.get("help", ""), meta.get("choices")
                )
        return keys

    @classmethod
    def field_help(cls) -> dict[str, str]:
        return {name: key.help for name, key in cls.flat_keys().items()}

    def value(self, name: str) -> Any:
        """The value of the field keyed ``name``, in its group or not."""
        key = self.flat_keys()[name]
        return getattr(self if key.group is None else getattr(self, key.group), name)

    @classmethod
    def from_dict(
        cls: type[C], values: dict[str, Any], *, source: str = "config", lines: dict[str, int] | None = None
    ) -> C:
        """A config from flat ``values``; ``lines`` (a key's line in ``source``) places the errors."""
        keys = cls.flat_keys()
        unknown = [k for k in values if k not in keys]
        if unknown:
            lines = lines or {}
            first = min((lines[k] for k in unknown if isinstance(k, str) and k in lines), default=None)
            where = source if first is None else f"{source}:{first}"
            shown = sorted(k for k in unknown if isinstance(k, str) and _IDENTIFIER.fullmatch(k))
            hidden = len(unknown) - len(shown)
            if not shown:
                raise ConfigError(f"{where}: {hidden} key(s) that are not {cls.__name__} field names")
            rest = f" and {hidden} key(s) that are not field names" if hidden else ""
            raise ConfigError(f"{where}: {len(unknown)} unknown {cls.__name__} field(s) {shown}{rest}")
        top: dict[str, Any] = {}
        groups: dict[str, dict[str, Any]] = {}
        for name, value in values.items():
            key = keys[name]
            target = top if key.group is None else groups.setdefault(key.group, {})
            target[name] = _coerce(name, key.type, value, source)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        try:
            for name, members in groups.items():
                top[name] = fields[name].metadata["group"](**members)
            return cls(**top)
        except TypeError as exc:
            raise ConfigError(f"{source}: {exc}") from None

    @classmethod
    def from_yaml(cls: type[C], path: str | Path | None = None, **overrides: Any) -> C:
        """Fields from a YAML mapping, then ``overrides`` (``None`` values are ignored)."""
        values, lines = read_config_file(path) if path is not None else ({}, {})
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values, source=str(path or "config"), lines=lines)

    def to_dict(self) -> dict[str, Any]:
        """Every field by its key (flat, as a config file writes it)."""
        groups = {f.name for f in dataclasses.fields(self) if "group" in f.metadata}
        flat: dict[str, Any] = {}
        for name, value in dataclasses.asdict(self).items():
            if name in groups:
                flat.update(value)
            else:
                flat[name] = value
        return flat
