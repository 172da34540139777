"""The TOML reader's typed table: values by type, errors that name their path, unknown keys.

Theory of operation: `Table` wraps one TOML table (a dict) and the path it sits at
(`config.toml: cluster`); each typed getter checks the value's type and range and raises
`ConfigError` naming the key's path, and remembers the key as used, so `done()` reports every
key nobody read (a misspelt key is an error, not a silent default). `tables` and `table` take
an array of tables or a table out of a parsed document. Used by `configfile.py` and the
readers of sections with modules of their own (`authconfig.py`, `clusterconfig.py`).
"""

from __future__ import annotations

from typing import Any

from ringmq.server.configspec import ConfigError

__all__ = ["Table", "table", "tables"]


class Table:
    """Typed access to one TOML table that remembers which keys were used."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self._data = data
        self.where = where
        self._used: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self._data

    def value(self, key: str, types: tuple[type, ...], what: str) -> Any:
        self._used.add(key)
        if key not in self._data:
            return None
        value = self._data[key]
        # bool is an int subclass; a boolean where a number is expected is a mistake
        if isinstance(value, bool) and bool not in types:
            raise ConfigError(f"{self.where}.{key}: expected {what}, got a boolean")
        if not isinstance(value, types):
            raise ConfigError(f"{self.where}.{key}: expected {what}, got {type(value).__name__}")
        return value

    def has_any(self, keys: tuple[str, ...]) -> bool:
        """Whether any of `keys` is set (marks none of them used)."""
        return any(k in self._data for k in keys)

    def opt_str(self, key: str, default: str | None = None) -> str | None:
        v = self.value(key, (str,), "a string")
        return default if v is None else str(v)

    def req_str(self, key: str) -> str:
        v = self.opt_str(key)
        if v is None:
            raise ConfigError(f"{self.where}: missing required key {key!r}")
        return v

    def opt_int(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int = 0,
        maximum: int | None = None,
    ) -> int | None:
        v = self.value(key, (int,), "an integer")
        if v is None:
            return default
        if v < minimum:
            raise ConfigError(f"{self.where}.{key}: must be >= {minimum}, got {v}")
        if maximum is not None and v > maximum:
            raise ConfigError(f"{self.where}.{key}: must be <= {maximum}, got {v}")
        return int(v)

    def opt_float(self, key: str) -> float | None:
        v = self.value(key, (int, float), "a number")
        return None if v is None else float(v)

    def opt_bool(self, key: str, default: bool | None = None) -> bool | None:
        v = self.value(key, (bool,), "a boolean")
        return default if v is None else bool(v)

    def table(self, key: str) -> dict[str, Any]:
        v = self.value(key, (dict,), "a table")
        return {} if v is None else dict(v)

    def str_list(self, key: str) -> tuple[str, ...]:
        v = self.value(key, (list,), "a list of strings")
        if v is None:
            return ()
        if not all(isinstance(x, str) for x in v):
            raise ConfigError(f"{self.where}.{key}: expected a list of strings")
        return tuple(v)

    def done(self) -> None:
        unknown = sorted(set(self._data) - self._used)
        if unknown:
            raise ConfigError(f"{self.where}: unknown key(s) {', '.join(map(repr, unknown))}")


def tables(doc: dict[str, Any], key: str, where: str) -> list[Table]:
    raw = doc.get(key, [])
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        raise ConfigError(f"{where}: {key!r} must be an array of tables ([[{key}]])")
    return [Table(x, f"{where}: {key}[{i}]") for i, x in enumerate(raw)]


def table(doc: dict[str, Any], key: str, where: str) -> Table | None:
    raw = doc.get(key)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {key!r} must be a table ([{key}])")
    return Table(raw, f"{where}: {key}")
