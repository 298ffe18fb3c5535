# SPDX-License-Identifier: GPL-2.0-only
"""flamegraphs/ on hand-made input: the folded reader, classification
order, categories summing to the total, stack quality, per-byte units."""

import io
import re
import sys
from pathlib import Path

import pytest

from qprof.errors import BadStacks, BadValue
from qprof.flamegraphs import categories, folded, normalize, sides

from conftest import REPO

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parent / "data" / "flame"


def rules(text):
    return categories.Classifier(categories.parse_rules(text, "test.rules"))


# --- the reader -------------------------------------------------------------


def test_reader_sums_duplicates_and_keeps_spaces_in_frames():
    text = "a;b;c 3\na;b;c 4\nmemfd:x;[unknown] ;[unknown] ;leaf_[k] 2\n\n"
    data = folded.parse(text, warn=pytest.fail)
    assert data.stacks == {"a;b;c": 7, "memfd:x;[unknown] ;[unknown] ;leaf_[k]": 2}
    assert data.samples == 9 and data.skipped_lines == 0 and not data.partial_last_line


def test_reader_warns_once_about_malformed_lines_and_skips_them(capsys):
    text = "a;b 5\nnot a count\na;c 2.5\n;x\nq;r -3\na;d 1\n"
    data = folded.parse(text, "t.folded")
    assert data.stacks == {"a;b": 5, "a;d": 1}
    assert data.skipped_lines == 4
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert "t.folded" in err[0] and "4 malformed" in err[0] and "line 2" in err[0]


def test_reader_flags_a_partial_last_line():
    assert folded.parse("a;b 5\na;c 1", warn=pytest.fail).partial_last_line
    assert not folded.parse("", warn=pytest.fail).partial_last_line


def test_reader_takes_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("x;y 2\n"))
    assert folded.read(None, warn=pytest.fail).stacks == {"x;y": 2}
    monkeypatch.setattr(sys, "stdin", io.StringIO("x;z 1\n"))
    assert folded.read("-", warn=pytest.fail).stacks == {"x;z": 1}


def test_reader_refuses_what_holds_no_stacks(tmp_path):
    binary = tmp_path / "perf.data"
    binary.write_bytes(b"PERFILE2\x00\xff\xfe" + bytes(range(256)))
    with pytest.raises(BadStacks, match="not text"):
        folded.read(binary)
    garbage = tmp_path / "g.folded"
    garbage.write_text("hello\nworld\n")
    with pytest.raises(BadStacks, match="no folded stacks"):
        folded.read(garbage)
    with pytest.raises(BadStacks, match="cannot read"):
        folded.read(tmp_path / "absent.folded")


def test_writer_round_trips(tmp_path):
    stacks = {"p;b;c": 3, "p;a": 1}
    folded.write(stacks, tmp_path / "x.folded")
    assert (tmp_path / "x.folded").read_text() == "p;a 1\np;b;c 3\n"
    assert folded.read(tmp_path / "x.folded", warn=pytest.fail).stacks == stacks


# --- classification ---------------------------------------------------------

TWO_RULES = "crypto\t^aesni_\\w+$\nprotocol\t^Quic\\w+$\n"


def test_the_frame_nearest_the_leaf_decides():
    c = rules(TWO_RULES)
    assert c.stack_category("p;start_thread;QuicSend;aesni_enc") == "crypto"
    assert c.stack_category("p;start_thread;aesni_enc;QuicSend") == "protocol"
    # Unmatched frames near the leaf hand the sample to their caller.
    assert c.stack_category("p;QuicSend;malloc;_int_malloc") == "protocol"


def test_rule_order_decides_only_within_one_frame():
    both = "protocol\t^Quic\ncrypto\tEncrypt$\n"
    assert rules(both).stack_category("p;QuicEncrypt") == "protocol"
    assert rules("crypto\tEncrypt$\nprotocol\t^Quic\n").stack_category("p;QuicEncrypt") == "crypto"


def test_the_root_is_never_matched_and_nothing_matched_is_other():
    c = rules(TWO_RULES)
    assert c.stack_category("QuicRoot;main;work") == "other"
    assert c.stack_category("QuicRoot") == "other"


