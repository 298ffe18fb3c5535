"""`qprof run`: one measured bulk transfer."""
import json

import click

from qprof import report
from qprof.collectors import runner
from qprof.collectors.errors import BadValue
from qprof.units import Duration, Size

_defaults = runner.RunOptions()


@click.command()
@click.option("--stack", "-s", default=_defaults.stack, show_default=True,
              help=f"Transport stack: {', '.join(runner.STACKS)}.")
@click.option("--duration", "-d", "duration_s", type=Duration(), default="10s", show_default=True,
              help="Length of the measured window (after warm-up).")
@click.option("--bytes", "-b", "nbytes", type=Size(), default=None,
              help="Send this many bytes per stream instead of for a duration (e.g. 1G).")
@click.option("--warmup", "warmup_s", type=Duration(), default="1s", show_default=True,
              help="Time after the handshake left out of the window.")
@click.option("--streams", "-n", type=click.IntRange(1, 64), default=_defaults.streams, show_default=True,
              help="Streams in the one connection.")
@click.option("--topology", type=click.Choice(runner.TOPOLOGIES), default=_defaults.topology, show_default=True,
              help="Two network namespaces joined by veth, or the host loopback.")
@click.option("--port", "-p", type=click.IntRange(1, 65535), default=_defaults.port, show_default=True)
@click.option("--io-size", type=Size(), default=None,
              help="Bytes per send request, a power of two from 1K to 1M [default: 64K for quic "
                   "(msquic's secnetperf), 128K for TCP (iperf3)].")
@click.option("--exec-profile", type=click.Choice(runner.EXEC_PROFILES), default=_defaults.exec_profile,
              show_default=True, help="msquic execution profile.")
@click.option("--tls", "tls_version", default=None, metavar="1.2|1.3",
              help="tcp-tls, tcp-ktls: TLS version [default: 1.3].")
@click.option("--cipher", default=None, metavar="NAME",
              help="tcp-tls, tcp-ktls: OpenSSL cipher [default: AES-128-GCM, QUIC's AEAD].")
@click.option("--sendfile", is_flag=True, help="tcp, tcp-ktls: the client sendfile()s its data (zero copy).")
@click.option("--guest", is_flag=True,
              help="Run the whole measurement in a QEMU guest with Debian's kernel (for kTLS); `make guest` first.")
@click.option("--probes", "probe_list", default=",".join(runner.PROBES), show_default=True,
              help="eBPF probes to attach, comma-separated, or 'none'.")
@click.option("--sample-hz", type=click.IntRange(0, 20000), default=_defaults.sample_hz, show_default=True,
              help="perf cpu-clock stack samples per CPU-second over the window (0: no stacks).")
@click.option("--keep-perf-data", is_flag=True, help="Keep perf.data in the run directory after folding.")
@click.option("--runs-dir", type=click.Path(file_okay=False), default=_defaults.runs_dir, show_default=True,
              envvar="QPROF_RUNS_DIR", help="Where run directories are written.")
@click.option("--json", "as_json", is_flag=True, help="Print the run record on stdout instead of the table.")
@click.option("--inject-fault", "fault", type=click.Choice(runner.FAULTS), default=None, hidden=True)
def run(stack, duration_s, nbytes, warmup_s, streams, topology, port, io_size, exec_profile,
        tls_version, cipher, sendfile, guest, probe_list, sample_hz, keep_perf_data, runs_dir, as_json, fault):
    """Drive a real bulk transfer and measure its CPU per byte.

    The client sends as fast as the stack allows from one network
    namespace to a server in another; the window starts after the
    handshake and a warm-up. The record goes to RUNS_DIR/<id>/run.json.

    \b
    EXAMPLES:
      qprof run --stack quic                       # 10 s upload, netns -> netns
      qprof run --stack quic -d 5s -n 4 --json     # 4 streams, record on stdout
      qprof run --topology loopback --bytes 1G     # fixed size, host loopback
      qprof run --stack tcp-tls --tls 1.2          # TLS in OpenSSL user space
      qprof run --stack tcp-ktls --guest           # kernel TLS, in a QEMU guest
    """
    if duration_s <= 0:
        raise BadValue("--duration must be more than zero; write it like 10s.")
    if io_size is not None and (io_size < 1024 or io_size > 1 << 20 or io_size & (io_size - 1)):
        raise BadValue(f"--io-size {io_size} is not a power of two from 1K to 1M; try 64K.")
    probes = () if probe_list.strip() == "none" else tuple(p.strip() for p in probe_list.split(",") if p.strip())
    unknown = [p for p in probes if p not in runner.PROBES]
    if unknown:
        raise BadValue(f"unknown probe '{unknown[0]}'; the probes are: {', '.join(runner.PROBES)} (or none).")
    opts = runner.RunOptions(stack=stack, duration_s=duration_s, bytes=nbytes, warmup_s=warmup_s,
                             streams=streams, topology=topology, port=port, io_size=io_size,
                             exec_profile=exec_profile, tls_version=tls_version, cipher=cipher,
                             sendfile=sendfile, guest=guest, probes=probes, sample_hz=sample_hz,
                             keep_perf_data=keep_perf_data, runs_dir=runs_dir, fault=fault)
    record = runner.run(opts)
    if as_json:
        click.echo(json.dumps(record, indent=2))
    else:
        report.print_run(record)
