# SPDX-License-Identifier: GPL-2.0-only
"""click option types for durations, sizes and rates (the syntax: core/units.py)."""

import click

from qprof.units import parse_duration_s, parse_rate_bit, parse_size_bytes


def _flag(param, default: str) -> str:
    return param.opts[0] if param is not None and param.opts else default


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        return parse_duration_s(value, _flag(param, "duration"))


class Size(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        return parse_size_bytes(value, _flag(param, "size"))


class Rate(click.ParamType):
    name = "rate"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        return parse_rate_bit(value, _flag(param, "rate"))
