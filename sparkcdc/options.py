"""Options as they arrive, as strings (Spark's ``.option()``, a pipeline YAML, a dict),
checked once against a spec and read through typed getters.

The source (``mysql/options.py``) and every sink (``sinks/<type>/config.py``) declare their
options as ``Opt`` specs and read them here, so a bad option reads alike wherever it is
given: one ``ConfigError`` that names the option (its ``key`` field too, for the YAML reader
to point at its line), what it accepts, and for an unknown name the closest known one.
Nothing downstream parses an option's string again.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sparkcdc.errors import ConfigError

REQUIRED = "\0required"  # an Opt default: the option must be given


@dataclass(frozen=True)
class Opt:
    """One option: its default (None: unset; ``REQUIRED``) and what it accepts, in words."""

    default: str | None
    accepts: str


def duration_seconds(value: str) -> float | None:
    """Seconds, from Flink-style durations: '30s', '500ms', '2min', '1h', or plain ms; None
    when malformed."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|min|m|h)?\s*", value)
    if not m:
        return None
    unit = m.group(2) or "ms"
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "sec": 1, "min": 60, "m": 60,
                                "h": 3600}[unit]


def size_bytes(value: str) -> int | None:
    """Bytes, from '64mb', '512kb', '1gb' or a plain number of bytes; None when malformed."""
    m = re.fullmatch(r"\s*(\d+)\s*(b|kb|k|mb|m|gb|g)?\s*", value.lower())
    if not m:
        return None
    unit = {"b": 1, "k": 1024, "kb": 1024, "m": 1024**2, "mb": 1024**2, "g": 1024**3,
            "gb": 1024**3}[m.group(2) or "b"]
    return int(m.group(1)) * unit


