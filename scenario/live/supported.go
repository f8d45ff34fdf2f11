package live

import (
	"errors"
	"fmt"
	"strings"

	"switchyard/router/picker"
	"switchyard/sim"
)

// Bounds of a live run. A live run is real processes on one machine, so
// it is far smaller than what the simulator takes.
const (
	// MaxWorkers bounds the fleet: each worker runs its engine, two
	// publishers and an etcd lease.
	MaxWorkers = 64
	// MaxRequests bounds the workload: each request in flight is a real
	// connection through the router and the frontend.
	MaxRequests = 20000
	// MaxOutputTokens is the most the frontend emulation generates for
	// one request (its max_tokens cap).
	MaxOutputTokens = 4096
	// MaxPromptTokens bounds a prompt, so its body stays well under the
	// size the router hashes prompts up to (4 MiB) and the frontend reads.
	MaxPromptTokens = 1 << 18
)

// liveFaults are the fault kinds a live run injects through the fleet.
var liveFaults = map[sim.FaultKind]bool{
	sim.FaultKill: true, sim.FaultStall: true, sim.FaultResume: true, sim.FaultRestartPublisher: true,
	sim.FaultGap: true, sim.FaultDrop: true, sim.FaultMalformed: true, sim.FaultReset: true, sim.FaultSlow: true,
	sim.FaultFail: true, sim.FaultRecover: true, sim.FaultMalformedRecord: true,
	sim.FaultLeaseExpiry: true, sim.FaultReload: true,
	sim.FaultShimSlow: true, sim.FaultShimFail: true, sim.FaultShimRecover: true,
}

// UnsupportedError names every part of a scenario a live run cannot
// reproduce.
type UnsupportedError struct{ Reasons []string }

func (e *UnsupportedError) Error() string {
	return "cannot run live: " + strings.Join(e.Reasons, "; ")
}

// Supported reports why a scenario cannot run live (nil when it can):
// faults, workloads or settings live mode cannot reproduce. The error is
// an *UnsupportedError naming each of them.
func Supported(sc *sim.Scenario) error {
	if r := unsupported(sc); len(r) > 0 {
		return &UnsupportedError{Reasons: r}
	}
	return nil
}

func unsupported(sc *sim.Scenario) []string {
	var out []string
	no := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if sc.Discovery.Kubernetes() {
		no("discovery.source %s: live runs discover the fleet from etcd only", sc.Discovery.Source)
	}
	if len(sc.Brokers) > 0 || sc.Router.LoadTransport == "broker" {
		no("brokers (router.load_transport broker): live runs subscribe to the fleet directly, with no in-cluster brokers")
	}
	if sc.Router.ReplicaCount() > 1 || sc.Router.ReplicaSync {
		no("router.replicas %d: live runs start one router", sc.Router.ReplicaCount())
	}
	if sc.Picker != picker.NameLoad && sc.Picker != picker.NameKV {
		no("picker %s: the live router selects with load or kv only", sc.Picker)
	}
	if sc.Network.LoadLoss > 0 {
		no("network.load_loss: loopback loses no messages, and a live run cannot drop a chosen share")
	}
	total := 0
	for i, g := range sc.Fleet {
		total += g.Count
		if len(g.InstanceIDs) > 0 {
			no("fleet[%d].instance_ids: live instance ids are the etcd lease ids the workers are granted", i)
		}
	}
	if total > MaxWorkers {
		no("fleet: %d workers, a live run starts at most %d", total, MaxWorkers)
	}
	for i, f := range sc.Faults {
		switch {
		case f.Kind == sim.FaultPartition || f.Kind == sim.FaultHeal:
			no("faults[%d] %s: loopback has no network between the router and a worker's publishers to cut", i, f.Kind)
		case f.Kind.OfBroker():
			no("faults[%d] %s: live runs have no brokers", i, f.Kind)
		case f.Kind == sim.FaultEtcdCompaction:
			no("faults[%d] %s: etcd cancels only watches behind the compacted revision, and the router's watch on loopback is caught up, "+
				"so a real compaction does not end it as the simulator models", i, f.Kind)
		case f.Kind == sim.FaultEtcdRestart:
			no("faults[%d] %s: stopping the embedded etcd waits its request timeout (about 7 s) for the open watch and keep-alive streams, "+
				"so an outage as short as the simulator's cannot be had on the same data dir and port", i, f.Kind)
		case f.Kind == sim.FaultDegrade:
			no("faults[%d] %s: delaying and losing a chosen share of a worker's messages needs a network shaper between the router and the publisher", i, f.Kind)
		case f.Kind == sim.FaultReload && f.Router != nil && f.Router.Picker != "" &&
			f.Router.Picker != picker.NameLoad && f.Router.Picker != picker.NameKV:
			no("faults[%d] reload to picker %s: the live router selects with load or kv only", i, f.Router.Picker)
		case !liveFaults[f.Kind]:
			no("faults[%d] %s: not injected live", i, f.Kind)
		}
	}
	if why := workloadUnsupported(sc); why != "" {
		no("%s", why)
	}
	return out
}

// workloadUnsupported reads the whole workload once (it is deterministic,
// so the run sends the same) and says what a live run cannot send: too
// many requests, an output the frontend would cut, a prompt too long to
// hash.
func workloadUnsupported(sc *sim.Scenario) string {
	src, closer, err := sc.Source()
	if err != nil {
		return "workload: " + err.Error()
	}
	if closer != nil {
		defer closer.Close()
	}
	n := 0
	for {
		r, ok := src.Next()
		if !ok {
			break
		}
		n++
		switch {
		case n > MaxRequests:
			return fmt.Sprintf("workload: more than %d requests, a live run sends at most %d", MaxRequests, MaxRequests)
		case r.MaxTokens > MaxOutputTokens:
			return fmt.Sprintf("workload: request %d asks for %d output tokens, the frontend emulation generates at most %d", r.ID, r.MaxTokens, MaxOutputTokens)
		case len(r.Tokens) > MaxPromptTokens:
			return fmt.Sprintf("workload: request %d has a %d-token prompt, a live run sends at most %d", r.ID, len(r.Tokens), MaxPromptTokens)
		case len(r.Tokens) == 0:
			return fmt.Sprintf("workload: request %d has an empty prompt", r.ID)
		}
	}
	if e, ok := src.(interface{ Err() error }); ok && e.Err() != nil {
		return "workload: " + e.Err().Error()
	}
	return ""
}

// ErrUnsupported is wrapped by Run's error for a scenario Supported refuses.
var ErrUnsupported = errors.New("scenario cannot run live")

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
