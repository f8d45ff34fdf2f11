// Package fidelity checks the simulator against the live stack: one
// workload runs live (the router with its embedded etcd, fake engine
// workers publishing over ZMQ, the direct-mode frontend emulation, real
// HTTP clients, the wall clock) and is recorded; the recorded requests are
// then simulated on the same fleet, and the two runs are compared pick by
// pick and by their time-to-first-token distributions. docs/fidelity.md
// describes the method, the measured agreement and the tolerances.
package fidelity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"switchyard/recorder"
	"switchyard/router/picker"
	"switchyard/sim/replay"
	"switchyard/sim/stats"
)

// Report compares a live run with its re-simulation.
type Report struct {
	LiveRun, SimRun int64
	// Requests is how many requests the live run pinned; Compared how
	// many of them the simulation pinned too.
	Requests, Compared int
	// Agree counts compared requests whose pins were all equal (namespace,
	// decode worker and rank, prefill worker and rank or no prefill);
	// DecodeAgree and PrefillAgree count each pin alone.
	Agree, DecodeAgree, PrefillAgree int
	// Live and Sim are the latencies of the requests that ended ok.
	Live, Sim Latencies
	// TTFTKS is the two-sample Kolmogorov–Smirnov distance between the
	// live and simulated TTFT distributions: the largest gap between
	// their empirical CDFs, from 0 (identical) to 1 (disjoint).
	TTFTKS float64
	// TTFTPaired is the median, over requests that ended ok in both runs,
	// of the live TTFT minus the simulated one.
	TTFTPaired time.Duration
	// Replay is the live run's replay under its recorded picker: it must
	// reproduce every selection.
	Replay *replay.Report
}

// Latencies summarises one run's ok requests (nearest-rank percentiles).
type Latencies struct {
	OK int
	// NotOK counts the requests that ended otherwise, by status.
	NotOK                    map[string]int
	TTFTP50, TTFTP90, E2EP50 time.Duration
	ttft                     []time.Duration
	byID                     map[uint64]time.Duration
}

// Agreement is the share of compared requests pinned alike.
func (r *Report) Agreement() float64 { return share(r.Agree, r.Compared) }

// DecodeAgreement is the share of compared requests with the same decode pin.
func (r *Report) DecodeAgreement() float64 { return share(r.DecodeAgree, r.Compared) }

// PrefillAgreement is the share of compared requests with the same
// prefill pin (or none in both).
func (r *Report) PrefillAgreement() float64 { return share(r.PrefillAgree, r.Compared) }

