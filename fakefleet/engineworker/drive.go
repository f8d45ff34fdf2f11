package engineworker

import "time"

// drive is rank r's driver: it sleeps on the clock until the engine's next
// event, advances the engine, and hands out what the step produced. A
// submit wakes it early because an idle engine's next event is "now".
func (w *Worker) drive(r uint32) {
	defer w.wg.Done()
	rk := w.ranks[r]
	for {
		w.mu.Lock()
		if w.closed {
			// A step that is already due would otherwise be retried for
			// ever: step refuses to run on a closed worker.
			w.mu.Unlock()
			return
		}
		if evs := rk.evs; len(evs) > 0 {
			// Events queued by Reset; delivered even when stalled, since a
			// reset engine is no longer the hung one.
			rk.evs = nil
			sinks := w.kvSinks
			w.mu.Unlock()
			for _, f := range sinks {
				f(r, evs)
			}
			continue
		}
		resume := w.resume
		at, busy := rk.eng.NextEvent()
		wait := at.Sub(w.engineNowLocked())
		w.mu.Unlock()

		switch {
		case resume != nil:
			select {
			case <-resume:
			case <-rk.wake: // maybe a Reset's events to deliver
			case <-w.done:
				return
			}
			continue
		case !busy:
			select {
			case <-rk.wake:
			case <-w.done:
				return
			}
			continue
		case wait > 0:
			if !w.sleep(wait, rk.wake) {
				select {
				case <-w.done:
					return
				default:
					continue // woken by a submit: re-read the next event
				}
			}
		}
		w.step(r)
	}
}

// sleep waits d on the clock; false if a submit or Close came first.
func (w *Worker) sleep(d time.Duration, wake <-chan struct{}) bool {
	t := w.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-wake:
	case <-w.done:
	}
	return false
}

// step advances rank r's engine to now and delivers the outputs to their
// requests, then the KV events to the sinks and the load change to the
// listeners, outside the lock so they may call back into the worker.
func (w *Worker) step(r uint32) {
	w.mu.Lock()
	if w.resume != nil || w.closed {
		w.mu.Unlock() // stalled or closed while the timer ran
		return
	}
	rk := w.ranks[r]
	before := w.loadLocked(r)
	outs := rk.eng.Advance(w.engineNowLocked())
	// Queued events are older than this step's; keep them first.
	evs := append(rk.evs, rk.eng.DrainKVEvents()...)
	rk.evs = nil
	for _, o := range outs {
		j := rk.jobs[o.RequestID]
		if j == nil {
			continue
		}
		j.outs = append(j.outs, o)
		if o.Finished {
			delete(rk.jobs, o.RequestID)
		}
		poke(j.ready)
	}
	var fs []func(uint32)
	if w.loadLocked(r) != before {
		fs = w.listeners
	}
	sinks := w.kvSinks
	w.mu.Unlock()
	if len(evs) > 0 {
		for _, f := range sinks {
			f(r, evs)
		}
	}
	for _, f := range fs {
		f(r)
	}
}
