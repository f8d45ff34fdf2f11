#!/usr/bin/env python3
"""A libzmq ROUTER that answers replay requests as vLLM's ZMQ KV-event
publisher does, for the replay interop tests.

The buffer holds batches --first .. --first+--count-1 (at most --buffer of
them, the oldest dropped first, like vLLM's bounded deque). A request from
a DEALER is [identity, b"", start_seq (8 bytes BE)]; every buffered batch
with seq >= start_seq is sent as [identity, b"", seq (8 bytes BE), payload],
then the end marker [identity, b"", -1 as 8 signed BE bytes, b""].

--mode changes the replies to exercise the client's refusals:
  vllm         as above
  silent       read the request, never answer
  short        replies without a payload frame
  seqlen       a 4-byte sequence frame
  repeat       the second batch repeats the first's sequence
  delimiter    a non-empty first frame
  oversized    the second batch's payload is --payload-bytes long
  noend        the batches, then close without the end marker

Lines on stdout: "port N" once bound, "request S" per request received,
"sent N" after answering. The script exits when its stdin closes.
"""
import argparse
import collections
import struct
import sys

import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def payload(seq, size=0):
    if size:
        return bytes(seq % 251 for _ in range(size))
    return bytes((seq + i) % 251 for i in range(40 + seq % 32))


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="vllm")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--buffer", type=int, default=10000)
    ap.add_argument("--payload-bytes", type=int, default=0)
    args = ap.parse_args()

    buf = collections.deque(maxlen=args.buffer)
    for seq in range(args.first, args.first + args.count):
        buf.append((seq, payload(seq)))

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.setsockopt(zmq.SNDHWM, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    emit("port %d" % port)

    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        events = dict(poller.poll())
        if sys.stdin.fileno() in events or sys.stdin in events:
            if sys.stdin.readline() == "":
                break
        if sock not in events:
            continue
        frames = sock.recv_multipart()
        if len(frames) != 3:
            emit("bad request %d frames" % len(frames))
            continue
        client, _, start = frames
        start_seq = int.from_bytes(start, "big")
        emit("request %d" % start_seq)
        mode = args.mode
        if mode == "silent":
            continue
        sent = 0
        for i, (seq, data) in enumerate(b for b in buf if b[0] >= start_seq):
            head = b""
            seqb = struct.pack(">Q", seq)
            if mode == "repeat" and i == 1:
                seqb = struct.pack(">Q", seq - 1)
            if mode == "seqlen":
                seqb = seqb[4:]
            if mode == "delimiter":
                head = b"x"
            if mode == "oversized" and i == 1:
                data = payload(seq, args.payload_bytes)
            msg = [client, head, seqb] + ([] if mode == "short" else [data])
            sock.send_multipart(msg)
            sent += 1
        if mode == "noend":
            emit("sent %d" % sent)
            sock.close(linger=2000)
            sys.stdin.read()
            return 0
        sock.send_multipart([client, b"", END_SEQ, b""])
        emit("sent %d" % sent)
    sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
