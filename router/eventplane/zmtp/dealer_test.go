package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/go-zeromq/zmq4"

	"switchyard/router/envelope"
)

func routerHello(minor byte) []byte {
	return append(peerGreeting(3, minor, "NULL"), readyCommand(property("Socket-Type", "ROUTER"), property("Identity", ""))...)
}

// expectDealer reads what HandshakeDealer must write (greeting 3.0/NULL,
// READY with Socket-Type DEALER) and then one message of the given frames.
func expectDealer(c net.Conn, frames ...[]byte) error {
	want := peerGreeting(3, 0, "NULL")
	want = append(want, readyCommand(property("Socket-Type", "DEALER"))...)
	want = append(want, message(frames...)...)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("reading dealer handshake and request: %w", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("dealer wrote\n got %x\nwant %x", got, want)
	}
	return nil
}

func replyFrames(seq int64, payload []byte) [][]byte {
	return [][]byte{{}, binary.BigEndian.AppendUint64(nil, uint64(seq)), payload}
}

func TestDealerRequestAndRepliesByteExact(t *testing.T) {
	request := [][]byte{{}, binary.BigEndian.AppendUint64(nil, 7)}
	big := bytes.Repeat([]byte("abcdefgh"), 400) // larger than the read buffer
	client, wait := rawPeer(t, func(c net.Conn) error {
		if _, err := c.Write(routerHello(1)); err != nil {
			return err
		}
		if err := expectDealer(c, request...); err != nil {
			return err
		}
		var out []byte
		out = append(out, command("PING", []byte{0, 10, 'h', 'b'})...)
		out = append(out, message(replyFrames(7, []byte("seven"))...)...)
		out = append(out, message(replyFrames(8, big)...)...)
		out = append(out, message(replyFrames(-1, nil)...)...)
		if _, err := c.Write(out); err != nil {
			return err
		}
		return holdOpen(c)
	})
	d, err := HandshakeDealer(client, envelope.KVEventLimits)
	if err != nil {
		t.Fatal(err)
	}
	if d.PeerMinor() != 1 {
		t.Fatalf("PeerMinor %d", d.PeerMinor())
	}
	if err := d.Send(request...); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][][]byte{replyFrames(7, []byte("seven")), replyFrames(8, big), replyFrames(-1, nil)} {
		got, err := d.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("got %d frames, want %d", len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("frame %d: got %q, want %q", i, got[i], want[i])
			}
		}
	}
	client.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestDealerRefusals(t *testing.T) {
	cases := []struct {
		name, want string
		peer       []byte
	}{
		{"pub peer", "cannot serve a DEALER", pubHello(1)},
		{"sub peer", "cannot serve a DEALER", append(peerGreeting(3, 1, "NULL"), readyCommand(property("Socket-Type", "SUB"))...)},
		{"error", "peer sent ERROR", append(peerGreeting(3, 1, "NULL"), command("ERROR", []byte{4, 'b', 'u', 's', 'y'})...)},
		{"not zmtp", "not a ZMTP peer", []byte("HTTP/1.1 400 Bad Request\r\n\r\n")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client, _ := rawPeer(t, writeThenHold(c.peer))
			_, err := HandshakeDealer(client, testLimits)
			wantProtocolError(t, err, c.want)
		})
	}
}

// A reply is read under the same ceilings as a subscription's message.
func TestDealerRepliesKeepTheLimits(t *testing.T) {
	cases := []struct {
		name, want string
		reply      []byte
	}{
		{"oversized frame", "exceeds 1024", message([]byte{}, make([]byte, 8), make([]byte, 1025))},
		{"declared terabyte", "exceeds 1024", append([]byte{0x02}, binary.BigEndian.AppendUint64(nil, 1<<40)...)},
		{"too many frames", "more than 4 frames", message([]byte{}, []byte{1}, []byte{2}, []byte{3}, []byte{4})},
		{"message too large", "exceeds 2048", message(make([]byte, 1000), make([]byte, 1000), make([]byte, 1000))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client, _ := rawPeer(t, func(conn net.Conn) error {
				if _, err := conn.Write(append(routerHello(0), c.reply...)); err != nil {
					return err
				}
				return holdOpen(conn)
			})
			d, err := HandshakeDealer(client, testLimits)
			if err != nil {
				t.Fatal(err)
			}
			_, err = d.ReadMessage()
			wantProtocolError(t, err, c.want)
			if _, again := d.ReadMessage(); again != err {
				t.Fatalf("second read returned %v, want the first error", again)
			}
			if serr := d.Send([]byte("x")); serr != err {
				t.Fatalf("send after a failed read returned %v, want the read's error", serr)
			}
		})
	}
}

func TestDealerRefusesAnEmptySend(t *testing.T) {
	client, _ := rawPeer(t, writeThenHold(routerHello(1)))
	d, err := HandshakeDealer(client, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(); !errors.Is(err, errEmptyMessage) {
		t.Fatalf("empty send: %v", err)
	}
}

// zmq4's ROUTER is an independent ZMTP implementation: it sees our
// request behind the identity it assigned, and routes replies back.
func TestDealerAgainstZmq4Router(t *testing.T) {
	router := zmq4.NewRouter(context.Background())
	if err := router.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Close() })
	conn, err := net.Dial("tcp", router.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	d, err := HandshakeDealer(conn, envelope.KVEventLimits)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send([]byte{}, binary.BigEndian.AppendUint64(nil, 42)); err != nil {
		t.Fatal(err)
	}
	req, err := router.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(req.Frames) != 3 || len(req.Frames[1]) != 0 || binary.BigEndian.Uint64(req.Frames[2]) != 42 {
		t.Fatalf("router received %q", req.Frames)
	}
	id := req.Frames[0]
	for _, f := range [][][]byte{replyFrames(42, []byte("p42")), replyFrames(-1, nil)} {
		if err := router.Send(zmq4.NewMsgFrom(append([][]byte{id}, f...)...)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int64{42, -1} {
		msg, err := d.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if len(msg) != 3 || len(msg[0]) != 0 || int64(binary.BigEndian.Uint64(msg[1])) != want {
			t.Fatalf("reply %q, want seq %d", msg, want)
		}
	}
}
