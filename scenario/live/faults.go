package live

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"switchyard/fakefleet/fleet"
	"switchyard/sim"
)

// step is one moment of the fault timeline: a fault as the scenario
// names it, or the second half of one that lasts (the worker registering
// again after a lease_expiry).
type step struct {
	at     time.Duration // scenario time
	fault  int           // index in the injected list
	second bool
}

// inject fires sc's faults at Start + at/TimeScale, in time order (ties in
// declaration order, second halves after the faults due with them), until
// ctx ends, and returns them as injected.
func (s *stack) inject(ctx context.Context, sc *sim.Scenario, o Options, start time.Time) []Injected {
	faults := slices.Clone(sc.Faults)
	slices.SortStableFunc(faults, func(a, b sim.Fault) int { return cmp.Compare(a.At, b.At) })
	out := make([]Injected, 0, len(faults))
	steps := make([]step, 0, len(faults))
	for _, f := range faults {
		steps = append(steps, step{at: f.At.Std(), fault: len(steps)})
	}
	for len(steps) > 0 {
		st := steps[0]
		steps = steps[1:]
		if !waitUntil(ctx, start.Add(o.wall(st.at))) {
			break
		}
		if st.second {
			if err := s.secondHalf(ctx, out[st.fault]); err != nil {
				out[st.fault].Err = strings.TrimPrefix(out[st.fault].Err+"; "+err.Error(), "; ")
				o.Log.Warn("live run: fault did not end as scheduled", "kind", out[st.fault].Kind, "error", err)
			}
			continue
		}
		f := faults[st.fault]
		in := Injected{Fault: f, At: time.Now()}
		var err error
		switch {
		case f.Kind.FleetWide():
			err = s.fleetFault(f)
		case f.Worker < 0 || f.Worker >= len(s.workers):
			err = fmt.Errorf("worker %d is not a fleet index", f.Worker)
		default:
			m := s.workers[f.Worker]
			in.WorkerID = m.id
			err = s.fault(ctx, m, f)
		}
		if err != nil {
			in.Err = err.Error()
			o.Log.Warn("live run: fault not injected", "kind", f.Kind, "worker", f.Worker, "error", err)
		} else {
			o.Log.Info("live run: fault injected", "kind", f.Kind, "worker", f.Worker, "instance_id", fmt.Sprintf("%x", in.WorkerID))
		}
		out = append(out, in)
		if d := f.Duration.Std(); err == nil && d > 0 && f.Kind == sim.FaultLeaseExpiry {
			next := step{at: st.at + d, fault: len(out) - 1, second: true}
			i, _ := slices.BinarySearchFunc(steps, next.at, func(a step, at time.Duration) int {
				if a.at <= at {
					return -1
				}
				return 1
			})
			steps = slices.Insert(steps, i, next)
		}
	}
	return out
}

// secondHalf ends a lasting fault: the worker whose lease expired
// registers again under a new lease (its instance id changes; a worker
// killed meanwhile stays dead, as in the simulator).
func (s *stack) secondHalf(ctx context.Context, in Injected) error {
	switch in.Kind {
	case sim.FaultLeaseExpiry:
		m := s.workers[in.Worker]
		next, err := m.fleet.Reregister(ctx, m.id)
		if errors.Is(err, fleet.ErrNoWorker) {
			return nil
		}
		if err != nil {
			return err
		}
		s.workers[in.Worker].id = next
		s.log.Info("live run: worker registered again", "worker", in.Worker, "instance_id", fmt.Sprintf("%x", next))
	}
	return nil
}

// fleetFault injects a fault of the router's surroundings: etcd, the
// direct-mode frontend (the shim), or the router's own configuration
// (etcd_restart is refused, see Supported).
func (s *stack) fleetFault(f sim.Fault) error {
	switch f.Kind {
	case sim.FaultShimSlow:
		s.fe.SetDelay(f.Delay.Std())
	case sim.FaultShimFail:
		s.fe.SetFailing(true)
	case sim.FaultShimRecover:
		s.fe.SetDelay(0)
		s.fe.SetFailing(false)
	case sim.FaultReload:
		return s.reload(f.Router)
	default:
		return fmt.Errorf("fault %s is not injected live", f.Kind)
	}
	return nil
}

// reload merges p over the router settings in force and hands the router
// the resulting configuration as a changed configuration file: the same
// parsing, validation, refusals and reload path. A reload that changes
// nothing is applied and changes nothing, as in the simulator.
func (s *stack) reload(p *sim.ReloadParams) error {
	if p == nil {
		return nil
	}
	next := s.settings
	if p.Picker != "" {
		next.Picker = p.Picker
	}
	if p.MaxStaleness != nil {
		next.Router.MaxStaleness = *p.MaxStaleness
	}
	if p.KV != nil {
		next.Router.KV = p.KV.Over(next.Router.KV)
	}
	cfg, err := routerConfig(&next, s.token, s.etcd.Endpoint(), s.feURL)
	if err != nil {
		return err
	}
	file, err := cfg.YAML()
	if err != nil {
		return err
	}
	if result := s.srv.ReloadFile("scenario reload", file); result != "applied" {
		return fmt.Errorf("the router's reload was %s", result)
	}
	s.settings = next
	return nil
}
