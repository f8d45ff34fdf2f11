// Command tracewaits reads a Go execution trace (the router's
// /debug/pprof/trace?seconds=N) and prints how long goroutines waited to
// run once they could: the time from runnable to running, grouped by what
// made them runnable (a network read or write becoming ready, a lock, a
// channel, a preemption), beside how long they then ran.
//
// A request's latency is its network waits, its running spans and these
// runnable waits. On a machine whose cores are shared, the last grow with
// the work per request: a goroutine readied while its processor's thread
// runs others, or is descheduled by the host, queues behind them. It is the
// breakdown `go tool trace -pprof=sched` summarises as one total per stack.
//
//	tracewaits trace.out
package main

import (
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"time"

	"golang.org/x/exp/trace"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: tracewaits TRACE")
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	w, err := read(f)
	if err != nil {
		log.Fatal(err)
	}
	w.print(os.Stdout)
}

// waits are the durations read from one trace.
type waits struct {
	runnable map[string][]time.Duration // by what made the goroutine runnable
	running  []time.Duration
}

// goroutine is one goroutine's current state and what put it there.
type goroutine struct {
	state trace.GoState
	since trace.Time
	cause string // for a runnable goroutine: what it was doing before
}

func read(r io.Reader) (*waits, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, err
	}
	w := &waits{runnable: map[string][]time.Duration{}}
	gs := map[trace.GoID]*goroutine{}
	reasons := map[trace.GoID]string{} // why a waiting goroutine waits
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			return w, nil
		}
		if err != nil {
			return nil, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		if g := gs[id]; g != nil && g.state == from {
			d := time.Duration(ev.Time() - g.since)
			switch from {
			case trace.GoRunnable:
				w.runnable[g.cause] = append(w.runnable[g.cause], d)
			case trace.GoRunning:
				w.running = append(w.running, d)
			}
		}
		cause := from.String()
		switch from {
		case trace.GoWaiting:
			cause = "waited: " + reasons[id]
		case trace.GoRunning:
			cause = "running: " + st.Reason
		}
		if to == trace.GoWaiting {
			reasons[id] = st.Reason
		}
		gs[id] = &goroutine{state: to, since: ev.Time(), cause: cause}
	}
}

func (w *waits) print(out io.Writer) {
	fmt.Fprintf(out, "%-34s %8s %10s %10s %10s %10s %8s %10s\n", "", "count", "p50", "p99", "p99.9", "max", ">1ms", "sum >1ms")
	causes := make([]string, 0, len(w.runnable))
	var all []time.Duration
	for c, d := range w.runnable {
		causes = append(causes, c)
		all = append(all, d...)
	}
	slices.Sort(causes)
	row(out, "runnable → running (all)", all)
	for _, c := range causes {
		row(out, "  after "+c, w.runnable[c])
	}
	row(out, "running spans", w.running)
}

func row(out io.Writer, name string, d []time.Duration) {
	if len(d) == 0 {
		fmt.Fprintf(out, "%-34s %8d\n", name, 0)
		return
	}
	slices.Sort(d)
	q := func(p float64) time.Duration { return d[min(int(p*float64(len(d))), len(d)-1)] }
	var over time.Duration
	n := 0
	for _, x := range d {
		if x > time.Millisecond {
			over += x
			n++
		}
	}
	r := func(x time.Duration) string { return x.Round(time.Microsecond / 10).String() }
	fmt.Fprintf(out, "%-34s %8d %10s %10s %10s %10s %8d %10s\n", name, len(d), r(q(.5)), r(q(.99)), r(q(.999)), r(d[len(d)-1]), n, r(over))
}
