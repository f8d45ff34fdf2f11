#!/usr/bin/env python3
"""A Dynamo-shaped kv_metrics publisher built on libzmq (python3-zmq) and
python3-msgpack: implementations independent of the router's own ZMTP
client and msgpack reader.

It binds an XPUB on 127.0.0.1 (an XPUB sends exactly like a PUB, and also
reports the subscription, so nothing is sent before the subscriber listens),
prints "port N", waits for the subscription, prints "subscribed", sends the
scripted messages below, prints "done", and exits when stdin closes.
"""
import argparse
import struct
import sys
import time

import msgpack
import zmq


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def frame(payload, version=1, declared=None):
    size = len(payload) if declared is None else declared
    return struct.pack(">BI", version, size) + payload


def envelope(pid, seq, payload, positional=False, extra=False):
    if positional:
        # rmp-serde to_vec: the struct as an array in declaration order.
        return msgpack.packb(["kv_metrics", pid, seq, int(time.time() * 1000), payload], use_bin_type=True)
    env = {"topic": "kv_metrics", "publisher_id": pid, "sequence": seq,
           "published_at": int(time.time() * 1000), "payload": payload}
    if extra:
        env["published_at_ns"] = time.time_ns()
    return msgpack.packb(env, use_bin_type=True)


def active_load(worker, rank, kv_used, decode=None, positional=False):
    fields = [worker, rank, decode, None, None, kv_used]
    if positional:
        return msgpack.packb(fields, use_bin_type=True)
    names = ["worker_id", "dp_rank", "active_decode_blocks", "active_prefill_tokens",
             "scheduler_load_scope", "kv_used_blocks"]
    return msgpack.packb(dict(zip(names, fields)), use_bin_type=True)


def message(topic, pid, seq, body):
    return [topic, struct.pack(">Q", pid), struct.pack(">Q", seq), body]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--publisher-id", type=int, required=True)
    ap.add_argument("--worker-id", type=int, required=True)
    args = ap.parse_args()
    pid, w = args.publisher_id, args.worker_id

    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.LINGER, 1000)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    emit("port %d" % port)
    if not sock.poll(20000):
        emit("no subscriber")
        return 1
    sub = sock.recv()
    emit("subscribed " + sub.hex())

    script = [
        # 1: the Dynamo 1.4.2 dynamo.vllm shape: named maps, active_* nil.
        message(b"kv_metrics", pid, 1, frame(envelope(pid, 1, active_load(w, 0, 10)))),
        # 2: positional envelope and payload (rmp-serde to_vec).
        message(b"kv_metrics", pid, 2, frame(envelope(pid, 2, active_load(w, 1, 20, positional=True), positional=True))),
        # 2 again: a replay on the same stream.
        message(b"kv_metrics", pid, 2, frame(envelope(pid, 2, active_load(w, 1, 99)))),
        # 3: a newer envelope with published_at_ns.
        message(b"kv_metrics", pid, 3, frame(envelope(pid, 3, active_load(w, 0, 11, decode=5), extra=True))),
        # Another topic: the publisher filters it out.
        message(b"kv-events", pid, 4, frame(b"\x80")),
        # 5: sequence 4 never came; samples held from this publisher are stale.
        message(b"kv_metrics", pid, 5, frame(envelope(pid, 5, active_load(w, 0, 12)))),
        # Frame version 2.
        message(b"kv_metrics", pid, 6, frame(envelope(pid, 6, active_load(w, 0, 13)), version=2)),
        # A declared payload over 16 KiB, refused before parsing.
        message(b"kv_metrics", pid, 7, frame(b"", declared=20000)),
    ]
    for parts in script:
        sock.send_multipart(parts)
    emit("done")
    sys.stdin.read()  # until the test closes stdin
    sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