def as_text(value: Any) -> str:
    """An option's value as the string it stands for (YAML hands over booleans and lists)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def check_known(owner: str | None, spec: Mapping[str, Opt], key: str,
                prefixes: tuple[str, ...] = (), docs: str | None = None) -> None:
    """An option name the spec does not know fails with the closest one it does (and, for
    the rest, ``docs`` or the names it accepts)."""
    if key in spec or key == "type" or key.startswith(prefixes):
        return
    close = difflib.get_close_matches(key.lower(), [k.lower() for k in spec], n=1, cutoff=0.5)
    name = {k.lower(): k for k in spec}
    hint = f"did you mean '{name[close[0]]}'? " if close else ""
    rest = docs if docs else (f"accepted options: {', '.join(sorted(spec))}"
                              + (f"; and any '{prefixes[0]}*'" if prefixes else ""))
    raise ConfigError(f"unknown option '{key}'" + (f" for the {owner}" if owner else ""),
                      fix=(hint + rest) if not (close and docs) else hint.strip(), key=key)


class Options:
    """One owner's options (``owner``: 'delta sink'; None for the source, whose options are
    Spark's ``.option()``s), checked for their names at once and read by typed getters.

    ``fold_case``: names match whatever their case (Spark's options are case-insensitive);
    ``ignore``: names that are someone else's (Spark's ``load(path)``); ``prefixes``: groups
    of free-form names, kept apart in ``prefixed``; ``strict_flags``: a flag is ``true`` or
    ``false`` only (the source's), not also ``1``/``0``/``yes``/``no`` (the sinks')."""

    def __init__(self, owner: str | None, spec: Mapping[str, Opt], raw: Mapping[str, Any], *,
                 prefixes: tuple[str, ...] = (), fold_case: bool = False,
                 ignore: tuple[str, ...] = (), docs: str | None = None,
                 strict_flags: bool = False):
        self.owner = owner
        self.strict_flags = strict_flags
        self.spec = spec
        self.raw: dict[str, str] = {}
        self.prefixed: dict[str, dict[str, str]] = {p: {} for p in prefixes}
        canon = {k.lower(): k for k in spec} if fold_case else None
        for key, value in raw.items():
            key = str(key)
            if key == "type" or key.lower() in ignore:
                continue
            prefix = next((p for p in prefixes if key.startswith(p)), None)
            if prefix is not None:
                self.prefixed[prefix][key[len(prefix):]] = str(value)
                continue
            if canon is not None:
                key = canon.get(key.lower(), key)
            check_known(owner, spec, key, prefixes, docs)
            self.raw[key] = value if isinstance(value, str) else as_text(value)
        for key, opt in spec.items():
            if opt.default == REQUIRED and key not in self.raw:
                self._missing(key)

    # -- errors ---------------------------------------------------------------------------

    def _of(self, key: str) -> str:
        return f"option '{key}'" + (f" of the {self.owner}" if self.owner else "")

    def _accepts(self, key: str) -> str:
        return f"'{key}' accepts {self.spec[key].accepts}"

    def bad(self, key: str, why: str, fix: str | None = None) -> ConfigError:
        """The error for option ``key``: ``why`` it is wrong (with the value, where it
        helps), and what it accepts unless ``fix`` says better."""
        return ConfigError(f"{self._of(key)} {why}", fix=fix or self._accepts(key), key=key)

    def _missing(self, key: str):
        if self.owner:
            raise ConfigError(f"the {self.owner} needs the option '{key}'",
                              fix=self._accepts(key), key=key)
        raise ConfigError(f"option '{key}' is required",
                          fix=f"set .option('{key}', ...) to {self.spec[key].accepts}",
                          key=key)

    # -- getters --------------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        if key in self.raw:
            return self.raw[key]
        d = self.spec[key].default
        return None if d == REQUIRED else d

    def text(self, key: str) -> str | None:
        v = self.get(key)
        return v if v is None else v.strip() if key != "password" else v

    def required(self, key: str) -> str:
        v = self.get(key)
        if v is None or v == "":
            self._missing(key)
        assert v is not None
        return v

    def integer(self, key: str, lo: int | None = None, hi: int | None = None) -> int | None:
        v = self.get(key)
        if v is None:
            return None
        try:
            n = int(v.strip())
        except ValueError:
            raise self.bad(key, f"must be an integer, got {v!r}") from None
        if (lo is not None and n < lo) or (hi is not None and n > hi):
            raise self.bad(key, f"is out of range: {n}")
        return n

    def given(self, key: str) -> str:
        """``text`` of an option its spec always gives (``REQUIRED``, or a default), typed
        as the ``str`` it then is."""
        v = self.text(key)
        if v is None:  # a spec read as if it had a default it has not: a bug, not the user's
            raise KeyError(f"option '{key}' has no value and its spec no default")
        return v

    def given_integer(self, key: str, lo: int | None = None, hi: int | None = None) -> int:
        """``integer`` of an option its spec always gives, typed as the ``int`` it then is."""
        n = self.integer(key, lo, hi)
        if n is None:
            raise KeyError(f"option '{key}' has no value and its spec no default")
        return n

    def positive_number(self, key: str) -> float:
        v = self.get(key) or ""
        try:
            f = float(v)
        except ValueError:
            raise self.bad(key, f"must be a number, got {v!r}") from None
        if not f > 0:
            raise self.bad(key, f"must be positive, got {v!r}")
        return f

    def share(self, key: str) -> float:
        """A number in (0, 1]: a share of something's whole (a file's rows)."""
        f = self.positive_number(key)
        if f > 1:
            raise self.bad(key, f"must be at most 1 (a share of a file's rows), got {f}")
        return f

    def flag(self, key: str) -> bool:
        v = (self.get(key) or "").strip().lower()
        yes: tuple[str, ...] = ("true",)
        no: tuple[str, ...] = ("false",)
        if not self.strict_flags:  # the sinks take 1/0, yes/no and blank too, as they did
            yes, no = yes + ("1", "yes"), no + ("0", "no", "")
        if v in yes or v in no:
            return v in yes
        raise self.bad(key, f"must be true or false, got {v!r}")

    def names(self, key: str) -> tuple[str, ...]:
        v = self.get(key)
        if not v:
            return ()
        return tuple(p.strip() for p in v.split(",") if p.strip())

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        v = (self.get(key) or "").strip().lower()
        if v not in choices:
            close = difflib.get_close_matches(v, choices, n=1, cutoff=0.4)
            raise self.bad(key, f"must be one of {', '.join(choices)}, got {v!r}",
                           fix=f"use one of {', '.join(choices)}"
                               + (f" (did you mean '{close[0]}'?)" if close else ""))
        return v

    def duration(self, key: str) -> float:
        """Seconds (``duration_seconds``)."""
        v = self.get(key) or ""
        seconds = duration_seconds(v)
        if seconds is None:
            raise self.bad(key, f"has the malformed value {v!r}")
        return seconds

    def size(self, key: str) -> int:
        """Bytes (``size_bytes``)."""
        v = self.get(key) or ""
        n = size_bytes(v)
        if n is None:
            raise self.bad(key, f"has the malformed value {v!r}")
        return n

    def regex(self, key: str) -> str | None:
        v = self.get(key)
        if not v:
            return None
        try:
            re.compile(v)
        except re.error as e:
            raise self.bad(key, f"is not a valid regular expression: {v!r} ({e})",
                           fix="escape dots and other special characters, e.g. "
                               "'shop\\.orders'") from None
        return v