def test_categories_are_in_fixed_order_and_sum_to_the_total():
    c = rules(TWO_RULES)
    stacks = {"p;QuicA": 5, "p;aesni_x": 2, "p;zzz": 7, "p;QuicA;aesni_y": 1}
    got = categories.categorize(stacks, c)
    assert list(got) == list(categories.CATEGORIES)
    assert got["protocol"] == 5 and got["crypto"] == 3 and got["other"] == 7
    assert sum(got.values()) == sum(stacks.values())


@pytest.mark.parametrize(
    "text,match",
    [
        ("crypto ^aes\n", "no tab"),
        ("cryptography\t^aes\n", "unknown category"),
        ("crypto\t^aes(\n", "bad regular expression"),
    ],
)
def test_bad_rules_are_refused_with_the_line(text, match):
    with pytest.raises(BadValue, match=match) as e:
        categories.parse_rules(text, "t.rules")
    assert "t.rules:1" in e.value.sentence


def test_comments_and_blank_lines_are_ignored():
    assert len(categories.parse_rules("# a comment\n\n   # indented\ncrypto\t#literal\n")) == 1


def test_the_rules_header_and_the_guide_list_the_categories_as_printed():
    """CATEGORIES is the one declaration; the two texts that list the
    categories for a reader follow it (issue 25 added "verification")."""
    header = categories.RULES_PATH.read_text().split("in the order qprof prints them:\n", 1)[1]
    header = " ".join(l.lstrip("#").strip() for l in header.split("\n#\n", 1)[0].splitlines())
    assert [c.strip() for c in header.split(",")] == list(categories.CATEGORIES)
    guide = (REPO / "docs" / "flame-graphs.md").read_text()
    listed = re.search(r"decides its category \(([^)]*)\)", " ".join(guide.split())).group(1)
    assert [c.strip() for c in listed.split(",")] == list(categories.CATEGORIES)


