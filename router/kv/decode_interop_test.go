package kv_test

import (
	"bufio"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/router/eventplane/zmtp"
	"switchyard/router/kv"
)

// decPython finds an interpreter that can import zmq and msgpack. Debian's
// packages live where only the system interpreter looks. libzmq is the
// independent peer of this test: a missing one fails it rather than
// skipping, so interop is never silently untested.
func decPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if p, err := exec.LookPath(py); err == nil && exec.Command(p, "-c", "import zmq, msgpack").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with zmq and msgpack: run hack/install-test-deps.sh (python3-zmq, python3-msgpack)")
	return ""
}

// decPeer runs a python peer and reads its line protocol.
type decPeer struct {
	lines chan string
}

func decRunPeer(t *testing.T, args ...string) *decPeer {
	t.Helper()
	cmd := exec.Command(decPython(t), args...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	p := &decPeer{lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("python stderr:\n%s", stderr.String())
		}
	})
	return p
}

func (p *decPeer) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok || !strings.HasPrefix(l, prefix) {
			t.Fatalf("python peer said %q, want %q...", l, prefix)
		}
		return strings.TrimSpace(strings.TrimPrefix(l, prefix))
	case <-time.After(30 * time.Second):
		t.Fatalf("python peer silent, want %q...", prefix)
	}
	return ""
}

// A libzmq publisher writing RouterEvents with python's msgpack, read by
// the router's own ZMTP client under the kv-events limits and decoded.
func TestDecodeInteropWithLibzmqAndPythonMsgpack(t *testing.T) {
	const worker, pub = 1736491, 2046539
	py := decRunPeer(t, "testdata/kv_events_pub.py", "--publisher-id", strconv.Itoa(pub), "--worker-id", strconv.Itoa(worker))
	port := py.expect(t, "port ")

	conn, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 10*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	// A stuck read ends with the connection rather than the test binary.
	stop := time.AfterFunc(60*time.Second, func() { conn.Close() })
	defer stop.Stop()
	sub, err := zmtp.Handshake(conn, [][]byte{[]byte(kv.KVEventsTopic)}, zmtp.KVEventLimits)
	require.NoError(t, err)
	require.Equal(t, "016b762d6576656e7473", py.expect(t, "subscribed "), "subscribed with 0x01 + kv-events")
	py.expect(t, "done")

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
