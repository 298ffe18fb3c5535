"""The options of one measured transfer, shared by `qprof run` and
`qprof compare`: click declarations and their mapping onto RunOptions."""
from dataclasses import replace

import click

from qprof.collectors import offload, perf, runner
from qprof.collectors.errors import BadValue
from qprof.units import Duration, Size

_defaults = runner.RunOptions()

# on/off and the send modes are checked by offload.plan, so a bad value
# gets qprof's one sentence and exit code like every other bad input.

# (decorator, RunOptions field or None) in the order `--help` shows them.
TRANSFER_OPTIONS = [
    click.option("--duration", "-d", "duration_s", type=Duration(), default="10s", show_default=True,
                 help="Length of the measured window (after warm-up)."),
    click.option("--bytes", "-b", "nbytes", type=Size(), default=None,
                 help="Send this many bytes per stream instead of for a duration (e.g. 1G); the window is "
                      "then the whole transfer, handshake included."),
    click.option("--warmup", "warmup_s", type=Duration(), default=None,
                 help="Time after the handshake left out of the window [default: 1s; not with --bytes]."),
    click.option("--streams", "-n", type=click.IntRange(1, 64), default=_defaults.streams, show_default=True,
                 help="Streams in the one connection."),
    click.option("--topology", type=click.Choice(runner.TOPOLOGIES), default=_defaults.topology, show_default=True,
                 help="Two network namespaces joined by veth, or the host loopback."),
    click.option("--port", "-p", type=click.IntRange(1, 65535), default=_defaults.port, show_default=True),
    click.option("--io-size", type=Size(), default=None,
                 help="Bytes per send request, a power of two from 1K to 1M [default: 64K for quic "
                      "(msquic's secnetperf), 128K for TCP (iperf3)]."),
    click.option("--exec-profile", type=click.Choice(runner.EXEC_PROFILES), default=_defaults.exec_profile,
                 show_default=True, help="msquic execution profile."),
    click.option("--tls", "tls_version", default=None, metavar="1.2|1.3",
                 help="tcp-tls, tcp-ktls: TLS version [default: 1.3]."),
    click.option("--cipher", default=None, metavar="NAME",
                 help="tcp-tls, tcp-ktls: OpenSSL cipher [default: AES-128-GCM, QUIC's AEAD]."),
    click.option("--sendfile", is_flag=True, help="tcp, tcp-ktls: the client sendfile()s its data (zero copy)."),
    click.option("--gso", default=None, metavar="on|off",
                 help="Segmentation offload. quic: msquic's UDP_SEGMENT (an interposer fails its start-up "
                      "probe; GRO follows); udp: --send-mode gso or sendmmsg; tcp stacks: TSO+GSO of the "
                      "veth pair [default: as the stack starts]."),
    click.option("--gro", default=None, metavar="on|off",
                 help="Receive coalescing. quic, udp: the receiver's UDP_GRO; tcp stacks: GRO of the veth "
                      "pair [default: as the stack starts]."),
    click.option("--send-mode", default=None, metavar="|".join(offload.UDP_SEND_MODES),
                 help="udp: one datagram per sendmsg, a batch per sendmmsg, or a batch per GSO sendmsg "
                      "[default: gso]."),
    click.option("--batch", type=click.IntRange(1, 1024), default=None,
                 help="udp: datagrams per sendmmsg or GSO send [default: the workload's, see README]."),
    click.option("--dgram-size", type=click.IntRange(16, 65507), default=None,
                 help="udp: UDP payload bytes per datagram [default: 1472, MTU 1500]."),
    click.option("--guest", is_flag=True,
                 help="Run the whole measurement in a QEMU guest with Debian's kernel (for kTLS); `make guest` first."),
    click.option("--probes", "probe_list", default=",".join(runner.PROBES), show_default=True,
                 help="eBPF probes to attach, comma-separated, or 'none'."),
    click.option("--sample-hz", type=click.IntRange(0, 20000), default=_defaults.sample_hz, show_default=True,
                 help="perf cpu-clock stack samples per CPU-second over the window (0: no stacks)."),
    click.option("--call-graph", default=None, metavar="|".join(perf.CALL_GRAPHS),
                 help=f"How perf walks user stacks: dwarf (from .eh_frame, complete through code without "
                      f"frame pointers such as OpenSSL's) or fp (frame pointers, smaller perf.data) "
                      f"[default: {perf.DEFAULT_CALL_GRAPH}]."),
    click.option("--keep-perf-data", is_flag=True, help="Keep perf.data in the run directory after folding."),
    click.option("--runs-dir", type=click.Path(file_okay=False), default=_defaults.runs_dir, show_default=True,
                 envvar="QPROF_RUNS_DIR", help="Where run directories are written."),
]

# click keyword -> RunOptions field, where they differ.
_FIELDS = {"nbytes": "bytes", "probe_list": "probes"}


def transfer_options(f):
    for opt in reversed(TRANSFER_OPTIONS):
        f = opt(f)
    return f


def to_run_options(stack: str, kwargs: dict) -> runner.RunOptions:
    """RunOptions from the click keywords, values checked."""
    if kwargs["duration_s"] <= 0:
        raise BadValue("--duration must be more than zero; write it like 10s.")
    io_size = kwargs["io_size"]
    if io_size is not None and (io_size < 1024 or io_size > 1 << 20 or io_size & (io_size - 1)):
        raise BadValue(f"--io-size {io_size} is not a power of two from 1K to 1M; try 64K.")
    probe_list = kwargs["probe_list"]
    probes = () if probe_list.strip() == "none" else tuple(p.strip() for p in probe_list.split(",") if p.strip())
    unknown = [p for p in probes if p not in runner.PROBES]
    if unknown:
        raise BadValue(f"unknown probe '{unknown[0]}'; the probes are: {', '.join(runner.PROBES)} (or none).")
    if kwargs.get("call_graph") is not None and kwargs["call_graph"] not in perf.CALL_GRAPHS:
        raise BadValue(f"--call-graph takes {' or '.join(perf.CALL_GRAPHS)}, not '{kwargs['call_graph']}'.")
    fields = {_FIELDS.get(k, k): v for k, v in kwargs.items()}
    fields["probes"] = probes
    return replace(runner.RunOptions(), stack=stack, **fields)
