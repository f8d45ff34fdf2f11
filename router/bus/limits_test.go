package bus

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"switchyard/router/bus/wire"
)

// rawH2 is an HTTP/2 client at the frame level over real TLS 1.3, to see
// what the listener's server sends (SETTINGS, WINDOW_UPDATE, PING,
// GOAWAY) and to answer PINGs without ever making a request.
type rawH2 struct {
	t    *testing.T
	conn *tls.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
	wmu  sync.Mutex // frames are written from the reader (acks) and the test
}

func dialRaw(t *testing.T, p *pki, addr string) *rawH2 {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: p.roots, ServerName: "localhost",
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	r := &rawH2{t: t, conn: c, fr: http2.NewFramer(c, c)}
	r.fr.SetMaxReadFrameSize(1 << 24)
	r.enc = hpack.NewEncoder(&r.hbuf)
	if err := r.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return r
}

// read returns the next frame other than SETTINGS and PING, which it
// acknowledges (counting the server's PINGs); nil when the connection
// ended. The deadline is generous: the test's conditions, not the
// deadline, decide.
func (r *rawH2) read(pings *int) http2.Frame {
	for {
		_ = r.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		f, err := r.fr.ReadFrame()
		if err != nil {
			return nil
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				r.wmu.Lock()
				_ = r.fr.WriteSettingsAck()
				r.wmu.Unlock()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				if pings != nil {
					*pings++
				}
				r.wmu.Lock()
				_ = r.fr.WritePing(true, f.Data)
				r.wmu.Unlock()
			}
		default:
			return f
		}
	}
}

// openSession sends a session request on stream 1 with hello and reads
// the 200 and the welcome.
func (r *rawH2) openSession(token string, hello *wire.Message) {
	r.t.Helper()
	r.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "localhost"},
		{":path", wire.SessionPath}, {"authorization", "Bearer " + token}, {wire.VersionHeader, "1"}} {
		_ = r.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.hbuf.Bytes(), EndHeaders: true}); err != nil {
		r.t.Fatal(err)
	}
	b, _ := wire.Append(nil, hello)
	if err := r.fr.WriteData(1, false, b); err != nil {
		r.t.Fatal(err)
	}
	gotStatus, gotWelcome := false, false
	for !gotStatus || !gotWelcome {
		switch f := r.read(nil).(type) {
		case nil:
			r.t.Fatal("connection ended before the welcome")
		case *http2.HeadersFrame:
			fields, err := hpack.NewDecoder(4096, nil).DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				r.t.Fatal(err)
			}
			for _, hf := range fields {
				if hf.Name == ":status" && hf.Value != "200" {
					r.t.Fatalf("session answered %s", hf.Value)
				}
			}
			gotStatus = true
		case *http2.DataFrame:
			gotWelcome = bytes.Contains(f.Data(), []byte(`"welcome"`))
		}
	}
}

// The server's first frames carry the derived bounds, whatever the client
// asks for: the stream window and largest read frame are the per-stream
// buffer, the connection window max_session_buffer_bytes.
func TestServerAnnouncesDerivedWindows(t *testing.T) {
	p := newPKI(t)
	for _, c := range []struct {
		sessionBuffer int64
		streams       int
		buffer        int
	}{
		{64 << 20, 1024, 16 << 10}, // the defaults
		{64 << 20, 64, 256 << 10},
		{64 << 20, 8, 1 << 20}, // clamped at 1 MiB
	} {
		s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
		s.MaxSessionBufferBytes, s.MaxStreamsPerSession = c.sessionBuffer, c.streams
		_, addr := startListener(t, s)
		r := dialRaw(t, p, addr)
		_ = r.conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		f, err := r.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			t.Fatalf("first frame %v, want the server's SETTINGS", f)
		}
		want := map[http2.SettingID]uint32{
			http2.SettingInitialWindowSize:    uint32(c.buffer),
			http2.SettingMaxFrameSize:         uint32(c.buffer),
			http2.SettingMaxConcurrentStreams: uint32(c.streams + 2),
		}
		for id, v := range want {
			if got, ok := sf.Value(id); !ok || got != v {
				t.Errorf("%d streams: %v = %d (sent %v), want %d", c.streams, id, got, ok, v)
			}
		}
		if got := StreamBuffer(c.sessionBuffer, c.streams); got != c.buffer {
			t.Errorf("StreamBuffer = %d, want %d", got, c.buffer)
		}
		// The connection window grows from HTTP/2's 65,535 to the session
		// budget with one WINDOW_UPDATE on stream 0.
		wu, ok := r.read(nil).(*http2.WindowUpdateFrame)
		if !ok || wu.StreamID != 0 || int64(wu.Increment)+65535 != c.sessionBuffer {
			t.Fatalf("want a connection WINDOW_UPDATE to %d, got %+v", c.sessionBuffer, wu)
		}
	}
}

