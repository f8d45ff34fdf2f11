#!/usr/bin/env python3
"""A Dynamo-shaped kv-events publisher built on libzmq (python3-zmq) and
python3-msgpack: implementations independent of the router's own ZMTP
client and msgpack reader.

It binds an XPUB on 127.0.0.1 (an XPUB sends like a PUB and also reports
the subscription, so nothing is sent before the subscriber listens), prints
"port N", waits for the subscription, prints "subscribed <hex>", sends the
scripted RouterEvents below, prints "done", and exits when stdin closes.
"""
import argparse
import struct
import sys
import time

import msgpack
import zmq

TOPIC = "kv-events"


def emit(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def message(pid, seq, payload):
    """The four frames of one event-plane message, the envelope named."""
    env = pack({"topic": TOPIC, "publisher_id": pid, "sequence": seq,
                "published_at": int(time.time() * 1000), "payload": payload})
    frame = struct.pack(">BI", 1, len(env)) + env
    return [TOPIC.encode(), struct.pack(">Q", pid), struct.pack(">Q", seq), frame]


def router_event(worker, event_id, data, dp_rank=0, tier="device", residency=None):
    """A RouterEvent as rmp-serde's to_vec_named writes it."""
    ev = {"worker_id": worker, "storage_tier": tier}
    if residency is not None:
        ev["residency_domain"] = residency
    ev["event"] = {"event_id": event_id, "data": data, "dp_rank": dp_rank}
    return pack(ev)


def stored(parent, blocks, start=None):
    return {"stored": {"parent_hash": parent, "start_position": start,
                       "blocks": [{"block_hash": b, "tokens_hash": t, "mm_extra_info": mm} for b, t, mm in blocks]}}


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
    emit("subscribed " + sock.recv().hex())

    mm = {"mm_objects": [{"mm_hash": 9, "offsets": [[0, 3]]}]}
    payloads = [
        # A chain from the root: the largest u64 and a negative i64 hash.
        router_event(w, 1, stored(None, [(2**64 - 1, 1001, None), (-5, 1002, None)])),
        # Its child on rank 1, from a newest publisher (residency "worker"),
        # with multimodal info and a start position.
        router_event(w, 2, stored(-5, [(3, 1003, mm)], start=32), dp_rank=1, residency="worker"),
        # Two of those blocks evicted.
        router_event(w, 3, {"removed": {"block_hashes": [3, 2**64 - 1]}}),
        # A residency domain this router does not apply.
        router_event(w, 4, "cleared", residency="future_owner"),
        # The cache reset: the unit variant as a bare string.
        router_event(w, 5, "cleared"),
        # rmp-serde's positional to_vec form, on the host tier.
        pack([w, "host_pinned", [6, {"stored": [7, None, [[8, 1008, None]]]}, 0]]),
    ]
    for seq, payload in enumerate(payloads):
        sock.send_multipart(message(pid, seq, payload))
    emit("done")
    sys.stdin.read()  # until the test closes stdin
    sock.close()
    ctx.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
