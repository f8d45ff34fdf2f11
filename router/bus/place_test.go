package bus

import (
	"context"
	"encoding/hex"
	"fmt"
	"runtime"
	"testing"

	"switchyard/router/bus/wire"
	"switchyard/router/eventplane"
)

func runtimeGosched() { runtime.Gosched() }

// The vector documented in docs/event-bus.md.
func TestRendezvousVector(t *testing.T) {
	tg := eventplane.BusTarget{Namespace: "dynamo", Host: "10.0.0.7", Port: 5557, Topic: ""}
	if got, want := hex.EncodeToString(RendezvousKey(tg)), "000664796e616d6f000831302e302e302e3715b50000"; got != want {
		t.Fatalf("key %s, want %s", got, want)
	}
	for id, want := range map[string]string{"broker-a": vectorA, "broker-b": vectorB} {
		if got := fmt.Sprintf("%016x", Rendezvous(tg, id)); got != want {
			t.Errorf("weight(%s) = %s, want %s", id, got, want)
		}
	}
}

func TestPlacementSpreadsOverThreeSessions(t *testing.T) {
	p := newPKI(t)
	s := testSettings(p, brokerEntry("broker-a", "tok-a", "dynamo"), brokerEntry("broker-b", "tok-b", "dynamo"), brokerEntry("broker-c", "tok-c", "dynamo"))
	l, addr := startListener(t, s)
	ids := []string{"broker-a", "broker-b", "broker-c"}
	sess := map[string]*sessionConn{}
	for _, id := range ids {
		_, sess[id] = newClient(t, p, addr, "tok-"+id[len(id)-1:]).open(brokerHello(id, "dynamo"))
	}
	const n = 300
	counts := map[string]int{}
	for i := range n {
		tg := eventplane.BusTarget{Namespace: "dynamo", Host: fmt.Sprintf("10.0.%d.%d", i/200, i%200), Port: 5557}
		want, best := "", uint64(0)
		for _, id := range ids {
			if w := Rendezvous(tg, id); want == "" || w > best {
				want, best = id, w
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { l.OpenStream(ctx, tg) }()
		// The subscribe lands on the highest-weighted session only.
		m := sess[want].next(t)
		if m.Type != wire.TypeSubscribe || m.Target.Host != tg.Host {
			t.Fatalf("target %d: want a subscribe on %s, got %+v", i, want, m)
		}
		cancel()
		if u := sess[want].next(t); u.Type != wire.TypeUnsubscribe {
			t.Fatalf("want unsubscribe, got %+v", u)
		}
		counts[want]++
	}
	for _, id := range ids {
		if c := counts[id]; c < n/5 || c > n/2 {
			t.Errorf("%s placed %d of %d targets; want near a third", id, c, n)
		}
	}
}

// Weights computed independently of this package (SHA-256 by hand).
const (
	vectorA = "1ec9343139d74e93"
	vectorB = "5177fab3ac35475c"
)
