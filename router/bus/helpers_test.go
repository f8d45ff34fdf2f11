package bus

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"switchyard/internal/testpki"
	"switchyard/router/bus/wire"
	"switchyard/router/config"
)

// pki is a test CA with the listener's certificate.
type pki struct {
	ca     *testpki.CA
	caPEM  []byte
	server tls.Certificate
	roots  *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	ca := testpki.New(t, "bus test CA")
	return &pki{ca: ca, caPEM: ca.PEM(), server: ca.Server(t), roots: ca.Pool}
}

func (p *pki) clientCert(t *testing.T, names ...string) tls.Certificate {
	return p.ca.Client(t, names...)
}

func brokerEntry(id, token string, namespaces ...string) config.BusClient {
	e := config.BusClient{ID: id, Role: config.BusRoleBroker, Namespaces: namespaces}
	if token != "" {
		e.TokenHash = tokenHash(token)
	}
	return e
}

func testSettings(p *pki, brokers ...config.BusClient) Settings {
	return Settings{
		Brokers: brokers, Certificate: p.server, ClientCAPEM: p.caPEM,
		MaxSessions: 8, MaxStreamsPerSession: 16, MaxSessionBufferBytes: 16 * 64 << 10,
		HeartbeatInterval: time.Second, IdleTimeout: 5 * time.Second,
	}
}

// startListener serves s on a loopback port.
func startListener(t *testing.T, s Settings) (*Listener, string) {
	t.Helper()
	l, err := New(s, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(ln) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l, ln.Addr().String()
}

// busClient is a minimal broker: real TLS 1.3 and HTTP/2.
type busClient struct {
	t     *testing.T
	addr  string
	token string
	hc    *http.Client
}

func newClient(t *testing.T, p *pki, addr, token string, certs ...tls.Certificate) *busClient {
	tr := &http2.Transport{TLSClientConfig: &tls.Config{
		RootCAs: p.roots, ServerName: "localhost", Certificates: certs,
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"},
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &busClient{t: t, addr: addr, token: token, hc: &http.Client{Transport: tr}}
}

func (c *busClient) request(ctx context.Context, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+c.addr+path, body)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set(wire.VersionHeader, "1")
	return c.hc.Do(req)
}

// sessionConn is an open control channel.
type sessionConn struct {
	resp *http.Response
	out  *io.PipeWriter
	dec  *wire.Decoder
	msgs chan wire.Message
}

func (s *sessionConn) send(t *testing.T, m wire.Message) {
	b, err := wire.Append(nil, &m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.out.Write(b); err != nil {
		t.Fatalf("send %s: %v", m.Type, err)
	}
}

// next returns the next message other than a heartbeat, answering
// heartbeats.
func (s *sessionConn) next(t *testing.T) wire.Message {
	t.Helper()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatal("control channel ended")
			}
			if m.Type == wire.TypeHeartbeat {
				s.send(t, wire.Message{Type: wire.TypeHeartbeatAck, Seq: m.Seq})
				continue
			}
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no control message within 10s")
		}
	}
}

// open sends hello (when not nil) and returns the response; a 200 is
// read as a session whose welcome is checked.
func (c *busClient) open(hello *wire.Message) (*http.Response, *sessionConn) {
	c.t.Helper()
	pr, pw := io.Pipe()
	if hello != nil {
		go func() {
			b, _ := wire.Append(nil, hello)
			pw.Write(b)
		}()
	}
	resp, err := c.request(context.Background(), wire.SessionPath, pr)
	if err != nil {
		c.t.Fatalf("session request: %v", err)
	}
	c.t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return resp, &sessionConn{resp: resp, out: pw}
	}
	s := &sessionConn{resp: resp, out: pw, dec: wire.NewDecoder(resp.Body), msgs: make(chan wire.Message, 64)}
	go func() {
		defer close(s.msgs)
		for {
			m, err := s.dec.Decode()
			if err != nil {
				return
			}
			s.msgs <- m
		}
	}()
	if m := s.next(c.t); m.Type != wire.TypeWelcome || len(m.SessionID) != len("sess-")+32 {
		c.t.Fatalf("want welcome with sess-<32 hex>, got %+v", m)
	}
	return resp, s
}

func brokerHello(id string, namespaces ...string) *wire.Message {
	return &wire.Message{Type: wire.TypeHello, Role: wire.RoleBroker, ClientID: id, Versions: []int{1}, DynamoNamespaces: namespaces}
}

// errorCode reads a refusal body's code.
func errorCode(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var e wire.ErrorBody
	if err := json.Unmarshal(bytes.TrimSpace(b), &e); err != nil {
		t.Fatalf("refusal body %q: %v", b, err)
	}
	return e.Error.Code
}

// echoStream opens the data stream of a subscribe and echoes its bytes.
func (c *busClient) echoStream(id string) (*http.Response, error) {
	pr, pw := io.Pipe()
	resp, err := c.request(context.Background(), wire.StreamPathPrefix+id, pr)
	if err != nil {
		pw.Close()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		pw.Close()
		return resp, nil
	}
	go func() {
		io.Copy(pw, resp.Body)
		pw.Close()
	}()
	return resp, nil
}
