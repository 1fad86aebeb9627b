#!/usr/bin/python3
"""Measures one link of the network-namespace harness: the round trip and one TCP stream.

  link_probe.py serve PORT                      # in the far host: echoes, then sinks a stream
  link_probe.py probe HOST PORT [--mb 50] [--pings 20] [--streams 1]
                                                # prints: rtt_ms=<median> mbit_s=<stream rate>

The round trip is the median of --pings exchanges of one byte on a TCP connection with Nagle
off (after one warm-up exchange); the stream is --mb MB sent on fresh connections (--streams of them,
an equal share each, at once), timed from the first byte written to the receivers'
acknowledgement of the last.
"""
import socket
import statistics
import sys
import threading
import time


def serve(port):
    listener = socket.create_server(("0.0.0.0", port))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()


def answer(conn):
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        kind = conn.recv(1)
        if kind == b"p":  # echo single bytes until closed
            while (b := conn.recv(1)):
                conn.sendall(b)
        elif kind == b"s":  # sink the announced bytes, then acknowledge
            total = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
            while total > 0:
                total -= len(conn.recv(1 << 20))
            conn.sendall(b"k")


def probe(host, port, mb, pings, streams):
    with socket.create_connection((host, port)) as conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(b"p")
        times = []
        for i in range(pings + 1):
            start = time.monotonic()
            conn.sendall(b"x")
            conn.recv(1)
            times.append(time.monotonic() - start)
        rtt = statistics.median(times[1:])
    payload = bytes(1 << 20)
    total = int(mb * 1e6)
    share = total // streams

    def send(conn):
        left = share
        while left > 0:
            n = min(left, len(payload))
            conn.sendall(payload[:n])
            left -= n
        conn.recv(1)

    conns = [socket.create_connection((host, port)) for _ in range(streams)]
    for conn in conns:
        conn.sendall(b"s" + share.to_bytes(8, "big"))
    start = time.monotonic()
    threads = [threading.Thread(target=send, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - start
    total = share * streams
    for conn in conns:
        conn.close()
    print(f"rtt_ms={rtt * 1e3:.2f} mbit_s={total * 8 / seconds / 1e6:.1f}", flush=True)


def main():
    if sys.argv[1] == "serve":
        serve(int(sys.argv[2]))
    else:
        args = sys.argv[2:]
        mb = float(args[args.index("--mb") + 1]) if "--mb" in args else 50
        pings = int(args[args.index("--pings") + 1]) if "--pings" in args else 20
        streams = int(args[args.index("--streams") + 1]) if "--streams" in args else 1
        probe(args[0], int(args[1]), mb, pings, streams)


if __name__ == "__main__":
    main()
