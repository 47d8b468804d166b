"""Checks for settings; a refusal is a ValueError naming the settings and their values."""

from __future__ import annotations


def ordered(
    low_name: str, low: float, high_name: str, high: float, *, strict: bool = False
) -> None:
    """Refuse ``low`` above ``high`` (with ``strict``: at or above it)."""
    if low > high or (strict and low == high):
        need = "below" if strict else "at most"
        raise ValueError(f"{low_name}={low!r} must be {need} {high_name}={high!r}")


def within(
    name: str, value: float, low: float, high: float = float("inf"), *, above_low: bool = False
) -> None:
    """Refuse ``value`` outside [``low``, ``high``] (with ``above_low``: (``low``, ``high``])."""
    if value < low or value > high or (above_low and value == low):
        bound = f"({low!r}, {high!r}]" if above_low else f"[{low!r}, {high!r}]"
        raise ValueError(f"{name}={value!r} is outside {bound}")
