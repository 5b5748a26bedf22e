"""Reading typed fields out of a config dict, with one clear error per bad field.

``Fields`` wraps one config mapping (the text model's), the file it came from and a list that
collects assumptions: every value taken from a library default rather than the file. It also
records every key a rule looked at (``read``), so the keys no rule interpreted can be found
afterwards (``kvplan.loaders.kv_keys``); a nested mapping read through ``sub`` is tracked the
same way under its own prefix.
"""

from __future__ import annotations

from typing import Any

from ..core.dtypes import canonical_dtype
from ..core.errors import ConfigError

_MISSING = object()

#: Upper bound on a layer count: guards list building against absurd values (1e30).
MAX_LAYERS = 100_000


#: the largest integer a config field may hold (a dimension, a count, a length): 2^40
MAX_INT = 2**40

class Fields:
    def __init__(self, config: dict, source: str, prefix: str = ""):
        self.config = config
        self.source = source
        self.prefix = prefix  # e.g. "text_config." for multimodal wrappers
        self.assumptions: list[str] = []
        self.read: set[str] = set()  # keys some rule looked at
        self.children: list[Fields] = []  # nested mappings read through ``sub``
        #: words that shape this family's cache beyond ``kv_keys.KV_WORDS`` (an adapter adds them)
        self.kv_words: frozenset[str] = frozenset()

    def get(self, key: str) -> Any:
        """The raw value (None when absent or null), recording that a rule looked at it."""
        self.read.add(key)
        return self.config.get(key)

    def present(self, key: str) -> bool:
        """Whether the key is written at all (an explicit null counts), recording the look."""
        self.read.add(key)
        return key in self.config

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def raw(self, key: str, default: Any = None) -> Any:
        value = self.get(key)
        return default if value is None else value

    def sub(self, key: str, value: dict | None = None) -> Fields:
        """Fields over the nested mapping at ``key`` (or ``value``, read from it), sharing this
        one's assumptions and tracked as a child."""
        child = Fields(self.mapping(key) if value is None else value, self.source,
                       f"{self.prefix}{key}.")
        child.assumptions = self.assumptions
        self.children.append(child)
        return child

    def all_fields(self) -> list[Fields]:
        """This mapping and every nested one read through ``sub``, depth first."""
        out = [self]
        for c in self.children:
            out += c.all_fields()
        return out

    def error(self, key: str, message: str) -> ConfigError:
        return ConfigError(message, source=self.source, field=self.prefix + key)

    def integer(self, *keys: str, default: Any = _MISSING, why: str = "", minimum: int = 1,
            maximum: int | None = None) -> int:
        """The first of ``keys`` present, as an integer >= ``minimum``.

        With no key present, ``default`` is used and recorded as an assumption (``why`` says
        whose default it is); with no default, the first key is reported missing. Two of the
        keys written with different values (two spellings of one setting) are an error.
        """
        given = [(k, self.get(k)) for k in keys if self.get(k) is not None]
        if len({repr(v) for _, v in given}) > 1:
            (k1, v1), (k2, v2) = given[0], next(g for g in given if repr(g[1]) != repr(given[0][1]))
            raise self.error(k2, f"{v2!r} disagrees with {self.prefix}{k1} = {v1!r} (two names of "
                             "one setting)")
        for key in keys:
            value = self.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.error(key, f"expected an integer, got {value!r}")
            if isinstance(value, float) and not value.is_integer():
                raise self.error(key, f"expected an integer, got {value!r}")
            if value < minimum:
                raise self.error(key, f"must be >= {minimum}, got {value!r}")
            if value > (maximum if maximum is not None else MAX_INT):
                raise self.error(key, f"must be <= {maximum if maximum is not None else MAX_INT:,}, "
                                 f"got {value!r}")
            return int(value)
        if default is _MISSING:
            names = " / ".join(self.prefix + k for k in keys)
            raise ConfigError(f"missing required field {names}", source=self.source,
                              field=self.prefix + keys[0])
        self.assume(f"{self.prefix}{keys[0]} = {default}" + (f" ({why})" if why else ""))
        return default

    def num_layers(self, *keys: str) -> int:
        """The decoder layer count (first of ``keys`` present), at most ``MAX_LAYERS``."""
        return self.integer(*(keys or ("num_hidden_layers",)), maximum=MAX_LAYERS)

    def index_list(self, key: str, num_layers: int) -> list[int] | None:
        """A list of layer indices, each an integer in ``0 .. num_layers - 1``."""
        values = self.array(key)
        if values is None:
            return None
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < num_layers:
                raise self.error(f"{key}[{i}]", f"expected a layer index 0..{num_layers - 1}, "
                                 f"got {v!r}")
        return values

    def layer_values(self, key: str, length: int, allowed: tuple, meaning: str) -> list:
        """A required list of one value per layer, each one of ``allowed`` (``meaning`` says
        what they stand for, for the error lines)."""
        values = self.array(key)
        if values is None:
            raise self.error(key, f"missing: {meaning} per layer")
        if len(values) != length:
            raise self.error(key, f"has {len(values)} entries for {length} layers")
        for i, v in enumerate(values):
            if isinstance(v, bool) or v not in allowed:
                raise self.error(f"{key}[{i}]", f"expected {meaning}, got {v!r}")
        return values

    def str_list(self, key: str, length: int) -> list[str] | None:
        """A list of ``length`` strings (one per layer)."""
        values = self.array(key)
        if values is None:
            return None
        if len(values) != length:
            raise self.error(key, f"has {len(values)} entries for {length} layers")
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise self.error(f"{key}[{i}]", f"expected a string, got {v!r}")
        return values

    def mapping(self, key: str) -> dict:
        """A nested object (empty when absent)."""
        value = self.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(key, f"expected an object, got {type(value).__name__}")
        return value

    def opt_int(self, key: str, minimum: int = 1, maximum: int | None = None) -> int | None:
        return self.integer(key, minimum=minimum, maximum=maximum) if self.has(key) else None

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def array(self, key: str) -> list | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.error(key, f"expected a list, got {type(value).__name__}")
        return value

    def dtype(self, *keys: str) -> str | None:
        for key in keys:
            value = self.get(key)
            if value is None:
                continue
            name = canonical_dtype(str(value))
            if name is None:
                raise self.error(key, f"unknown dtype {value!r}")
            return name
        return None

    def declared_dtypes(self, *keys: str) -> tuple[tuple[str, str], ...]:
        """(key, dtype) for each of ``keys`` the config sets (state-dtype declarations)."""
        return tuple((k, d) for k in keys if (d := self.dtype(k)) is not None)

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)
