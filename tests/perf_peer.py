# SPDX-License-Identifier: GPL-2.0-only
"""A QUIC performance protocol peer (draft-banks-quic-performance, ALPN
"perf") written here in aioquic (PyPI): not qprof-wl, not one of its
libraries; its bytes are zeros, not qprof's pattern.

Imported by the tests that run it beside qprof-wl (tests/test_wl_perf.py),
and run as a program of its own where a test needs another
implementation's server (--server-cmd, tests/test_external.py):

    python tests/perf_peer.py --addr A --port P --cert C --key K [--short N]

--short N answers N bytes fewer than each stream asks: a server that
answers short, for the client to catch.
"""

import argparse
import asyncio
import ssl
import struct

CHUNK = 1 << 16
WINDOW = 4 << 20  # unacknowledged answer bytes at most


def aioquic_config(client: bool, cert_file: str = "", key_file: str = "", aes128_first: bool = False):
    """aes128_first: AES-128-GCM ahead of the AES-256-GCM aioquic prefers,
    for a peer whose TLS cannot narrow TLS 1.3's suites to it and so
    refuses another (tquic's vendored BoringSSL); the other libraries
    offer it alone."""
    from aioquic.quic.configuration import QuicConfiguration
    from aioquic.tls import CipherSuite

    cfg = QuicConfiguration(is_client=client, alpn_protocols=["perf"])
    if aes128_first:
        cfg.cipher_suites = [CipherSuite.AES_128_GCM_SHA256, CipherSuite.AES_256_GCM_SHA384]
    if client:
        cfg.verify_mode = ssl.CERT_NONE  # the run's certificate is self-signed, as secnetperf's client takes it
    else:
        cfg.load_cert_chain(cert_file, key_file)
    return cfg


async def perf_request(conn, want: int, upload: int) -> int:
    """One perf request on a new bidirectional stream: the count, `upload`
    bytes, FIN; the answer's length."""
    reader, writer = await conn.create_stream()
    writer.write(struct.pack(">Q", want))
    for off in range(0, upload, CHUNK):
        writer.write(bytes(min(CHUNK, upload - off)))
        await writer.drain()
    writer.write_eof()
    got = 0
    while chunk := await reader.read(CHUNK):
        got += len(chunk)
    return got


async def aioquic_connection(port: int, want: int, upload: int, aes128_first: bool = False) -> int:
    from aioquic.asyncio import connect

    async with connect("127.0.0.1", port, configuration=aioquic_config(True, aes128_first=aes128_first)) as conn:
        return await perf_request(conn, want, upload)


async def aioquic_client(port: int, requests: list, aes128_first: bool = False) -> list:
    """Each request on a connection of its own, at once (qprof-wl's bulk
    both ways takes a connection each way, as iperf3 --bidir)."""
    return list(await asyncio.gather(*(aioquic_connection(port, w, up, aes128_first) for w, up in requests)))


async def aioquic_server(
    addr: str,
    port: int,
    cert_file: str,
    key_file: str,
    uploads: list,
    short: int = 0,
    aes128_first: bool = False,
    create_protocol=None,
):
    """A perf server: each stream's count read, its request read to its
    FIN (its length appended to uploads), then the count answered (less
    `short`) and FIN; a stream its client stops ends the answer.
    create_protocol: each connection's protocol, as aioquic's serve() takes it."""
    from aioquic.asyncio import QuicConnectionProtocol, serve

    async def answer(reader, writer):
        want = struct.unpack(">Q", await reader.readexactly(8))[0]
        got = 0
        while chunk := await reader.read(CHUNK):
            got += len(chunk)
        uploads.append(got)
        want = max(0, want - short)
        # aioquic buffers whatever is written, at once and without limit:
        # the answer waits while a window's worth is unacknowledged, and
        # ends when its client stops it (STOP_SENDING resets the stream).
        adapter = writer.transport
        sender = adapter.protocol._quic._streams[adapter.stream_id].sender
        off = 0
        while off < want:
            if sender.reset_pending or sender._reset_error_code is not None:
                adapter._closing = True  # no FIN after a reset when the writer is collected
                return
            if sender._buffer_stop - sender._buffer_start > WINDOW:
                await asyncio.sleep(0.001)
                continue
            n = min(CHUNK, want - off)
            writer.write(bytes(n))
            off += n
            await asyncio.sleep(0)
        writer.write_eof()

    def on_stream(reader, writer):
        asyncio.ensure_future(answer(reader, writer))

    config = aioquic_config(False, cert_file, key_file, aes128_first)
    return await serve(
        addr,
        port,
        configuration=config,
        stream_handler=on_stream,
        create_protocol=create_protocol or QuicConnectionProtocol,
    )


def losing_first_close(ended: asyncio.Future):
    """A server connection's protocol that loses the first CONNECTION_CLOSE
    its client sends, as if the packet that carried it never came (the
    frame read and dropped, the rest of the packet taken but its number
    not), and sends a PING then, as a server still sending would: a client in its closing
    period (RFC 9000 10.2.1) answers with its close again. `ended` gets
    the ConnectionTerminated the connection ends with."""
    from aioquic.asyncio import QuicConnectionProtocol
    from aioquic.quic.events import ConnectionTerminated

    class Losing(QuicConnectionProtocol):
        def __init__(self, quic, *args, **kwargs):
            super().__init__(quic, *args, **kwargs)
            handlers = quic._QuicConnection__frame_handlers
            lost = []

            for kind in (0x1C, 0x1D):  # CONNECTION_CLOSE, transport and application
                handle, epochs = handlers[kind]

                def lose_first(context, frame_type, buf, handle=handle):
                    if lost:
                        return handle(context, frame_type, buf)
                    buf.pull_uint_var()  # its error code
                    if frame_type == 0x1C:
                        buf.pull_uint_var()  # the frame type it names
                    buf.pull_bytes(buf.pull_uint_var())  # its reason
                    lost.append(frame_type)
                    quic.send_ping(1)  # sent once this datagram is taken

                handlers[kind] = (lose_first, epochs)

            receive = quic.receive_datagram

            def receive_datagram(data, addr, now):
                """The datagram that carried the lost close, as if it never
                came: its packet numbers not taken as received, so that a
                copy of the same packet (RFC 9000 10.2.1 allows the exact
                packet again) is not dropped as a duplicate."""
                spaces = quic._spaces.values()
                before = [set(s.received_packets._received) for s in spaces]
                lost_before = len(lost)
                receive(data, addr, now)
                if len(lost) == lost_before:
                    return
                for space, was in zip(spaces, before):
                    for pn in space.received_packets._received - was:
                        space.received_packets._received.discard(pn)
                        space.ack_queue.subtract(pn, pn + 1)

            quic.receive_datagram = receive_datagram

        def quic_event_received(self, event):
            if isinstance(event, ConnectionTerminated) and not ended.done():
                ended.set_result(event)
            super().quic_event_received(event)

    return Losing


async def serve_forever(args) -> None:
    await aioquic_server(args.addr, args.port, args.cert, args.key, [], args.short)
    await asyncio.Event().wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="an aioquic perf server, until killed")
    parser.add_argument("--addr", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--short", type=int, default=0)
    asyncio.run(serve_forever(parser.parse_args()))