// More than 4 × max_sessions (at least 16) open connections: the next is
// closed at accept and counted.
func TestConnectionLimit(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
	s.MaxSessions = 2 // 4 × 2 = 8, raised to the floor of 16
	l, addr := startListener(t, s)
	limit := ConnectionLimit(s.MaxSessions)
	if limit != MinConnections {
		t.Fatalf("limit %d", limit)
	}
	// Connections that never send a byte wait out the (10 s) first-byte
	// timeout, holding their place.
	for i := 0; i < limit; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	waitFor(t, "16 open connections", func() bool { return testutil.ToFloat64(l.Metrics().Connections) == float64(limit) })
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	_ = extra.SetReadDeadline(time.Now().Add(20 * time.Second))
	if n, err := extra.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("the connection over the limit read %d, %v; want it closed", n, err)
	}
	if got := refusals(l, wire.CodeConnectionLimit); got != 1 {
		t.Fatalf("connection_limit counted %v times", got)
	}
	if got := testutil.ToFloat64(l.Metrics().Connections); got != float64(limit) {
		t.Fatalf("connections gauge %v", got)
	}
}

// A TLS connection that answers PINGs but never has a request accepted is
// closed at auth_timeout; one with an accepted session is not.
func TestAuthTimeoutDespitePings(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
	s.AuthTimeout = 600 * time.Millisecond
	s.PingInterval = 50 * time.Millisecond
	l, addr := startListener(t, s)

	start := time.Now() // before the server's timer can start
	silent := dialRaw(t, p, addr)
	pings := 0
	for silent.read(&pings) != nil {
	}
	if elapsed := time.Since(start); elapsed < s.AuthTimeout {
		t.Fatalf("closed after %v, before auth_timeout", elapsed)
	}
	if pings == 0 {
		t.Fatal("the server sent no keepalive PING")
	}
	if got := refusals(l, wire.CodeAuthTimeout); got != 1 {
		t.Fatalf("auth_timeout counted %v times", got)
	}

	// An accepted session outlives the timeout.
	_, sa := newClient(t, p, addr, "tok-a").open(brokerHello("broker-a", "dynamo"))
	time.Sleep(3 * s.AuthTimeout)
	sa.send(t, wire.Message{Type: wire.TypeHeartbeat, Seq: 9})
	if m := sa.next(t); m.Type != wire.TypeHeartbeatAck || m.Seq != 9 {
		t.Fatalf("want heartbeat_ack 9, got %+v", m)
	}
	if got := refusals(l, wire.CodeAuthTimeout); got != 1 {
		t.Fatalf("auth_timeout counted %v times after an accepted session", got)
	}
}

// The connection goes away Linger after its last request ended.
func TestLingerAfterLastRequest(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
	s.Linger = 500 * time.Millisecond
	l, addr := startListener(t, s)
	r := dialRaw(t, p, addr)
	r.openSession("tok-a", brokerHello("broker-a", "dynamo"))
	// Past auth_timeout's concern: the session was accepted. Still open
	// after Linger while the session runs.
	time.Sleep(2 * s.Linger)
	if l.SessionCount() != 1 {
		t.Fatal("the session ended while its request was open")
	}
	// The client ends its request body: the session ends, then the
	// connection lingers and goes away.
	ended := time.Now()
	if err := r.fr.WriteData(1, true, nil); err != nil {
		t.Fatal(err)
	}
	for {
		f := r.read(nil)
		if f == nil {
			t.Fatal("connection closed without GOAWAY")
		}
		if ga, ok := f.(*http2.GoAwayFrame); ok {
			if ga.ErrCode != http2.ErrCodeNo {
				t.Fatalf("GOAWAY %v", ga.ErrCode)
			}
			break
		}
	}
	if elapsed := time.Since(ended); elapsed < s.Linger {
		t.Fatalf("GOAWAY %v after the last request, before the %v linger", elapsed, s.Linger)
	}
	waitFor(t, "the session's end", func() bool { return l.SessionCount() == 0 })
}

