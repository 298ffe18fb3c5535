# SPDX-License-Identifier: GPL-2.0-only
"""The guest's kernel as QEMU boots it (collectors/guest.pvh_kernel), on
bzImages made here: the ELF inside, where it has a PVH entry, else the
bzImage as it is. That the stock kernel boots at its entry is the guest
tier's (tests/test_guest.py). And how a QEMU killed on an exit path says
it ended."""

import gzip
import lzma
import struct
import subprocess

import pytest

from qprof.collectors import controlled, guest

pytestmark = pytest.mark.unit


def elf_with_notes(*notes):
    """A 64-bit ELF whose one program header is a PT_NOTE holding notes
    [(name, type, desc)]."""
    body = b""
    for name, kind, desc in notes:
        n = name + b"\0"
        body += struct.pack("<III", len(n), len(desc), kind)
        body += n.ljust((len(n) + 3) // 4 * 4, b"\0") + desc.ljust((len(desc) + 3) // 4 * 4, b"\0")
    ehdr = bytearray(64)
    ehdr[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", ehdr, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", ehdr, 0x36, 56, 1)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(body), len(body), 4)
    return bytes(ehdr) + phdr + body


def bzimage(payload, setup_sects=2, offset=0x100):
    """The boot protocol's header with the payload where it says."""
    setup = bytearray((setup_sects + 1) * 512)
    setup[0x1F1] = setup_sects
    setup[0x202:0x206] = b"HdrS"
    struct.pack_into("<II", setup, 0x248, offset, len(payload))
    return bytes(setup) + b"\xaa" * offset + payload + b"trailer"


PVH = (b"Xen", guest.XEN_ELFNOTE_PHYS32_ENTRY, struct.pack("<I", 0x1000000))


@pytest.mark.parametrize("compress", [lzma.compress, gzip.compress], ids=["xz", "gzip"])
def test_a_kernel_with_a_pvh_entry_is_booted_at_it(tmp_path, compress):
    elf = elf_with_notes((b"Linux", 6, b"linux"), PVH)
    (tmp_path / "vmlinuz").write_bytes(bzimage(compress(elf)))
    out = guest.pvh_kernel(tmp_path / "vmlinuz", tmp_path / "vmlinux")
    assert out == tmp_path / "vmlinux" and out.read_bytes() == elf


@pytest.mark.parametrize(
    "image",
    [
        bzimage(lzma.compress(elf_with_notes((b"Xen", 5, b"xen-3.0")))),  # no PVH entry
        bzimage(b"\x28\xb5\x2f\xfd" + b"\0" * 64),  # zstd: not undone here
        bzimage(b"\xfd7zXZ\x00" + b"\0" * 64),  # a damaged xz stream
        b"MZ" + b"\0" * 2048,  # not a bzImage
    ],
    ids=["no-pvh-note", "zstd", "damaged", "not-bzimage"],
)
def test_a_kernel_without_one_boots_as_its_bzimage(tmp_path, image):
    (tmp_path / "vmlinuz").write_bytes(image)
    assert guest.pvh_kernel(tmp_path / "vmlinuz", tmp_path / "vmlinux") is None
    assert not (tmp_path / "vmlinux").exists()


def owned(tmp_path, argv):
    """A GuestVM whose QEMU is argv, started as __enter__ starts one (no QEMU needed)."""
    vm = guest.GuestVM(None, tmp_path, tmp_path / "console.log")
    controlled.start_owned(vm, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return vm


def test_a_killed_qemu_still_says_how_it_ended(tmp_path):
    """A guest killed on an exit path (a timed-out job) is asked how it
    ended after its stderr pipe was closed: its last words, not a
    traceback (read of closed file, once a guest reached its job before
    the deadline fault's 10 s)."""
    vm = owned(tmp_path, ["sh", "-c", "echo 'qemu-system-x86_64: the last words' >&2; exec sleep 60"])
    while not vm.proc.stderr.peek():
        pass  # until it has spoken
    assert vm.ended() is None
    vm.__exit__()
    assert vm.ended() == "QEMU failed (qemu-system-x86_64: the last words)"
    # Killed before it said anything: its exit.
    vm = owned(tmp_path, ["sleep", "60"])
    vm.__exit__()
    assert vm.ended() == "QEMU failed (exit -9)"
