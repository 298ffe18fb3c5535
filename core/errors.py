# SPDX-License-Identifier: GPL-2.0-only
"""Every failure qprof reports: one sentence naming the cause and the fix,
and an exit code of its own so scripts can tell failures apart.

The codes are part of qprof's interface; docs/exit-codes.md lists them.
"""

# What would break a sentence's one line: line ends and the other control
# characters, which only quoted input (a spec, an id, a line read) brings
# into it; shown escaped, as Python writes them.
_ONE_LINE = {c: repr(chr(c))[1:-1] for c in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029)}


class QprofError(Exception):
    """A failure with a sentence for the user and a distinct exit code."""

    exit_code = 1

    def __init__(self, sentence: str):
        sentence = sentence.translate(_ONE_LINE)
        super().__init__(sentence)
        self.sentence = sentence


class UnknownStack(QprofError):
    exit_code = 3


class BadValue(QprofError):
    """A malformed duration, size or other option value."""

    exit_code = 4


class NotRoot(QprofError):
    exit_code = 5


class PortInUse(QprofError):
    exit_code = 6


class TransportOpenFailed(QprofError):
    """The transport library (msquic) failed to open or configure."""

    exit_code = 7


class HandshakeFailed(QprofError):
    exit_code = 8


class PeerDied(QprofError):
    """A workload process died or lost its connection mid-run."""

    exit_code = 9


class VerifyFailed(QprofError):
    exit_code = 10


class NotBuilt(QprofError):
    exit_code = 11


class KernelFeatureMissing(QprofError):
    exit_code = 12


class Timeout(QprofError):
    exit_code = 13


class TopologyFailed(QprofError):
    exit_code = 14


class RunNotFound(QprofError):
    exit_code = 15


class BadTls(QprofError):
    """An unknown TLS version or cipher, or TLS options on a stack without TLS."""

    exit_code = 16


class SendfileUnsupported(QprofError):
    exit_code = 17


class GuestBootFailed(QprofError):
    exit_code = 18


class GuestTimeout(QprofError):
    exit_code = 19


class GuestMissing(QprofError):
    """QEMU or the guest kernel package is not installed."""

    exit_code = 20


class KtlsUnproven(QprofError):
    """A tcp-ktls run whose kernel TLS counters did not move."""

    exit_code = 21


class NoStacks(QprofError):
    """A run without stack samples (made with --sample-hz 0, or incomplete)."""

    exit_code = 22


class BadStacks(QprofError):
    """A folded-stacks file that is unreadable, truncated or disagrees with run.json."""

    exit_code = 23


class IncompatibleRuns(QprofError):
    """Two runs whose stacks cannot be drawn in one figure (sample type, emulated vs host)."""

    exit_code = 24


class OffloadContradiction(QprofError):
    """The run's observed GSO/GRO state is not what it asked for."""

    exit_code = 25


class InstrumentFailed(QprofError):
    """perf or an eBPF probe died or stopped answering mid-run."""

    exit_code = 26


class RunsDirUnwritable(QprofError):
    """The runs directory (or a run directory) cannot be created or written."""

    exit_code = 27


class Busy(QprofError):
    """Another qprof measurement holds this machine."""

    exit_code = 28


class BadLink(QprofError):
    """A --link that cannot be emulated: an unknown preset, a malformed or
    impossible value, or a topology without a link (loopback)."""

    exit_code = 29


class LinkUnsupported(QprofError):
    """The kernel lacks a queueing discipline the --link needs (netem)."""

    exit_code = 30


class BadMix(QprofError):
    """A --mix that cannot run: a malformed entry, a count of zero, more
    flows than qprof runs at once, or an option no flow of it can take."""

    exit_code = 31


class IncompleteRecord(QprofError):
    """`qprof show` of a run or comparison whose record is incomplete
    (failed, abandoned, still running) or corrupt: what it holds is shown."""

    exit_code = 33


class UnknownExportFormat(QprofError):
    """`qprof export --format` names no format qprof writes."""

    exit_code = 32


class NoPerfData(QprofError):
    """`qprof export --format perf-script` of a run that kept no perf.data
    (it is deleted after folding unless `qprof run --keep-perf-data`)."""

    exit_code = 34