// The linger counts from the last accepted request: refused requests do
// not keep a connection open.
func TestLingerCountsAcceptedRequestsOnly(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"))
	s.Linger = 300 * time.Millisecond
	l, addr := startListener(t, s)
	r := dialRaw(t, p, addr)
	r.openSession("tok-a", brokerHello("broker-a", "dynamo"))
	ended := time.Now()
	if err := r.fr.WriteData(1, true, nil); err != nil {
		t.Fatal(err)
	}
	// A request for no endpoint every third of the linger: each is
	// answered 404, none is accepted.
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		tick := time.NewTicker(s.Linger / 3)
		defer tick.Stop()
		for id := uint32(3); ; id += 2 {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			r.wmu.Lock()
			r.hbuf.Reset()
			for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "localhost"}, {":path", "/nope"}} {
				_ = r.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
			}
			err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndHeaders: true, EndStream: true})
			r.wmu.Unlock()
			if err != nil {
				return
			}
			n++
		}
	}()
	for r.read(nil) != nil {
	}
	close(stop)
	if elapsed := time.Since(ended); elapsed < s.Linger {
		t.Fatalf("closed %v after the last accepted request, before the linger", elapsed)
	}
	if n := <-sent; n < 3 {
		t.Fatalf("only %d refused requests were sent before the close", n)
	}
	if got := refusals(l, wire.CodeNotFound); got < 3 {
		t.Fatalf("not_found counted %v times", got)
	}
}

// A session whose client sends nothing (not even heartbeat answers) ends
// with idle_timeout; one that answers heartbeats does not.
func TestIdleTimeout(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "tok-b", "dynamo"))
	s.HeartbeatInterval = 100 * time.Millisecond
	s.IdleTimeout = 500 * time.Millisecond
	l, addr := startListener(t, s)
	_, live := newClient(t, p, addr, "tok-b").open(brokerHello("broker-b", "dynamo"))
	// broker-b speaks every heartbeat interval; any client message resets
	// the idle timer.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(s.HeartbeatInterval)
		defer tick.Stop()
		for seq := uint64(100); ; seq++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				b, _ := wire.Append(nil, &wire.Message{Type: wire.TypeHeartbeat, Seq: seq})
				if _, err := live.out.Write(b); err != nil {
					return
				}
			}
		}
	}()
	start := time.Now() // before the session's idle timer can start
	_, silent := newClient(t, p, addr, "tok-a").open(brokerHello("broker-a", "dynamo"))
	heartbeats := 0
	var last wire.Message
	for m := range silent.msgs {
		if m.Type == wire.TypeHeartbeat {
			heartbeats++
			continue
		}
		last = m
	}
	if last.Type != wire.TypeError || last.Code != wire.CodeIdleTimeout {
		t.Fatalf("want error idle_timeout as the last line, got %+v", last)
	}
	if elapsed := time.Since(start); elapsed < s.IdleTimeout {
		t.Fatalf("ended after %v, before idle_timeout", elapsed)
	}
	if heartbeats == 0 {
		t.Fatal("the router sent no heartbeat")
	}
	if got := refusals(l, wire.CodeIdleTimeout); got != 1 {
		t.Fatalf("idle_timeout counted %v times", got)
	}
	// broker-b is still live.
	live.send(t, wire.Message{Type: wire.TypeHeartbeat, Seq: 3})
	for {
		m := live.next(t)
		if m.Type != wire.TypeHeartbeatAck {
			t.Fatalf("want heartbeat_ack, got %+v", m)
		}
		if m.Seq == 3 {
			break
		}
	}
	if l.SessionCount() != 1 {
		t.Fatalf("sessions %d, want broker-b's", l.SessionCount())
	}
}

// A certificate alone that names no configured broker is unauthenticated;
// one naming a broker other than the token's is forbidden even for a data
// stream request.
func TestCertificateIdentities(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "", "dynamo")))
	stranger := newClient(t, p, addr, "", p.clientCert(t, "broker-z"))
	if resp, _ := stranger.open(brokerHello("broker-z", "dynamo")); resp.StatusCode != http.StatusUnauthorized || errorCode(t, resp) != wire.CodeUnauthenticated {
		t.Fatalf("certificate naming no broker: %s", resp.Status)
	}
	mixed := newClient(t, p, addr, "tok-a", p.clientCert(t, "broker-b"))
	resp, err := mixed.request(t.Context(), wire.StreamPathPrefix+"st-"+strconv.Itoa(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || errorCode(t, resp) != wire.CodeForbidden {
		t.Fatalf("stream request with another broker's certificate: %s", resp.Status)
	}
	if got := refusals(l, wire.CodeForbidden); got != 1 {
		t.Fatalf("forbidden counted %v times", got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
