package scenario

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync"

	"switchyard/scenario/expect"
)

// RunAll runs every file and returns the results in file order. Simulated
// runs go in parallel, one per core (each is deterministic on its own);
// a suite with live runs goes one scenario at a time, since live runs
// measure wall-clock latency. done, when set, hears of each result as it
// ends (from one goroutine at a time).
func RunAll(ctx context.Context, files []string, o Options, done func(*Result)) []*Result {
	out := make([]*Result, len(files))
	workers := 1
	if o.Mode == Sim || o.Mode == "" {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan int)
	)
	for w := 0; w < min(workers, len(files)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r := RunFile(ctx, files[i], o)
				out[i] = r
				if done != nil {
					mu.Lock()
					done(r)
					mu.Unlock()
				}
			}
		}()
	}
	for i := range files {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	kept := out[:0]
	for _, r := range out {
		if r != nil {
			kept = append(kept, r)
		}
	}
	return kept
}

// Print writes one scenario's outcome: a line per mode, and each failed
// expectation by name.
func Print(w io.Writer, r *Result) {
	if r.Error != "" {
		fmt.Fprintf(w, "ERROR %s: %s\n", r.Name, r.Error)
		return
	}
	for _, m := range []*ModeResult{r.Sim, r.Live} {
		if m == nil {
			continue
		}
		switch {
		case m.Skipped != "":
			fmt.Fprintf(w, "SKIP  %s (%s): %s\n", r.Name, m.Mode, m.Skipped)
		case m.Error != "":
			fmt.Fprintf(w, "ERROR %s (%s): %s\n", r.Name, m.Mode, m.Error)
		case m.Passed():
			fmt.Fprintf(w, "PASS  %s (%s, %d expectations, %d/%d served, %.1fs)\n", r.Name, m.Mode, len(m.Verdicts), m.Served, m.Requests, m.Wall.Seconds())
		default:
			fmt.Fprintf(w, "FAIL  %s (%s)\n", r.Name, m.Mode)
			for _, v := range expect.Failed(m.Verdicts) {
				fmt.Fprintf(w, "      %s\n", v.Message())
			}
		}
	}
	for _, m := range []*ModeResult{r.Sim, r.Live} {
		for _, n := range m.notes() {
			fmt.Fprintf(w, "      note (%s): %s\n", m.Mode, n)
		}
	}
	if a := r.Agreement; a != nil {
		fmt.Fprintf(w, "      sim vs live: served %.3f / %.3f, TTFT p50 %.1f / %.1f ms, p90 %.1f / %.1f ms, pick-share distance %.3f, %d/%d verdicts agree\n",
			a.SimServedRatio, a.LiveServedRatio, a.SimTTFT.P50, a.LiveTTFT.P50, a.SimTTFT.P90, a.LiveTTFT.P90, a.PickShareDistance, a.VerdictsAgree, a.Verdicts)
	}
}

// Tally counts a suite's outcomes.
type Tally struct{ Passed, Failed, Skipped int }

// Count tallies results by scenario and mode.
func Count(results []*Result) Tally {
	var t Tally
	for _, r := range results {
		if r.Error != "" {
			t.Failed++
			continue
		}
		for _, m := range []*ModeResult{r.Sim, r.Live} {
			switch {
			case m == nil:
			case m.Skipped != "":
				t.Skipped++
			case m.Passed():
				t.Passed++
			default:
				t.Failed++
			}
		}
	}
	return t
}

func (m *ModeResult) notes() []string {
	if m == nil {
		return nil
	}
	return m.Notes
}