class SettingUnproven(QprofError):
    """A knob the run asked for (--encrypt off, --pacing, --quic-cc, --ecn)
    that msquic's own settings, read back after the run, say did not take
    effect: the run measured something else and is not recorded."""

    exit_code = 35


class BadCpus(QprofError):
    """--cpus names a role other than client and server, a CPU list that is
    not one, or a CPU this host cannot run the workload on."""

    exit_code = 36


class MsquicUnusable(QprofError):
    """--msquic names no file, or one this host cannot load as msquic (no
    MsQuicOpenVersion, or a library it needs is missing)."""

    exit_code = 37


class StackCannot(QprofError):
    """An option, or a value of one, that the chosen stack (or pattern)
    cannot do, though it is well formed: the sentence names what can, from
    the stack's row (describe/transports.py)."""

    exit_code = 38


class Regression(QprofError):
    """`qprof check`: a figure regressed beyond the baseline's spread and
    the threshold; the sentence names each."""

    exit_code = 40


# Another host, reached over SSH (collectors/ssh.py, docs/remote.md): each
# fault its own code, so a script can tell a network problem from a key
# to fix or a host to set up.


class SshUnreachable(QprofError):
    """ssh could not reach the host: the name does not resolve, the
    connection is refused, no route, or it timed out."""

    exit_code = 50


class SshAuthFailed(QprofError):
    """The host answered but refused every key qprof's ssh offered."""

    exit_code = 51


class SshHostKeyUnknown(QprofError):
    """The host's key is not in known_hosts: qprof never accepts one by itself."""

    exit_code = 52


class SshHostKeyChanged(QprofError):
    """The host's key differs from the one known_hosts holds for it."""

    exit_code = 53


class SshFailed(QprofError):
    """ssh failed for a reason none of the codes above names (its last line says which)."""

    exit_code = 54


class RemoteNotRoot(QprofError):
    """qprof on the other host does not run as root."""

    exit_code = 55


class RemoteNotBuilt(QprofError):
    """The other host lacks qprof or its build (`make build` there)."""

    exit_code = 56


class RemoteVersion(QprofError):
    """qprof on the other host is another version or commit than this one."""

    exit_code = 57


class RemoteLost(QprofError):
    """The SSH connection or qprof's agent on the other host ended while in use."""

    exit_code = 58


# A program of the user's in a side's place (--server-cmd, --client-cmd,
# collectors/external.py): each way it can fail to be one, its own code.


class ExternalNotFound(QprofError):
    """--server-cmd's program is not on PATH, or its path is not an executable file."""

    exit_code = 60


class ExternalExited(QprofError):
    """The program ended before the run was over (at once, or mid-run)."""

    exit_code = 61


class ExternalNotListening(QprofError):
    """The program bound no UDP port in the time a server is given to."""

    exit_code = 62


class ExternalWrongPort(QprofError):
    """The program bound UDP ports, but not the run's."""

    exit_code = 63


class ExternalLeftBehind(QprofError):
    """Processes the program started outlived it; qprof killed them."""

    exit_code = 64


class ExternalAlpn(QprofError):
    """The program's handshake offered another application protocol than perf."""

    exit_code = 65


class ExternalAnsweredShort(QprofError):
    """The program ended a stream's answer before the bytes its client asked."""

    exit_code = 66


class ExternalHung(QprofError):
    """--client-cmd's program ran on past the run's end; qprof killed it."""

    exit_code = 67


class ExternalNoConnection(QprofError):
    """--client-cmd's program made no connection to the run's server."""

    exit_code = 68


class ExternalWrongWay(QprofError):
    """A program pair's receiver, by --direction, sent more than it received."""

    exit_code = 69


class Interrupted(QprofError):
    """Ctrl-C or SIGTERM: 128 + SIGINT, as shells report it."""

    exit_code = 130
    default_sentence = "interrupted; everything the run created was removed and its directory is marked incomplete."


def by_exit_code(code: int, sentence: str) -> QprofError:
    """The error a qprof run elsewhere (the guest) ended with, rebuilt here."""
    for cls in QprofError.__subclasses__():
        if cls.exit_code == code:
            return cls(sentence)
    err = QprofError(sentence)
    err.exit_code = code
    return err
