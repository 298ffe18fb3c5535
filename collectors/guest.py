# SPDX-License-Identifier: GPL-2.0-only
"""`--guest`: the whole measurement inside a QEMU guest running Debian's
stock kernel, for what this host's kernel lacks (kernel TLS, netem).

The guest kernel is Debian's linux-image-amd64, unpacked with `dpkg -x`
(never installed) by `make guest`; QEMU runs it under TCG (no KVM here)
with `-cpu max`, so AES-NI is emulated and the kernel's aesni-intel loads.
The initramfs qprof builds holds busybox-static, the kernel modules the
run needs (kTLS and its AES-GCM, veth, virtio-9p) loaded in dependency
order, and an init script. The userland is the host's own, shared
read-only over virtio-9p, so the guest runs exactly the binaries (qprof,
qprof-wl, the probes, their libraries) measured on the host; one
directory is shared writable (the spool, collectors/resident.py: the
runs the guest takes as jobs, and what they write).

A GuestVM is a context manager and the one owner of the QEMU process
(or, detached, its owner until `qprof guest start` hands it over).
Artifacts are cached under build/guest/ and rebuilt only when an input
changes.
"""

import hashlib
import json
import lzma
import os
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

from qprof import errors, interrupts, paths, remains
from qprof.collectors.controlled import start_owned

QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
GUEST_CPUS = 2
GUEST_MEMORY_MB = 2048
BOOT_TIMEOUT_S = 120.0
# Module names (as modprobe knows them); their dependencies come first.
MODULES = (
    # kTLS with the kernel's AES-GCM (setsockopt(SOL_TLS) fails with ENOENT without them)
    "cryptd",
    "crypto_simd",
    "aesni_intel",
    "ghash_clmulni_intel",
    "gf128mul",
    "ghash_generic",
    "ctr",
    "gcm",
    "tls",
    # the run's topology, and the host's userland over virtio-9p
    "veth",
    "virtio_pci",
    # a NIC on a tap device, for a guest reached from the host (GuestVM's tap)
    "virtio_net",
    "9pnet_virtio",
    "9p",
    # link emulation (describe/link.py, collectors/emulation.py): delay, loss and jitter; rate
    "sch_netem",
    "sch_tbf",
    "sch_htb",
)
STAGE = "qprof-guest: stage "
# The ELF note of a kernel's 32-bit PVH entry point (Xen's public/elfnote.h).
XEN_ELFNOTE_PHYS32_ENTRY = 18


def guest_dir() -> Path:
    """QPROF_GUEST_DIR overrides it (tests use it to stand in a broken guest)."""
    return Path(os.environ.get("QPROF_GUEST_DIR", paths.build_dir() / "guest"))


@dataclass(frozen=True)
class Artifacts:
    kernel: Path
    initramfs: Path
    kernel_release: str
    package: str
    stamp: str  # of the inputs they were built from: a started guest runs these if its stamp is this


def _kernel_deb() -> Path:
    debs = sorted(guest_dir().glob("linux-image-*-amd64_*.deb"))
    if not debs:
        raise errors.GuestMissing(
            f"the guest kernel package is not in {guest_dir()}; run `make guest` "
            "(it downloads Debian's linux-image-amd64 and installs QEMU)."
        )
    return debs[-1]