# The shipped rules on frames as real captures name them.
SHIPPED = [
    (
        "qprof-wl;[unknown];read;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_read_[k];vfs_read_[k];"
        "sock_read_iter_[k];sock_recvmsg_[k];tcp_recvmsg_[k];tcp_recvmsg_locked_[k];skb_copy_datagram_iter_[k];"
        "__skb_datagram_iter_[k];_copy_to_iter_[k]",
        "copies",
    ),
    ("qprof-wl;run_client;SSL_write;ssl3_write_bytes;tls_write_records;EVP_EncryptUpdate;aesni_gcm_encrypt", "crypto"),
    ("qprof-wl;[libcrypto.so.3]", "crypto"),
    (
        "qprof-wl;start_thread;CxPlatWorkerThread;QuicWorkerLoop;QuicSendFlush;QuicPacketBuilderFinalize;CxPlatEncrypt",
        "crypto",
    ),
    (
        "qprof-wl;start_thread;CxPlatWorkerThread;QuicWorkerLoop;QuicSendFlush;QuicLossDetectionOnPacketSent;"
        "CxPlatHashtableEnumerateNext",
        "protocol",
    ),
    # The receiver's content check is "verification" under msquic's callbacks
    # too, whichever clone ran; the rest of the workload's code is "other".
    (
        "qprof-wl;start_thread;CxPlatWorkerThread;QuicWorkerLoop;QuicConnDrainOperations;QuicStreamRecvFlush;"
        "wl_pattern_check.avx2",
        "verification",
    ),
    ("qprof-wl;start_thread;server_conn;wl_pattern_check.default", "verification"),
    (
        "qprof-wl;start_thread;rr_take;wl_rr_rx_feed;wl_pattern_check.avx2",
        "verification",
    ),
    ("qprof-wl;start_thread;CxPlatWorkerThread;rr_q_server_stream_cb;wl_rr_rx_feed", "verification"),
    # --app h1: http-parser and the workload's framing are "HTTP framing"; the
    # pattern's own work under the layer's hand-on is the workload's, and a
    # TLS write under the framing's send is still crypto.
    ("qprof-wl;wl_loop_run;on_conn;wl_h1_data;http_parser_execute", "HTTP framing"),
    ("qprof-wl;wl_loop_run;on_conn;wl_h1_data;http_parser_execute;h1_on_headers", "HTTP framing"),
    ("qprof-wl;wl_loop_run;on_conn;wl_h1_data;http_parser_execute;wl_h1_on_body;server_data;respond", "other"),
    ("qprof-wl;wl_loop_run;on_tick;hand;wl_h1_send;h1_frame;h1_head;__vsnprintf_internal", "HTTP framing"),
    ("qprof-wl;wl_loop_run;on_tick;hand;wl_h1_send;h1_frame;__memmove_avx_unaligned_erms", "copies"),
    ("qprof-wl;wl_loop_run;on_tick;hand;wl_h1_send;tcp_send;loop_flush;SSL_write;aesni_gcm_encrypt", "crypto"),
    # A copy the check makes is still a copy.
    ("qprof-wl;start_thread;rr_take;wl_rr_rx_feed;__memmove_avx_unaligned_erms", "copies"),
    (
        "qprof-wl;start_thread;CxPlatWorkerThread;QuicWorkerLoop;QuicConnDrainOperations;QuicStreamIndicateEvent;"
        "server_stream_cb",
        "other",
    ),
    ("qprof-wl;start_thread;server_conn;wl_pattern_init", "other"),
    (
        "qprof-wl;QuicSendFlush;__libc_sendmsg;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__sys_sendmsg_[k];"
        "___sys_sendmsg_[k];____sys_sendmsg_[k]",
        "send syscalls",
    ),
    (
        "qprof-wl;QuicSendFlush;__libc_sendmsg;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__sys_sendmsg_[k];"
        "___sys_sendmsg_[k];____sys_sendmsg_[k];udpv6_sendmsg_[k];udp_sendmsg_[k]",
        "kernel net stack",
    ),
    (
        "qprof-wl;__libc_sendmsg;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];syscall_trace_enter_[k];"
        "__bpf_trace_sys_enter_[k];bpf_trace_run2_[k];bpf_prog_5094dd60116f0407_sys_enter;htab_map_update_elem_[k]",
        "eBPF probes",
    ),
    (
        "qprof-wl;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];ksys_write_[k];vfs_write_[k];"
        "sock_write_iter_[k];tcp_sendmsg_[k];tcp_sendmsg_locked_[k];__tcp_push_pending_frames_[k];tcp_write_xmit_[k];"
        "_raw_spin_unlock_irqrestore_[k]",
        "kernel net stack",
    ),
    (
        "qprof-wl;[libcrypto.so.3];asm_sysvec_apic_timer_interrupt_[k];sysvec_apic_timer_interrupt_[k];"
        "__irq_exit_rcu_[k];handle_softirqs_[k];net_rx_action_[k];__napi_poll_[k];process_backlog_[k]",
        "device and softirq",
    ),
    (
        "qprof-wl;[libcrypto.so.3];asm_sysvec_apic_timer_interrupt_[k];sysvec_apic_timer_interrupt_[k];"
        "__irq_exit_rcu_[k];handle_softirqs_[k];net_rx_action_[k];__napi_poll_[k];process_backlog_[k];"
        "tcp_v4_rcv_[k];tcp_rcv_established_[k];tcp_data_queue_[k];sock_def_readable_[k];"
        "_raw_spin_unlock_irqrestore_[k]",
        "scheduling",
    ),
    (
        "qprof-wl;start_thread;CxPlatWorkerThread;epoll_wait;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "__x64_sys_epoll_wait_[k];do_epoll_wait_[k];schedule_hrtimeout_range_clock_[k];schedule_[k];__schedule_[k];"
        "finish_task_switch.isra.0_[k]",
        "scheduling",
    ),
    (
        "qprof-wl;__libc_sendmsg;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];__sys_sendmsg_[k];"
        "udp_sendmsg_[k];ip_output_[k];__dev_queue_xmit_[k];dev_hard_start_xmit_[k];start_xmit_[k];"
        "virtqueue_add_outbuf_[k];_raw_spin_unlock_irqrestore_[k]",
        "NIC driver",
    ),
    (
        "qprof-wl;[libcrypto.so.3];asm_common_interrupt_[k];common_interrupt_[k];__irq_exit_rcu_[k];"
        "handle_softirqs_[k];net_rx_action_[k];__napi_poll_[k];virtnet_poll_[k];receive_buf_[k]",
        "NIC driver",
    ),
    (
        "perf;__libc_start_call_main;[perf];__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];"
        "ksys_write_[k];vfs_write_[k];ext4_buffered_write_iter_[k];file_update_time_flags_[k]",
        "other",
    ),
    # quic-go, as a capture names it (issue 41): Go's AES-GCM under quic-go's
    # sealer is crypto; quic-go's own code and the transport's (package main)
    # protocol; Go's collector, allocator and scheduler are "runtime", but not
    # the goexit every goroutine's stack starts at, nor its memmove.
    (
        "qprof-wl;runtime.goexit.abi0;github.com/quic-go/quic-go.(*Conn).run;github.com/quic-go/quic-go."
        "(*packetPacker).appendShortHeaderPacket;github.com/quic-go/quic-go/internal/handshake.(*updatableAEAD).Seal;"
        "crypto/internal/fips140/aes/gcm.(*GCM).Seal;crypto/internal/fips140/aes/gcm.gcmAesEnc.abi0",
        "crypto",
    ),
    ("qprof-wl;runtime.goexit.abi0;github.com/quic-go/quic-go.(*Conn).run;runtime.selectgo", "runtime"),
    ("qprof-wl;runtime.goexit.abi0;runtime.gcBgMarkWorker;runtime.gcDrain;runtime.scanobject", "runtime"),
    ("qprof-wl;runtime.goexit.abi0;main.(*stream).reader;github.com/quic-go/quic-go.(*Stream).Read", "protocol"),
    (
        "qprof-wl;runtime.goexit.abi0;github.com/quic-go/quic-go.(*Conn).handleFrames;"
        "github.com/quic-go/quic-go/internal/wire.(*FrameParser).ParseStreamFrame;runtime.memmove",
        "copies",
    ),
    (
        "qprof-wl;runtime.goexit.abi0;main.(*stream).reader;runtime.cgocall;wlg_data;receive;wl_pattern_check.avx2",
        "verification",
    ),
    (
        "qprof-wl;runtime.goexit.abi0;github.com/quic-go/quic-go.(*Transport).listen;"
        "github.com/quic-go/quic-go.(*oobConn).ReadPacket;main.(*udpConn).ReadBatch;"
        "golang.org/x/net/ipv4.(*payloadHandler).ReadBatch;golang.org/x/net/internal/socket.(*Conn).recvMsgs",
        "receive syscalls",
    ),
    (
        "qprof-wl;runtime.goexit.abi0;crypto/tls.(*Conn).handshakeContext;crypto/internal/fips140/mlkem.kemKeyGen",
        "handshake",
    ),
]


