"""How returns read in the lines a run prints: :func:`format_return` gives enough significant
digits for the value's scale and never shows a non-integer as a whole number (MiniGrid's 0.96
is "0.96", not "1.0").

Examples:
    >>> [format_return(r) for r in (0.96, 396.607, -22.25, -200.0, 0.99999, 5819.31)]
    ['0.96', '396.6', '-22.25', '-200.0', '0.99999', '5819.3']
"""

from __future__ import annotations

import math

__all__ = ["format_return"]


def format_return(value: float, digits: int = 4) -> str:
    """``value`` with ``digits`` significant digits and at least one decimal (trailing zeros
    dropped); a non-integer that would round to a whole number gets more decimals, so it
    never reads as one. A whole number keeps one decimal (``"-200.0"``); NaN and the
    infinities read ``"nan"``, ``"inf"``, ``"-inf"``.

    Examples:
        >>> format_return(0.6604166), format_return(1e-5), format_return(float("nan"))
        ('0.6604', '0.00001', 'nan')
    """
    value = float(value)
    if not math.isfinite(value):
        return str(value)
    if value == round(value):
        return f"{value:.1f}"
    decimals = max(1, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    while float(text) == round(float(text)) and decimals < 17:
        decimals += 1
        text = f"{value:.{decimals}f}"
    whole, _, fraction = text.partition(".")
    return f"{whole}.{fraction.rstrip('0') or '0'}"