def _run(argv: List[str], what: str, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise errors.GuestBootFailed(
            f"building the guest failed at {what} ({r.stderr.strip()[-300:]}); run `make guest` and retry."
        )
    return r


def module_order(modules_dir: Path, wanted=MODULES) -> List[Path]:
    """Module files in an order insmod can load them: every dependency
    before what needs it, from the tree's own modules.dep."""
    deps = {}
    for line in (modules_dir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {Path(p).name.split(".ko")[0].replace("-", "_"): p for p in deps}
    order: List[str] = []

    def visit(path: str) -> None:
        if path in order:
            return
        for d in deps[path]:
            visit(d)
        order.append(path)

    for name in wanted:
        if name not in by_name:
            raise errors.GuestBootFailed(f"the guest kernel has no module {name}; use Debian's linux-image-amd64.")
        visit(by_name[name])
    return [modules_dir / p for p in order]


INIT = r"""#!/bin/busybox sh
# qprof's guest init: load modules, mount the host's userland and the
# spool over virtio-9p, run the command qprof left there, power off.
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
stage() { echo "qprof-guest: stage $*" > /dev/console; }
die() { stage "failed: $*"; poweroff -f; }
stage modules
for m in $(cat /modules.order); do
    insmod "/modules/$m" || die "insmod $m"
done
out=$(sed -n 's/.*qprof.out=\([^ ]*\).*/\1/p' /proc/cmdline)
stage mount
mkdir -p /host
o9p=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$o9p,ro,cache=loose" hostroot /host || die "mount host root"
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
mount -t tmpfs tmpfs /host/run
mkdir -p /host/run/tmp
mount -t bpf bpf /host/sys/fs/bpf 2>/dev/null
# The host's /tmp stays visible (a checkout or run directory may live
# there); scratch space is TMPDIR=/run/tmp, on the guest's own tmpfs. The
# spool is mounted where the host has it (under /run: on that tmpfs).
mkdir -p "/host$out" 2>/dev/null
mount -t 9p -o "$o9p" out "/host$out" || die "mount spool $out"
ip link set lo up
stage run
chroot /host /bin/sh "$out/cmd.sh"
stage done
sync
poweroff -f
"""


def _stamp(deb: Path) -> str:
    h = hashlib.sha256()
    # "pvh": the kernel is unpacked for its PVH entry (pvh_kernel) where it has one.
    for part in (deb.name, INIT, ",".join(MODULES), str(BUSYBOX.stat().st_size), "pvh"):
        h.update(part.encode())
    return h.hexdigest()[:16]


def _elf_notes(elf: bytes):
    """(name, type) of each note in a 64-bit little-endian ELF's PT_NOTE
    segments."""
    if elf[:6] != b"\x7fELF\x02\x01":
        return
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        at, end = p_offset, p_offset + p_filesz
        while at + 12 <= end:
            namesz, descsz, kind = struct.unpack_from("<III", elf, at)
            name = elf[at + 12 : at + 12 + namesz].rstrip(b"\0")
            yield name, kind
            at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4


def pvh_kernel(bzimage: Path, out: Path) -> Optional[Path]:
    """The kernel of a bzImage as the ELF QEMU boots at its PVH entry, in
    out; None where it has none (or a compression Python cannot undo).
    Under TCG a bzImage spends about 6 s in real-mode setup and in its own
    decompressor before the kernel's first line; at the PVH entry the same
    kernel starts in under one. The payload is where the boot protocol's
    header says (setup_sects, payload_offset, payload_length)."""
    image = bzimage.read_bytes()
    if image[0x202:0x206] != b"HdrS":
        return None
    setup_sects = image[0x1F1] or 4
    offset, length = struct.unpack_from("<II", image, 0x248)
    payload = image[(setup_sects + 1) * 512 + offset :][:length]
    try:
        if payload.startswith(b"\xfd7zXZ\x00"):
            elf = lzma.LZMADecompressor().decompress(payload)
        elif payload.startswith(b"\x1f\x8b"):
            elf = zlib.decompressobj(wbits=31).decompress(payload)
        else:
            return None
    except (lzma.LZMAError, zlib.error):
        return None
    try:
        if (b"Xen", XEN_ELFNOTE_PHYS32_ENTRY) not in set(_elf_notes(elf)):
            return None
    except struct.error:  # a header pointing past the end
        return None
    out.write_bytes(elf)
    return out


def artifacts() -> Artifacts:
    """The cached kernel and initramfs, built once per input change."""
    if not BUSYBOX.exists():
        raise errors.GuestMissing("busybox-static is not installed; run `make guest`.")
    deb = _kernel_deb()
    gdir = guest_dir()
    stamp = _stamp(deb)
    built = gdir / f"built-{stamp}.json"
    if built.exists():
        d = json.loads(built.read_text())
        return Artifacts(Path(d["kernel"]), Path(d["initramfs"]), d["kernel_release"], d["package"], stamp)

    root = gdir / "kernel-root"
    shutil.rmtree(root, ignore_errors=True)
    _run(["dpkg", "-x", str(deb), str(root)], "dpkg -x")
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise errors.GuestBootFailed(f"{deb.name} holds no vmlinuz; run `make guest` to fetch linux-image-amd64.")
    release = kernels[-1].name.removeprefix("vmlinuz-")
    _run(["depmod", "-b", str(root), release], "depmod")
    modules = module_order(root / "lib" / "modules" / release)

    with tempfile.TemporaryDirectory(dir=gdir) as staging:
        st = Path(staging)
        for d in ("bin", "proc", "sys", "dev", "modules"):
            (st / d).mkdir()
        shutil.copy2(BUSYBOX, st / "bin" / "busybox")
        for m in modules:
            shutil.copy2(m, st / "modules" / m.name)
        (st / "modules.order").write_text("\n".join(m.name for m in modules) + "\n")
        (st / "init").write_text(INIT)
        (st / "init").chmod(0o755)
        initramfs = gdir / f"initramfs-{stamp}.cpio.gz"
        files = subprocess.run(["find", "."], cwd=st, capture_output=True, check=True).stdout
        with open(initramfs, "wb") as out:
            cpio = subprocess.Popen(
                ["cpio", "-o", "-H", "newc", "--quiet"], cwd=st, stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
            gz = subprocess.Popen(["gzip", "-1"], stdin=cpio.stdout, stdout=out)
            cpio.stdout.close()
            cpio.communicate(files)
            gz.wait()
            if cpio.returncode or gz.returncode:
                raise errors.GuestBootFailed("cpio could not pack the guest's initramfs; run `make guest` and retry.")
    kernel = pvh_kernel(kernels[-1], gdir / f"vmlinux-{release}")
    if kernel is None:
        kernel = gdir / f"vmlinuz-{release}"
        shutil.copy2(kernels[-1], kernel)
    shutil.rmtree(root, ignore_errors=True)
    info = {"kernel": str(kernel), "initramfs": str(initramfs), "kernel_release": release, "package": deb.name}
    built.write_text(json.dumps(info))
    return Artifacts(kernel, initramfs, release, deb.name, stamp)


def code_stamp() -> str:
    """Of what a guest run executes of this machine's (each file's path,
    size and change time): qprof's modules and data, and what `make build`
    made for a run (workloads, probes, their libraries). A started guest
    loaded them when it started, so it runs what a new guest would only
    while this is unchanged."""
    import importlib.util

    import qprof

    roots = [Path(qprof.__file__).parent]
    for name in ("cli", "present", "collectors", "describe", "flamegraphs"):
        spec = importlib.util.find_spec(f"qprof.{name}")
        roots += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    build = paths.build_dir()
    built = [build / "bin", build / "lib", build / "probes", *(p / "lib" for p in sorted(build.glob("msquic*")))]
    h = hashlib.sha256()
    for root in roots + built:
        for f in sorted(root.rglob("*")):
            source = root not in built
            if "__pycache__" in f.parts or (source and f.suffix not in (".py", ".json", ".rules")):
                continue
            try:
                st = f.stat()
            except OSError:
                continue
            if not f.is_dir():
                h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def qemu_version() -> Optional[str]:
    try:
        return subprocess.run([QEMU, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        return None


class GuestVM:
    """One QEMU process, its console in `console_log`; killed on every exit
    path. tap: the guest gets a virtio NIC (its eth0) on a tap device of
    that name here, which QEMU makes and which goes with it; none without.
    qmp: QEMU's monitor on that socket (pause and resume a started guest).
    detached: in a session of its own, not dying with qprof, its stderr in
    that file: `qprof guest start`'s, killed on every exit path until
    handover() gives it to the started guest's state."""

    def __init__(
        self,
        art: Artifacts,
        out_dir: Path,
        console_log: Path,
        tap: Optional[str] = None,
        qmp: Optional[Path] = None,
        detached: Optional[Path] = None,
    ):
        self.art = art
        self.out_dir = out_dir
        self.console_log = console_log
        self.tap = tap
        self.qmp = qmp
        self.detached = detached
        self.proc: Optional[subprocess.Popen] = None
        self._claim = None
        self._last_words: Optional[str] = None  # its stderr, kept as its pipe is closed

    def _nic(self) -> List[str]:
        if self.tap is None:
            return ["-nic", "none"]
        tap = f"tap,id=n0,ifname={self.tap},script=no,downscript=no"
        return ["-netdev", tap, "-device", "virtio-net-pci,netdev=n0"]

    def argv(self) -> List[str]:
        # thread=single: multi-threaded TCG locked up both vCPUs (soft
        # lockups, RCU stalls) in about one guest run in ten while the
        # probes attached; single-threaded TCG is no slower on 2 host CPUs.
        return [
            QEMU,
            "-accel",
            "tcg,thread=single",
            "-cpu",
            "max",
            "-smp",
            str(GUEST_CPUS),
            "-m",
            str(GUEST_MEMORY_MB),
            "-display",
            "none",
            "-monitor",
            "none",
            *(["-qmp", f"unix:{self.qmp},server=on,wait=off"] if self.qmp else []),
            "-no-reboot",
            *self._nic(),
            "-serial",
            f"file:{self.console_log}",
            "-kernel",
            str(self.art.kernel),
            "-initrd",
            str(self.art.initramfs),
            "-append",
            f"console=ttyS0 rdinit=/init panic=-1 quiet qprof.out={self.out_dir}",
            "-virtfs",
            "local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap,id=hostroot",
            "-virtfs",
            f"local,path={self.out_dir},mount_tag=out,security_model=passthrough,id=out",
        ]

    def __enter__(self) -> "GuestVM":
        if shutil.which(QEMU) is None:
            raise errors.GuestMissing(f"{QEMU} is not installed; run `make guest` (Debian's qemu-system-x86).")
        try:
            if self.detached is None:
                start_owned(
                    self, self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            else:
                with open(self.detached, "wb") as err, interrupts.deferred():
                    self.proc = subprocess.Popen(
                        self.argv(),
                        start_new_session=True,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    )
                    self._claim = remains.ledger().claim_pid(self.proc.pid)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        with interrupts.deferred():
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
            if self.proc is not None:
                self.proc.wait()
                if self.proc.stderr is not None and not self.proc.stderr.closed:
                    # Read to its end (QEMU is gone) before the pipe closes, for qemu_error.
                    self._last_words = self.proc.stderr.read().decode(errors="replace").strip()
                    self.proc.stderr.close()
                remains.ledger().release("pids", self._claim)

    def handover(self) -> dict:
        """The detached QEMU given up by this qprof (its pid and start time,
        for the started guest's state): no longer killed on exit."""
        with interrupts.deferred():
            claim, self.proc = self._claim, None
            remains.ledger().release("pids", claim)
        return claim

    def qemu_error(self) -> str:
        """QEMU's last words on stderr, or its exit."""
        if self.detached is not None:
            try:
                err = self.detached.read_text(errors="replace").strip()
            except OSError:
                err = ""
        elif self.proc.stderr.closed:  # killed on an exit path: what it said then
            err = self._last_words or ""
        else:
            err = self.proc.stderr.read().decode(errors="replace").strip()
        return err[-300:] or f"exit {self.proc.returncode}"

    def stages(self) -> List[str]:
        return console_stages(self.console_log)

    def last_console_line(self) -> str:
        return last_console_line(self.console_log)

    def ended(self) -> Optional[str]:
        """None while QEMU runs; else how it ended."""
        if self.proc.poll() is None:
            return None
        return f"QEMU failed ({self.qemu_error()})" if self.proc.returncode else "the guest powered off"


def console_text(path: Path, since: int = 0) -> str:
    """The console from byte `since` on."""
    try:
        with open(path, "rb") as f:
            f.seek(since)
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def console_stages(path: Path, since: int = 0) -> List[str]:
    """The stages the guest's init and runner said on the console, from byte `since` on."""
    text = console_text(path, since)
    return [line.split(STAGE, 1)[1].strip() for line in text.splitlines() if STAGE in line]


def last_console_line(path: Path, since: int = 0) -> str:
    lines = [line for line in console_text(path, since).splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no console output"


def serve_script(spool: Path) -> str:
    """The script the guest's init runs in the host's userland (chroot):
    qprof's runner, taking runs as jobs from the spool until told to stop
    (collectors/resident.py); its own output in the spool's runner.log."""
    py = Path(sys.executable)
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": "/root",
        "QPROF_BUILD_DIR": str(paths.build_dir()),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TMPDIR": "/run/tmp",
        "QPROF_FLOOR_DIR": "/run/tmp/floor",  # measured once per guest, not per run
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    cmd = " ".join(shlex.quote(a) for a in [str(py), "-m", "qprof", "guest", "serve", str(spool)])
    return f"cd /\nexport {exports}\n{cmd} > {shlex.quote(str(spool / 'runner.log'))} 2>&1\n"