@pytest.mark.parametrize("stack,expected", SHIPPED)
def test_shipped_rules(stack, expected):
    assert categories.Classifier().stack_category(stack) == expected


def test_shipped_rules_leave_lock_and_skid_frames_unmatched():
    c = categories.Classifier()
    for frame in (
        "_raw_spin_unlock_irqrestore_[k]",
        "_raw_spin_lock_bh_[k]",
        "__pv_queued_spin_lock_slowpath_[k]",
        "[unknown]",
        "[unknown] ",
        "malloc",
        "entry_SYSCALL_64_after_hwframe_[k]",
        "do_syscall_64_[k]",
    ):
        assert c.frame_category(frame) is None, frame


# --- stack quality ----------------------------------------------------------


@pytest.mark.parametrize(
    "stack,complete",
    [
        ("qprof-wl;start_thread;CxPlatWorkerThread;QuicWorkerLoop", True),
        ("qprof-wl;__libc_start_call_main;main;run_client", True),
        ("ksoftirqd/0;ret_from_fork_asm_[k];ret_from_fork_[k];kthread_[k];run_ksoftirqd_[k]", True),
        # A syscall or fault has a user-space caller: starting at the entry, the
        # stack lost its user part (DWARF: a process whose memory was going away).
        ("qprof-wl;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k]", False),
        ("bash;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k];x64_sys_call_[k];__x64_sys_exit_group_[k]", False),
        ("qprof-wl;asm_exc_page_fault_[k];exc_page_fault_[k]", False),
        ("qprof-wl;clone3;start_thread;CxPlatWorkerThread", True),
        # Go: a goroutine's stack starts at goexit, a runtime thread's own at
        # mstart; one that starts on the system stack lost its goroutine.
        ("qprof-wl;runtime.goexit.abi0;github.com/quic-go/quic-go.(*Conn).run", True),
        ("qprof-wl;runtime.mstart.abi0;runtime.mstart0;runtime.schedule", True),
        ("qprof-wl;runtime.systemstack.abi0;runtime.newstack", False),
        ("qprof-wl;CxPlatEncrypt;EVP_EncryptUpdate;ossl_gcm_stream_update", False),
        ("qprof-wl;[unknown];__strcmp_avx2", False),
        ("memfd:sealed-91;[unknown] ;[unknown] ;entry_SYSCALL_64_after_hwframe_[k]", False),
        ("qprof-wl;_aesni_ctr32_ghash_6x", False),
        ("qprof-wl;__GI___libc_write;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k]", False),
        ("qprof-wl;[libcrypto.so.3]", False),
        ("qprof-wl;kthread_[k];worker_thread_[k]", False),
        ("qprof-wl", False),
    ],
)
def test_stack_complete(stack, complete):
    assert normalize.stack_complete(stack) is complete


