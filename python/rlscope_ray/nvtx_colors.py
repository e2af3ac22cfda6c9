"""Colour names for the `nvtx` package that never fail.

With a tool attached (this collector), the `nvtx` package turns a range's
colour name into ARGB; without matplotlib it knows 11 names and raises
``TypeError: Invalid color brown`` for any other, so attaching the profiler
would crash a host that names colours freely (verl's ``marked_timer`` uses
"brown", "olive", "pink"). Without a tool the package never looks at the
colour. ``make_colour_names_safe()`` replaces the package's name table with
one that knows every name: matplotlib's reading when matplotlib is there,
else the common X11/CSS names below, else a stable colour made from the name.
Colours are only drawn, never measured: a wrong shade costs nothing.
"""
from __future__ import annotations

import zlib
from typing import Any

# CSS colour names (a subset: the ones range colours are commonly given).
_CSS = {
    "black": 0x000000, "gray": 0x808080, "grey": 0x808080, "silver": 0xC0C0C0, "brown": 0xA52A2A,
    "maroon": 0x800000, "olive": 0x808000, "lime": 0x00FF00, "teal": 0x008080, "navy": 0x000080,
    "magenta": 0xFF00FF, "fuchsia": 0xFF00FF, "pink": 0xFFC0CB, "gold": 0xFFD700, "violet": 0xEE82EE,
    "indigo": 0x4B0082, "salmon": 0xFA8072, "coral": 0xFF7F50, "tan": 0xD2B48C, "khaki": 0xF0E68C,
    "beige": 0xF5F5DC, "turquoise": 0x40E0D0, "crimson": 0xDC143C, "orchid": 0xDA70D6, "lavender": 0xE6E6FA,
    "skyblue": 0x87CEEB, "steelblue": 0x4682B4, "darkred": 0x8B0000, "darkblue": 0x00008B,
    "lightblue": 0xADD8E6, "lightgreen": 0x90EE90, "darkorange": 0xFF8C00, "chocolate": 0xD2691E,
}


class _EveryName(dict):
    """The package's table (``color in table``, then ``table[color]``),
    answering for every name."""

    def __contains__(self, key: object) -> bool:
        return key is None or isinstance(key, str) or dict.__contains__(self, key)

    def __missing__(self, key: Any) -> int:
        value = _lookup(str(key))
        self[key] = value
        return value


def _lookup(name: str) -> int:
    try:
        import matplotlib.colors  # type: ignore[import-not-found]

        rgba = matplotlib.colors.to_rgba(name)
        return int(matplotlib.colors.to_hex((rgba[3], rgba[0], rgba[1], rgba[2]), keep_alpha=True)[1:], 16)
    except Exception:  # noqa: BLE001 - no matplotlib, or a name it does not know either
        pass
    key = name.lower().replace(" ", "").replace("_", "")
    if key in _CSS:
        return 0xFF000000 | _CSS[key]
    return 0xFF000000 | (zlib.crc32(name.encode()) & 0xFFFFFF)  # stable: the same name, the same colour


def make_colour_names_safe() -> bool:
    """Installs the table in the `nvtx` package if it is importable; True
    when it is in place. Idempotent."""
    try:
        from nvtx import colors  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - no `nvtx` package: nothing to make safe
        return False
    table = getattr(colors, "_NVTX_COLORS", None)
    if isinstance(table, _EveryName):
        return True
    if not isinstance(table, dict) or not hasattr(colors, "color_to_hex"):
        return False  # the package changed: leave it as it is
    colors._NVTX_COLORS = _EveryName(table)
    cache_clear = getattr(colors.color_to_hex, "cache_clear", None)
    if cache_clear is not None:
        cache_clear()
    return True
