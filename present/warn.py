# SPDX-License-Identifier: GPL-2.0-only
"""What a record itself warns of, on stderr: apart from the tables (and
rich), which `qprof run --json` neither prints nor imports."""

import sys


def record_warnings(rec: dict) -> list:
    """What a record itself warns of, for stderr: a link the emulation held
    back (link.saturation.warning); a mix's bulk flows that verified no
    byte in the window (mix.starved)."""
    s = (rec.get("link") or {}).get("saturation") or {}
    out = [s["warning"]] if s.get("warning") else []
    mix = rec.get("mix") or {}
    flows = {f["flow"]: f for f in mix.get("flows", [])}
    for i in mix.get("starved") or []:
        out.append(
            f"flow {i} ({flows[i]['stack']}) verified no byte in the {rec['window_s']:.3g} s window: "
            "starved by the flows beside it (a longer --duration gives each its share, or shows it never gets one)"
        )
    return out


def warn_record(rec: dict) -> None:
    for w in record_warnings(rec):
        print(f"qprof: warning: run {rec.get('id')}: {w}.", file=sys.stderr, flush=True)
