package kv_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/internal/pypeer"
	"switchyard/router/envelope"
	"switchyard/router/eventplane/zmtp"
	"switchyard/router/kv"
)

// A libzmq publisher writing RouterEvents with python's msgpack, read by
// the router's own ZMTP client under the kv-events limits and decoded.
func TestDecodeInteropWithLibzmqAndPythonMsgpack(t *testing.T) {
	const worker, pub = 1736491, 2046539
	py := pypeer.Start(t, "testdata/kv_events_pub.py", "--publisher-id", strconv.Itoa(pub), "--worker-id", strconv.Itoa(worker))
	port := py.Expect(t, "port ")

	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	// A stuck read ends with the connection rather than the test binary.
	stop := time.AfterFunc(60*time.Second, func() { conn.Close() })
	defer stop.Stop()
	sub, err := zmtp.Handshake(conn, [][]byte{[]byte(kv.KVEventsTopic)}, envelope.KVEventLimits)
	require.NoError(t, err)
	require.Equal(t, "016b762d6576656e7473", py.Expect(t, "subscribed "), "subscribed with 0x01 + kv-events")
	py.Expect(t, "done")

	minus5 := uint64(1<<64 - 5)
	want := []struct {
		res kv.DecodeResult
		ev  kv.Event
	}{
		{kv.DecodeOK, kv.Event{WorkerID: worker, EventID: 1, Kind: kv.Stored,
			Blocks: []kv.StoredBlock{{BlockHash: 1<<64 - 1, TokensHash: 1001}, {BlockHash: minus5, TokensHash: 1002}}}},
		{kv.DecodeOK, kv.Event{WorkerID: worker, DPRank: 1, EventID: 2, Kind: kv.Stored, ParentHash: minus5, HasParent: true,
			Blocks: []kv.StoredBlock{{BlockHash: 3, TokensHash: 1003}}}},
		{kv.DecodeOK, kv.Event{WorkerID: worker, EventID: 3, Kind: kv.Removed, Removed: []uint64{3, 1<<64 - 1}}},
		{kv.DecodeResidencyRefused, kv.Event{}},
		{kv.DecodeOK, kv.Event{WorkerID: worker, EventID: 5, Kind: kv.Cleared}},
		{kv.DecodeOK, kv.Event{WorkerID: worker, EventID: 6, Tier: kv.TierHostPinned, Kind: kv.Stored, ParentHash: 7, HasParent: true,
			Blocks: []kv.StoredBlock{{BlockHash: 8, TokensHash: 1008}}}},
	}
	d := kv.NewKVEventsDecoder()
	var ev kv.Event
	for i, w := range want {
		frames, err := sub.ReadMessage()
		require.NoError(t, err, "message %d", i)
		pid, seq, res := d.Decode(frames, &ev)
		require.Equal(t, w.res, res, "message %d", i)
		require.Equal(t, uint64(pub), pid)
		require.Equal(t, uint64(i), seq)
		require.Equal(t, w.ev, decNorm(ev), "message %d", i)
	}
}
