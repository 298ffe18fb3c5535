"""The kernel's own UDP counters (/proc/net/snmp, "Udp:" lines) in a
side's network namespace: what the stack dropped, as a second instrument
beside the workload's sequence numbers."""
import subprocess
from typing import Dict, Optional

from .topology import Endpoint


def parse_udp(text: str) -> Dict[str, int]:
    """The Udp header line and value line of /proc/net/snmp as a dict."""
    rows = [line.split()[1:] for line in text.splitlines() if line.startswith("Udp:")]
    if len(rows) < 2:
        return {}
    return {k: int(v) for k, v in zip(rows[0], rows[1])}


def read_udp(endpoint: Endpoint) -> Optional[Dict[str, int]]:
    r = subprocess.run(endpoint.command(["cat", "/proc/net/snmp"]), capture_output=True, text=True)
    return parse_udp(r.stdout) if r.returncode == 0 else None
