// Package live runs a simulator scenario against real parts on loopback:
// an embedded etcd, the fake fleet on its engine model (one fleet per
// scenario worker group), the direct-mode frontend emulation and the
// router, which records its routing core to SQLite. The scenario's
// workload goes to the router over real HTTP, streaming, at the
// scenario's arrival times, and its faults go to the fleet at theirs.
// The recording holds the same core outputs a simulated run hands its
// port, so a scenario's expectations are evaluated on either.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"switchyard/sim"
)

// Options configure a live run.
type Options struct {
	// RecordPath is the SQLite file the router's run is recorded to
	// (required). An existing recording gets the run appended.
	RecordPath string
	Log        *slog.Logger
	// TimeScale divides every scenario time so a live run of a long
	// scenario takes less wall time: request arrivals and the warmup,
	// fault times, the lease TTL (then rounded up to whole seconds) and
	// `until` are divided by it, and every engine runs TimeScale times
	// faster (its speedup_ratio multiplied). 1 (or 0) is real time. What
	// the router measures (TTFT, ITL, end to end) and records is wall
	// time: multiply it by TimeScale to read it in scenario time. The
	// router's own time rules (load staleness, the 60 s KV rule, backoffs)
	// and network latencies are not scaled.
	TimeScale float64
	// Version is written to the recording's run.
	Version string
	// ReadyTimeout bounds the wait for the router to discover the whole
	// fleet and connect to its publishers (0: DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// RequestTimeout bounds one request on the client side (0:
	// DefaultRequestTimeout); a request still running then is abandoned,
	// and the router records it cancelled, as the simulator ends a run's
	// stuck requests.
	RequestTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultReadyTimeout   = 90 * time.Second
	DefaultRequestTimeout = 2 * time.Minute
	// MaxTimeScale bounds TimeScale: beyond it the scenario's times
	// vanish under the machine's own latencies.
	MaxTimeScale = 1000
)

// Info describes a live run.
type Info struct {
	// WorkerIDs are the instance ids in the scenario's declaration order
	// (groups expanded), as faults index them; a worker that registered
	// again after a lease_expiry is listed under its new id.
	WorkerIDs []uint64
	// Start is the wall time scenario time 0 corresponds to: the moment
	// the router had discovered the fleet and subscribed to it.
	Start time.Time
	// Requests is how many requests were sent.
	Requests int
	// Unsupported is empty when the run happened; see Supported.
	Unsupported []string
	// RunID is the run's id in the recording.
	RunID int64
	// TimeScale is the scale the run used.
	TimeScale float64
	// LeaseTTL is the lease TTL etcd granted the workers, in wall time: a
	// killed worker leaves discovery about this long after its death.
	LeaseTTL time.Duration
	// Faults are the faults as injected, in time order.
	Faults []Injected
	// Results are the requests as the client saw them, in arrival order.
	Results []Result
}

// Injected is one fault as the run injected it.
type Injected struct {
	sim.Fault
	// WorkerID is the instance id the fault's worker index named.
	WorkerID uint64
	// At is the wall time it was injected.
	At time.Time
	// Err is why the fleet refused it ("" when injected), e.g. a kill of
	// a worker already dead.
	Err string
}

// Result is one request as the client saw it.
type Result struct {
	// ID is the workload's request id.
	ID uint64
	// Sent is when it was sent; Ended when its answer ended.
	Sent, Ended time.Time
	// Status is the HTTP status (0 when none came).
	Status int
	// Events counts the answer's streamed data events (text chunks and
	// the usage chunk, not [DONE]).
	Events int
	// Err says why the request did not end well ("" when it did).
	Err string
}

func (o Options) withDefaults() (Options, error) {
	if o.RecordPath == "" {
		return o, errors.New("live: Options.RecordPath is required")
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if !(o.TimeScale > 0 && o.TimeScale <= MaxTimeScale) {
		return o, fmt.Errorf("live: TimeScale must be in (0, %d], got %v", MaxTimeScale, o.TimeScale)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	return o, nil
}

// wall is the wall duration of scenario duration d.
func (o Options) wall(d time.Duration) time.Duration {
	return time.Duration(math.Round(float64(d) / o.TimeScale))
}

// Run runs sc live and returns when every request has ended (or ctx
// ends), after closing the router (so the recording is complete), the
// frontend, the fleet and etcd. A scenario Supported refuses is not run:
// its Info names why and the error wraps ErrUnsupported.
func Run(ctx context.Context, sc *sim.Scenario, o Options) (Info, error) {
	o, err := o.withDefaults()
	if err != nil {
		return Info{}, err
	}
	if r := unsupported(sc); len(r) > 0 {
		return Info{Unsupported: r}, &UnsupportedError{Reasons: r}
	}
	src, closer, err := sc.Source()
	if err != nil {
		return Info{}, err
	}
	if closer != nil {
		defer closer.Close()
	}
	st, err := start(ctx, sc, o)
	if err != nil {
		return Info{}, err
	}
	info := Info{TimeScale: o.TimeScale, RunID: st.rec.RunID()}
	for _, w := range st.workers {
		info.WorkerIDs = append(info.WorkerIDs, w.id)
	}
	o.Log.Info("live run: fleet started", "scenario", sc.Name, "workers", len(st.workers), "router", st.srv.Addr())
	runErr := st.run(ctx, sc, o, src, &info)
	// A worker that registered again after a lease expiry is known by its
	// new id, as the simulator's run reports it.
	for i, w := range st.workers {
		info.WorkerIDs[i] = w.id
	}
	stopErr := st.stop()
	o.Log.Info("live run: done", "scenario", sc.Name, "requests", info.Requests, "faults", len(info.Faults))
	return info, errors.Join(runErr, stopErr)
}
