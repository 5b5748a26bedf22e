"""Byte and token units, exact integer helpers and human formatting. Pure, no I/O."""

from __future__ import annotations

import math
from fractions import Fraction

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4

#: Token-count suffixes accepted on the command line: k = 1024 (as context lengths are quoted).
TOKEN_SUFFIXES = {"k": 1024, "m": 1024**2}
#: the longest context any command accepts (2^40 tokens): a bound stated before work starts
MAX_TOKENS = 2**40
#: the largest memory size any option accepts (1 PiB; one GPU holds far less)
MAX_BYTES = 2**50
#: the most digits (with the exponent added) a number on the command line or in a file may have:
#: larger values are refused before they are built (``1.0e40000000`` would take minutes)
MAX_DIGITS = 30


def _decimal(s: str) -> Fraction:
    """An exact decimal (``128``, ``54.84``, ``1.5e3``), refused past ``MAX_DIGITS`` before it
    is built. Raises ValueError."""
    mantissa, _, exponent = s.partition("e")
    if exponent:
        if not exponent.lstrip("+-").isdigit():
            raise ValueError(s)
        if len(exponent.lstrip("+-").lstrip("0")) > 4:  # "1e00004" is 1e4
            raise (ValueError(s) if exponent.startswith("-") else OverflowError(s))
        digits = len(mantissa.split(".")[0].lstrip("+-0")) + int(exponent)
    else:
        digits = len(mantissa.split(".")[0].lstrip("+-0"))
    if digits > MAX_DIGITS:
        raise OverflowError(s)
    return Fraction(s)


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def ceil_bytes(value: Fraction | int) -> int:
    """Round an exact byte count up to whole bytes (done once, at the end)."""
    return math.ceil(value)


def parse_tokens(text: str) -> int:
    """Parse a token count: ``4096``, ``4k`` (= 4096), ``32K``, ``128k``, ``1M`` (= 1048576).

    Raises ValueError with a short reason; callers attach the option name.
    """
    s = str(text).strip().lower().replace("_", "")
    if not s:
        raise ValueError("empty token count")
    mult = 1
    if s[-1] in TOKEN_SUFFIXES:
        mult = TOKEN_SUFFIXES[s[-1]]
        s = s[:-1]
    try:
        value = _decimal(s) * mult
    except OverflowError:
        raise ValueError(f"{str(text)[:40]!r} is too large a token count") from None
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{str(text)[:40]!r} is not a token count (use e.g. 4096, 4k, 128k, "
                         "1M)") from None
    if value.denominator != 1:
        raise ValueError(f"{text!r} is not a whole number of tokens")
    n = int(value)
    if n <= 0:
        raise ValueError(f"{text!r} must be a positive number of tokens")
    if n > MAX_TOKENS:
        raise ValueError(f"{str(text)[:40]!r} is over kvplan's bound of {MAX_TOKENS:,} tokens")
    return n


BYTE_SUFFIXES = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB, "kb": KB, "mb": MB,
                 "gb": GB, "tb": TB}


def parse_bytes(text: str) -> int:
    """Parse a byte size: ``58880000000``, ``54.84GiB`` (2^30), ``80GB`` (10^9), ``512MiB``.

    Fractional sizes are rounded down to whole bytes. Raises ValueError with a short reason.
    """
    s = str(text).strip().lower().replace("_", "").replace(" ", "")
    num = s.rstrip("kmgtib")
    suffix = s[len(num):]
    if suffix not in BYTE_SUFFIXES and suffix != "":
        raise ValueError(f"{text!r}: unknown unit {suffix!r} (use B, KiB, MiB, GiB, TiB, kB, MB, "
                         "GB or TB)")
    try:
        value = _decimal(num) * BYTE_SUFFIXES.get(suffix, 1)
    except OverflowError:
        raise ValueError(f"{str(text)[:40]!r} is too large a size") from None
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{str(text)[:40]!r} is not a size (use e.g. 54.84GiB, 80GB or a byte "
                         "count)") from None
    if value <= 0:
        raise ValueError(f"{text!r} must be a positive size")
    if value < 1:
        raise ValueError(f"{text!r} is less than one byte")
    if value > MAX_BYTES:
        raise ValueError(f"{str(text)[:40]!r} is over kvplan's bound of {MAX_BYTES:,} B (1 PiB)")
    return int(value)


def format_tokens(n: int) -> str:
    """``131072`` -> ``128k``; counts that are not multiples of 1024 stay as digits."""
    if n >= 1024**2 and n % (1024**2) == 0:
        return f"{n // 1024**2}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return str(n)


def format_bytes(n: int | Fraction, binary: bool = True) -> str:
    """Human form of a byte count, saying which unit family: ``GiB`` (2^30) or ``GB`` (10^9)."""
    value = float(n)
    if binary:
        units = [(TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")]
    else:
        units = [(TB, "TB"), (GB, "GB"), (MB, "MB"), (KB, "kB")]
    for size, name in units:
        if value >= size:
            return f"{value / size:.2f} {name}"
    return f"{value:.0f} B" if value == int(value) else f"{value:.2f} B"


def format_int(n: int | Fraction) -> str:
    """Exact byte count with thousands separators; fractions keep their exact form."""
    if isinstance(n, Fraction) and n.denominator != 1:
        whole = n.numerator // n.denominator
        return f"{whole:,} {n - whole}"
    return f"{int(n):,}"