func share(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

// Compare reads runs liveRun and simRun of rd, compares them and replays
// the live run.
func Compare(rd *recorder.Reader, liveRun, simRun int64) (*Report, error) {
	live, err := readRun(rd, liveRun)
	if err != nil {
		return nil, err
	}
	simulated, err := readRun(rd, simRun)
	if err != nil {
		return nil, err
	}
	rep := &Report{LiveRun: liveRun, SimRun: simRun, Requests: len(live.sels), Live: live.lat, Sim: simulated.lat}
	for id, l := range live.sels {
		s, ok := simulated.sels[id]
		if !ok {
			continue
		}
		rep.Compared++
		decode := l.Namespace == s.Namespace && samePin(l.Decode, s.Decode)
		prefill := l.HasPrefill == s.HasPrefill && (!l.HasPrefill || samePin(l.Prefill, s.Prefill))
		if decode {
			rep.DecodeAgree++
		}
		if prefill {
			rep.PrefillAgree++
		}
		if decode && prefill {
			rep.Agree++
		}
	}
	rep.TTFTKS = KS(live.lat.ttft, simulated.lat.ttft)
	var diffs []time.Duration
	for id, l := range live.lat.byID {
		if s, ok := simulated.lat.byID[id]; ok {
			diffs = append(diffs, l-s)
		}
	}
	rep.TTFTPaired = median(diffs)
	if rep.Replay, err = replay.Run(rd, liveRun, ""); err != nil {
		return nil, fmt.Errorf("fidelity: replay of the live run: %w", err)
	}
	return rep, nil
}

func samePin(a, b picker.Pin) bool { return a.WorkerID == b.WorkerID && a.DPRank == b.DPRank }

// run is what the comparison reads of one run.
type run struct {
	sels map[uint64]picker.Selection // the last successful pick per request
	lat  Latencies
}

func readRun(rd *recorder.Reader, id int64) (*run, error) {
	r := &run{sels: map[uint64]picker.Selection{}, lat: Latencies{NotOK: map[string]int{}, byID: map[uint64]time.Duration{}}}
	err := rd.Entries(id, func(e recorder.Entry) error {
		if s, ok := e.Value.(recorder.Selection); ok && s.OK {
			r.sels[s.RequestID] = s.Sel
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	outs, err := rd.Outcomes(id)
	if err != nil {
		return nil, err
	}
	var e2e []time.Duration
	for _, o := range outs {
		if o.Status != recorder.StatusOK {
			r.lat.NotOK[o.Status]++
			continue
		}
		r.lat.ttft = append(r.lat.ttft, o.TTFT)
		r.lat.byID[o.RequestID] = o.TTFT
		e2e = append(e2e, o.E2E)
	}
	slices.Sort(r.lat.ttft)
	slices.Sort(e2e)
	r.lat.OK = len(r.lat.ttft)
	r.lat.TTFTP50, r.lat.TTFTP90 = percentile(r.lat.ttft, 50), percentile(r.lat.ttft, 90)
	r.lat.E2EP50 = percentile(e2e, 50)
	return r, nil
}

// percentile is the nearest-rank percentile of ascending durations, as
// sim/stats computes it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	ms := make([]float64, len(sorted))
	for i, d := range sorted {
		ms[i] = float64(d)
	}
	return time.Duration(stats.Percentile(ms, p))
}

// median is the lower median of ds (0 for none).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	return ds[(len(ds)-1)/2]
}

// KS is the two-sample Kolmogorov–Smirnov statistic of a and b: the
// largest absolute difference between their empirical distribution
// functions, evaluated at every observed value. 0 when either is empty.
func KS(a, b []time.Duration) float64 {
	if len(a) == 0 || len(b) == 0 {
		return 0
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	var d float64
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		// The next observed value; both CDFs step past every copy of it.
		var v time.Duration
		switch {
		case i == len(a):
			v = b[j]
		case j == len(b):
			v = a[i]
		default:
			v = min(a[i], b[j])
		}
		for i < len(a) && a[i] == v {
			i++
		}
		for j < len(b) && b[j] == v {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

// KSCritical is the two-sample KS distance above which the hypothesis
// that both samples come from one distribution is rejected at level
// alpha, in the large-sample approximation c(α)·√((n+m)/(n·m)) with
// c(α) = √(−ln(α/2)/2).
func KSCritical(n, m int, alpha float64) float64 {
	if n == 0 || m == 0 {
		return 1
	}
	c := math.Sqrt(-math.Log(alpha/2) / 2)
	return c * math.Sqrt(float64(n+m)/float64(n*m))
}

// Tolerances bound how far a re-simulation may be from its live run.
type Tolerances struct {
	// MinAgreement bounds the share of requests pinned alike (all pins);
	// MinPrefillAgreement the share with the same prefill pin.
	MinAgreement, MinPrefillAgreement float64
	// The TTFT percentiles may differ by the larger of an absolute and a
	// relative (to the live value) bound.
	P50Abs time.Duration
	P50Rel float64
	P90Abs time.Duration
	P90Rel float64
	// MaxKS bounds the TTFT distributions' KS distance.
	MaxKS float64
	// MaxPaired bounds the median per-request TTFT difference, either way.
	MaxPaired time.Duration
}

// DefaultTolerances are the bounds the fidelity test asserts. On an idle
// machine the live and simulated runs agree far more closely (selection
// agreement 0.95 to 1, TTFT percentiles within 3 ms, KS distance at most
// 0.08); the bounds hold with margin under the worst contention measured,
// the race detector with other packages' race-enabled tests running on
// both cores throughout (docs/fidelity.md lists every measurement).
var DefaultTolerances = Tolerances{
	MinAgreement:        0.60,
	MinPrefillAgreement: 0.95,
	P50Abs:              10 * time.Millisecond,
	P50Rel:              0.10,
	P90Abs:              30 * time.Millisecond,
	P90Rel:              0.50,
	MaxKS:               0.35,
	MaxPaired:           6 * time.Millisecond,
}

// Check reports every bound the report breaks, and anything that makes
// the comparison meaningless: a live request the simulation never
// pinned, a request that did not end ok, a live run whose replay is not
// exact.
func (r *Report) Check(t Tolerances) error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if r.Requests == 0 {
		bad("the live run pinned no request")
	}
	if r.Compared != r.Requests {
		bad("%d of %d live requests were not pinned in the simulation", r.Requests-r.Compared, r.Requests)
	}
	for name, l := range map[string]Latencies{"live": r.Live, "simulated": r.Sim} {
		if l.OK != r.Requests {
			bad("%s run: %d of %d requests ended ok (others: %v)", name, l.OK, r.Requests, l.NotOK)
		}
	}
	if r.Replay == nil || !r.Replay.Exact() {
		bad("the live run's replay is not exact")
	}
	if a := r.Agreement(); a < t.MinAgreement {
		bad("selection agreement %.3f < %.3f", a, t.MinAgreement)
	}
	if a := r.PrefillAgreement(); a < t.MinPrefillAgreement {
		bad("prefill pin agreement %.3f < %.3f", a, t.MinPrefillAgreement)
	}
	within := func(name string, live, simulated, abs time.Duration, rel float64) {
		bound := max(abs, time.Duration(rel*float64(live)))
		if d := (live - simulated).Abs(); d > bound {
			bad("TTFT %s: live %v, simulated %v, off by %v > %v", name, ms(live), ms(simulated), ms(d), ms(bound))
		}
	}
	within("p50", r.Live.TTFTP50, r.Sim.TTFTP50, t.P50Abs, t.P50Rel)
	within("p90", r.Live.TTFTP90, r.Sim.TTFTP90, t.P90Abs, t.P90Rel)
	if r.TTFTKS > t.MaxKS {
		bad("TTFT KS distance %.3f > %.3f", r.TTFTKS, t.MaxKS)
	}
	if r.TTFTPaired.Abs() > t.MaxPaired {
		bad("TTFT paired difference: the median of live minus simulated is %v, beyond ±%v", ms(r.TTFTPaired), ms(t.MaxPaired))
	}
	return errors.Join(errs...)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }

// String renders the comparison as a small table.
func (r *Report) String() string {
	var b strings.Builder
	f := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	fmt.Fprintf(&b, "live run %d vs simulated run %d: %d requests, %d compared\n", r.LiveRun, r.SimRun, r.Requests, r.Compared)
	fmt.Fprintf(&b, "  %-22s %9s %9s %9s\n", "", "live", "simulated", "diff")
	row := func(name string, l, s time.Duration) {
		fmt.Fprintf(&b, "  %-22s %9.1f %9.1f %+9.1f\n", name, f(l), f(s), f(l-s))
	}
	fmt.Fprintf(&b, "  %-22s %9d %9d\n", "ok", r.Live.OK, r.Sim.OK)
	row("TTFT p50 (ms)", r.Live.TTFTP50, r.Sim.TTFTP50)
	row("TTFT p90 (ms)", r.Live.TTFTP90, r.Sim.TTFTP90)
	row("E2E p50 (ms)", r.Live.E2EP50, r.Sim.E2EP50)
	fmt.Fprintf(&b, "  TTFT KS distance %.3f (5%% critical value %.3f); paired median live-sim %+.1f ms\n",
		r.TTFTKS, KSCritical(r.Live.OK, r.Sim.OK, 0.05), f(r.TTFTPaired))
	fmt.Fprintf(&b, "  selection agreement %.3f (decode %.3f, prefill %.3f)\n", r.Agreement(), r.DecodeAgreement(), r.PrefillAgreement())
	if r.Replay != nil {
		exact := "exact"
		if !r.Replay.Exact() {
			exact = "NOT exact"
		}
		fmt.Fprintf(&b, "  replay of the live run: %d of %d selections reproduced, %s\n", r.Replay.Reproduced, r.Replay.Selections, exact)
	}
	return b.String()
}
