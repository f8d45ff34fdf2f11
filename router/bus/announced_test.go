package bus

import (
	"context"
	"errors"
	"net"
	"testing"

	"switchyard/router/bus/wire"
	"switchyard/router/config"
	"switchyard/router/eventplane"
)

func listenerEntry(id, token string, backends ...string) config.BusClient {
	return config.BusClient{ID: id, Role: config.BusRoleKVListener, TokenHash: tokenHash(token), Backends: backends}
}

func listenerHello(id string, backends ...string) *wire.Message {
	m := &wire.Message{Type: wire.TypeHello, Role: wire.RoleKVListener, ClientID: id, Versions: []int{1}}
	for _, b := range backends {
		m.Sources = append(m.Sources, wire.Source{Backend: b})
	}
	return m
}

type announcedOpen struct {
	conn net.Conn
	err  error
}

func openAnnounced(l *Listener, backend string, last *uint64) chan announcedOpen {
	res := make(chan announcedOpen, 1)
	go func() {
		c, err := l.OpenAnnouncedStream(context.Background(), backend, last)
		res <- announcedOpen{c, err}
	}()
	return res
}

// Announced streams go to the least-loaded session announcing the backend
// and carry last_event_id; a draining listener's streams are unsubscribed
// at once and new ones placed elsewhere.
func TestOpenAnnouncedStreamPlacesAndDrains(t *testing.T) {
	p := newPKI(t)
	l, addr := startListener(t, testSettings(p, listenerEntry("kv-a", "tok-a", "vllm-1"), listenerEntry("kv-b", "tok-b", "vllm-1", "vllm-2")))
	if _, err := l.OpenAnnouncedStream(context.Background(), "vllm-1", nil); !isCode(err, eventplane.BusErrNoSession) {
		t.Fatalf("before any session: %v", err)
	}
	ca, cb := newClient(t, p, addr, "tok-a"), newClient(t, p, addr, "tok-b")
	_, sa := ca.open(listenerHello("kv-a", "vllm-1"))
	_, sb := cb.open(listenerHello("kv-b", "vllm-1", "vllm-2"))
	if !l.Announces("vllm-2") || l.Announces("vllm-3") || l.Covers("vllm-1") {
		t.Fatal("announcements do not follow the hellos")
	}

	// Both empty: the smaller client id; then the other, now less loaded.
	last := uint64(41)
	first := openAnnounced(l, "vllm-1", &last)
	m := sa.next(t)
	if m.Type != wire.TypeSubscribe || m.Target.Backend != "vllm-1" || m.Target.LastEventID == nil || *m.Target.LastEventID != 41 {
		t.Fatalf("want a subscribe on kv-a with last_event_id 41, got %+v", m)
	}
	if resp, err := ca.echoStream(m.StreamID); err != nil || resp.StatusCode != 200 {
		t.Fatalf("data stream: %v %v", resp, err)
	}
	o := <-first
	if o.err != nil {
		t.Fatal(o.err)
	}
	second := openAnnounced(l, "vllm-1", nil)
	m2 := sb.next(t)
	if m2.Type != wire.TypeSubscribe || m2.Target.Backend != "vllm-1" || m2.Target.LastEventID != nil {
		t.Fatalf("want a subscribe on kv-b without last_event_id, got %+v", m2)
	}
	if resp, err := cb.echoStream(m2.StreamID); err != nil || resp.StatusCode != 200 {
		t.Fatalf("data stream: %v %v", resp, err)
	}
	if o2 := <-second; o2.err != nil {
		t.Fatal(o2.err)
	}

	// kv-a drains: its stream is unsubscribed and ends for the router.
	changed := l.Changed()
	sa.send(t, wire.Message{Type: wire.TypeDraining})
	if u := sa.next(t); u.Type != wire.TypeUnsubscribe || u.StreamID != m.StreamID {
		t.Fatalf("want unsubscribe of the draining session's stream, got %+v", u)
	}
	waitChanged(t, l, changed)
	if _, err := o.conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("the drained stream still reads")
	}
	// The next open goes to kv-b although it holds more streams.
	third := openAnnounced(l, "vllm-1", &last)
	if m3 := sb.next(t); m3.Type != wire.TypeSubscribe || m3.Target.Backend != "vllm-1" {
		t.Fatalf("want the failover subscribe on kv-b, got %+v", m3)
	} else {
		sb.send(t, wire.Message{Type: wire.TypeStreamClosed, StreamID: m3.StreamID, Code: wire.CodeTargetNotAdvertised})
	}
	if o3 := <-third; !isCode(o3.err, eventplane.BusErrRefused) {
		t.Fatalf("a refused stream: %v", o3.err)
	}
	if _, err := l.OpenAnnouncedStream(context.Background(), "", nil); !isCode(err, eventplane.BusErrInvalidTarget) {
		t.Fatalf("empty backend: %v", err)
	}
}

// A kv_listener's hello is checked against its grant.
func TestKVListenerHelloGrant(t *testing.T) {
	p := newPKI(t)
	_, addr := startListener(t, testSettings(p, listenerEntry("kv-a", "tok-a", "vllm-1")))
	c := newClient(t, p, addr, "tok-a")
	for name, h := range map[string]*wire.Message{
		"backend outside the grant": listenerHello("kv-a", "vllm-2"),
		"no source":                 listenerHello("kv-a"),
		"namespaces":                {Type: wire.TypeHello, Role: wire.RoleKVListener, ClientID: "kv-a", Versions: []int{1}, DynamoNamespaces: []string{"dynamo"}, Sources: []wire.Source{{Backend: "vllm-1"}}},
	} {
		resp, _ := c.open(h)
		if resp.StatusCode != 403 || errorCode(t, resp) != wire.CodeForbidden {
			t.Errorf("%s: got %d", name, resp.StatusCode)
		}
	}
}

func isCode(err error, code string) bool {
	var be *eventplane.BusError
	return errors.As(err, &be) && be.Code == code
}
