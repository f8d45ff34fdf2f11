#!/usr/bin/env python3
"""A libzmq DEALER that asks a replay socket for batches, as vLLM's
example subscriber does, for the fake fleet's replay tests.

Usage: replay_dealer.py ENDPOINT START_SEQ
Sends [b"", START_SEQ (8 bytes BE)] and prints one line per reply:
  "reply SEQ NFRAMES HEX(sha256 of the frames after the sequence)"
then "end" at the end marker ([b"", -1 as 8 signed BE bytes, b""]), or
"error ..." on anything else. Exits when its stdin closes.
"""
import hashlib
import sys

import zmq

END_SEQ = (-1).to_bytes(8, "big", signed=True)


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main():
    endpoint, start = sys.argv[1], int(sys.argv[2])
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send_multipart([b"", start.to_bytes(8, "big")])
    while True:
        if not sock.poll(30000):
            emit("error no reply within 30 s")
            break
        frames = sock.recv_multipart()
        if len(frames) < 3 or frames[0] != b"" or len(frames[1]) != 8:
            emit("error malformed reply of %d frames" % len(frames))
            break
        if frames[1] == END_SEQ:
            emit("end" if len(frames) == 3 and frames[2] == b"" else "error bad end marker")
            break
        h = hashlib.sha256()
        for f in frames[2:]:
            h.update(len(f).to_bytes(4, "big"))
            h.update(f)
        emit("reply %d %d %s" % (int.from_bytes(frames[1], "big"), len(frames) - 2, h.hexdigest()))
    sys.stdin.read()
    sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
