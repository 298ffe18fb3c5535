# SPDX-License-Identifier: GPL-2.0-only
"""Durations, sizes and rates as users type them: 10s, 500ms, 250us, 2m;
64K, 1G; 2.5mbit, 800kbit (bits per second, as tc and netem write them).

Sizes use powers of two (K = 1024), as iperf3 and netperf do. Plain
parsers, for the CLI's option types and for `qprof compare --vary`.
"""

import re

from .errors import BadValue

# ASCII digits, at most 15 before the point: no option's value is longer,
# and float() makes infinity of enough of them.
_NUMBER = r"(\d{1,15}(?:\.\d+)?)"
_DURATION = re.compile(rf"\s*{_NUMBER}\s*(us|ms|s|m|min)?\s*", re.ASCII)
_DURATION_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, None: 1.0}
_SIZE = re.compile(rf"\s*{_NUMBER}\s*([KMGT]?)(i?B)?\s*", re.IGNORECASE | re.ASCII)
_SIZE_UNIT = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_RATE = re.compile(rf"\s*{_NUMBER}\s*(bit|kbit|mbit|gbit)\s*", re.IGNORECASE | re.ASCII)
_RATE_BIT = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def parse_duration_s(text: str, what: str = "duration") -> float:
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise BadValue(f"malformed {what} '{text}'; write it like 10s, 500ms or 2m.")
    return float(m.group(1)) * _DURATION_UNIT_S[m.group(2)]


def parse_size_bytes(text: str, what: str = "size") -> int:
    m = _SIZE.fullmatch(str(text))
    if not m:
        raise BadValue(f"malformed {what} '{text}'; write it like 65536, 64K, 100M or 1G.")
    value = float(m.group(1)) * _SIZE_UNIT[m.group(2).upper()]
    if value != int(value):
        raise BadValue(f"{what} '{text}' is not a whole number of bytes.")
    return int(value)


def parse_rate_bit(text: str, what: str = "rate") -> int:
    """Bits per second, written as tc writes them (decimal units)."""
    m = _RATE.fullmatch(str(text))
    if not m:
        raise BadValue(f"malformed {what} '{text}'; write it like 2.5mbit, 800kbit or 1gbit.")
    return int(round(float(m.group(1)) * _RATE_BIT[m.group(2).lower()]))


def rate_text(bit: int) -> str:
    """A rate as a user would write it: 2.5mbit."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bit >= scale:
            return f"{bit / scale:g}{unit}"
    return f"{bit}bit"