def test_stack_quality_is_the_share_of_samples():
    stacks = {"p;start_thread;a": 3, "p;[unknown];b": 1}
    fig = normalize.figures(stacks, 1_000_000, 10**9)
    assert fig.complete_samples == 3 and fig.stack_quality == pytest.approx(0.75)
    assert normalize.figures({}, 1_000_000, 10**9).stack_quality is None


# --- per-byte arithmetic ----------------------------------------------------


def test_ns_per_byte_and_categories_sum_to_it():
    stacks = {"p;QuicA": 600, "p;aesni_b": 400, "p;x": 2}
    fig = normalize.figures(stacks, 1_000_000, 2 * 10**9, rules(TWO_RULES))
    assert fig.ns_per_byte == pytest.approx(1002 * 1e6 / 2e9)
    assert fig.categories_ns_per_byte["protocol"] == pytest.approx(0.3)
    assert sum(fig.categories_ns_per_byte.values()) == pytest.approx(fig.ns_per_byte, rel=1e-12)


def test_per_byte_is_whole_femtoseconds_per_byte():
    # 1 sample of 1 ms over 2,000,000,000 bytes = 0.0005 ns/B = 500 fs/B.
    assert normalize.per_byte({"p;a": 1, "p;b": 3}, 1_000_000, 2 * 10**9) == {"p;a": 500, "p;b": 1_500}
    # Rounded to the nearest fs/B; a stack under half a unit is left out.
    assert normalize.per_byte({"p;a": 1, "p;b": 1}, 1, 3) == {"p;a": 333_333, "p;b": 333_333}
    assert normalize.per_byte({"p;a": 1}, 1, 3 * 10**6) == {}


def test_gap_percent():
    assert normalize.gap_percent(1.1, 1.0) == pytest.approx(10.0)
    assert normalize.gap_percent(0.9, 1.0) == pytest.approx(-10.0)
    assert normalize.gap_percent(1.0, None) is None
    assert normalize.gap_percent(0.02, -0.1) is None
    # of a base of a few samples, a percentage means nothing: not given
    assert normalize.gap_percent(0.2, 0.01, base_samples=3) is None
    assert normalize.gap_percent(1.1, 1.0, base_samples=500) == pytest.approx(10.0)
    assert normalize.base_samples(2.0, 1_000_000, 10_000_000) == pytest.approx(0.2)


def test_measured_others_side_is_the_rest():
    """Everything but the two processes, task by task from one source; a
    record without that figure has none, never the tick difference (which
    came out at -0.180 ns/B on a tcp-tls run)."""
    rec = {
        "bytes": 10**9,
        "cpu": {
            "client": {"total_s": 1.0, "ns_per_byte": {"total": 1.0}},
            "server": {"total_s": 0.5, "ns_per_byte": {"total": 0.5}},
            "system": {"total_s": 1.3, "ns_per_byte": {"total": 1.3}},
            "others": {"oncpu_schedstat_s": 0.25},
        },
    }
    assert sides.measured_ns_per_byte(rec, "client") == 1.0
    assert sides.measured_ns_per_byte(rec, "others") == pytest.approx(0.25)
    del rec["cpu"]["others"]
    assert sides.measured_ns_per_byte(rec, "others") is None
    assert sides.measured_ns_per_byte({"bytes": 1}, "server") is None


