#!/usr/bin/env python3
"""libzmq publisher for the zmtp interop tests (an implementation independent
of both zmq4 and the package under test).

Protocol with the Go test, one line per event on stdout:
  "port N"            bound to tcp://127.0.0.1:N
  "subscribed HEX"    (xpub mode) the subscription message libzmq received
  "done"              all messages sent

pub mode: a plain PUB cannot tell when a subscription has been applied, so it
sends hello messages (sequence 0) every 10 ms until the test writes "go" on
stdin, after having received one. xpub mode: the XPUB reports the
subscription itself, then publishing starts at once.

Each message is [b"kv_metrics", publisher id u64 BE, sequence u64 BE,
payload]; between them a message on topic b"kv-events" is sent that the
subscriber must never see (PUB/XPUB filter by prefix). With --gap-ms the
publisher pauses halfway; with --heartbeat-ms libzmq pings the subscriber and
drops it unless it answers PONG within 3 intervals.
"""
import argparse
import select
import struct
import sys
import time

import zmq

PUBLISHER_ID = 0x5157495443485944  # "SWITCHYD"


def payload(seq):
    return bytes((seq + i) % 251 for i in range(180 + seq % 64))


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stdin_line(timeout):
    ready, _, _ = select.select([sys.stdin], [], [], timeout)
    if not ready:
        return None
    return sys.stdin.readline().strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["pub", "xpub"], default="pub")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--gap-ms", type=int, default=0)
    ap.add_argument("--heartbeat-ms", type=int, default=0)
    args = ap.parse_args()

    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB if args.mode == "xpub" else zmq.PUB)
    sock.setsockopt(zmq.LINGER, 2000)
    # No high-water mark: at the default of 1000 a PUB silently drops what a
    # subscriber slowed by a busy machine has not read yet, and the test
    # would see a sequence gap.
    sock.setsockopt(zmq.SNDHWM, 0)
    if args.heartbeat_ms:
        sock.setsockopt(zmq.HEARTBEAT_IVL, args.heartbeat_ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, 3 * args.heartbeat_ms)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    emit("port %d" % port)

    pid = struct.pack(">Q", PUBLISHER_ID)
    deadline = time.monotonic() + 30
    if args.mode == "xpub":
        if not sock.poll(30000):
            emit("error no subscription")
            return 2
        emit("subscribed " + sock.recv().hex())
    else:
        while True:
            sock.send_multipart([b"kv_metrics", pid, struct.pack(">Q", 0), b"hello"])
            line = stdin_line(0.01)
            if line == "go":
                break
            if line == "" or time.monotonic() > deadline:
                emit("error no go")
                return 2

    for seq in range(1, args.count + 1):
        if args.gap_ms and seq == args.count // 2 + 1:
            time.sleep(args.gap_ms / 1000)
        sock.send_multipart([b"kv-events", b"not for this subscriber"])
        sock.send_multipart([b"kv_metrics", pid, struct.pack(">Q", seq), payload(seq)])
    emit("done")
    # Keep the connection until the test has read everything.
    stdin_line(30)
    sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