# --- perf's call graph and the fold -------------------------------------------


def test_recorder_call_graph(tmp_path):
    from qprof.collectors import perf

    assert perf.PerfRecorder(tmp_path, 99).call_graph == perf.DEFAULT_CALL_GRAPH
    assert perf.PerfRecorder(tmp_path, 99, call_graph="fp").call_graph == "fp"
    assert perf.record_call_graph("fp") == ["--call-graph", "fp"]
    assert perf.record_call_graph("dwarf") == ["--call-graph", f"dwarf,{perf.DWARF_STACK_BYTES}"]
    # A stack that needs a deeper copy of the user stack gets it (quinn's).
    assert perf.record_call_graph("dwarf", 32768) == ["--call-graph", "dwarf,32768"]
    deep = perf.PerfRecorder(tmp_path, 99, dwarf_bytes=32768).argv(tmp_path / "ctl", tmp_path / "ack")
    assert "dwarf,32768" in deep
    with pytest.raises(BadValue, match="lbr"):
        perf.PerfRecorder(tmp_path, 99, call_graph="lbr")


def test_fold_drops_clone_under_start_thread_only(tmp_path):
    from qprof.collectors import perf

    collapsed = (
        "qprof-wl-10;clone3;start_thread;worker;f 3\n"  # dwarf
        "qprof-wl-10;start_thread;worker;f 2\n"  # fp
        "qprof-wl-11;clone3;ret_from_fork_asm_[k] 1\n"
        "swapper-0;secondary_startup_64_[k] 9\n"
    )
    samples = perf.split_folded(collapsed, {"client": 10, "server": 11}, tmp_path)
    assert samples == {"client": 5, "server": 1, "others": 0}
    assert (
        tmp_path / "client.folded"
    ).read_text() == "qprof-wl;start_thread;worker;f 3\nqprof-wl;start_thread;worker;f 2\n"
    assert (tmp_path / "server.folded").read_text() == "qprof-wl;clone3;ret_from_fork_asm_[k] 1\n"


PERF_SCRIPT = (
    b"qprof-wl   377/391   [000]    65.328577: cpu-clock: \n"
    b"\tffffffff9592d2a5 tcp_sendmsg ([kernel.kallsyms])\n"
    b"\t          10a974 [unknown] (/usr/lib/x86_64-linux-gnu/libc.so.6)\n"
    b"\n"
    b"wl [3] 1.5: x   380/390   [001]    65.332646: cpu-clock: \n"
    b"\tffffffff95ff6fda [12] 3.25: odd_symbol ([kernel.kallsyms])\n"
    b"\n"
    b"python   192/192   [011]    65.320688: cpu-clock: \n"
    b"\t    7f74e7bae86a [unknown] ([unknown])"
)


@pytest.mark.parametrize("size", [1, 7, 64, 1 << 20])
def test_perf_script_blocks_are_whole_lines_and_count_each_sample_once(size):
    """fold's blocks of `perf script`: whole lines whatever the read size,
    together the stream unchanged; each sample's header counted once, on
    the CPU it names, and a frame that looks like a header's tail is not."""
    from qprof.collectors import perf

    blocks = list(perf.whole_lines(io.BufferedReader(io.BytesIO(PERF_SCRIPT)), size))
    assert b"".join(blocks) == PERF_SCRIPT
    assert all(b.endswith(b"\n") for b in blocks[:-1])
    per_cpu = {}
    for b in blocks:
        perf.count_cpus(b, per_cpu)
    assert per_cpu == {"0": 1, "1": 1, "11": 1}


def test_a_runs_own_rules_come_before_qprofs(tmp_path):
    """--categories: the run directory's categories.rules is tried before
    qprof's at each frame, for every reading of the run's stacks."""
    stack = "python3;start_thread;_PyEval_EvalFrameDefault"
    assert categories.for_run(tmp_path).stack_category(stack) == "other"
    (tmp_path / categories.RUN_RULES).write_text((REPO / "tests" / "data" / "aioquic.rules").read_text())
    own = categories.for_run(tmp_path)
    assert own.stack_category(stack) == "protocol"
    # qprof's rules still follow: a frame only they name keeps its category.
    assert own.stack_category("python3;start_thread;tcp_sendmsg_[k]") == "kernel net stack"
