// Package replay feeds a recording's inputs through a fresh routing core
// in virtual time: the discovery events, publishes, load messages, request
// arrivals and ended notices, in their recorded order and at their
// recorded times. Under the recorded picker every selection must come out
// the same (the determinism check); under another picker the report says
// how often it agrees with the recorded decisions and where it does not.
package replay

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/coreconfig"
	"switchyard/router/events"
	"switchyard/router/kv"
	"switchyard/router/picker"
	"switchyard/sim"
)

// MaxDivergences bounds the divergences a report lists (all are counted).
const MaxDivergences = 50

// Report is what a replay found.
type Report struct {
	RunID    int64  `json:"run_id"`
	Kind     string `json:"kind"`
	Recorded string `json:"recorded_picker"`
	Picker   string `json:"picker"`
	// Selections compares every pick; Decode and Prefill count agreement
	// on each pin alone.
	Selections  int `json:"selections"`
	Reproduced  int `json:"reproduced"`
	DecodeAgree int `json:"decode_agree"`
	// PrefillAgree counts picks where both or neither pinned a prefill
	// worker, and the same one when both did.
	PrefillAgree int `json:"prefill_agree"`
	// Inputs whose replayed handling differed from the recording: a
	// publish that reached another generation, a load message with
	// another decode result.
	GenerationMismatches int          `json:"generation_mismatches"`
	LoadResultMismatches int          `json:"load_result_mismatches"`
	KVResultMismatches   int          `json:"kv_result_mismatches"`
	Inputs               int          `json:"inputs"`
	Divergences          []Divergence `json:"divergences,omitempty"`
	// Integrity is what the run's records say about their completeness;
	// Incomplete lists its problems (a replay of an incomplete run is
	// made only when Options.AllowIncomplete asks for one).
	Integrity  recorder.Integrity `json:"integrity"`
	Incomplete []string           `json:"incomplete,omitempty"`

	// samePicker: reasons must match too; another picker is judged on
	// its pins alone (its reasons are its own).
	samePicker bool
}

// Divergence is one pick that came out differently.
type Divergence struct {
	Seq       uint64        `json:"seq"`
	At        time.Duration `json:"at_ns"`
	RequestID uint64        `json:"request_id"`
	Recorded  string        `json:"recorded"`
	Replayed  string        `json:"replayed"`
}

// Agreement is the share of selections reproduced exactly.
func (r *Report) Agreement() float64 {
	if r.Selections == 0 {
		return 1
	}
	return float64(r.Reproduced) / float64(r.Selections)
}

// Exact reports whether the replay reproduced every selection and input.
func (r *Report) Exact() bool {
	return r.Reproduced == r.Selections && r.GenerationMismatches == 0 && r.LoadResultMismatches == 0 &&
		r.KVResultMismatches == 0
}

// ErrIncomplete refuses recordings that do not hold every input of their
// run (no end marker, sequence gaps, drops): a replay of them would prove
// nothing.
var ErrIncomplete = errors.New("replay: the recording is incomplete")

// Options tune a replay.
type Options struct {
	// AllowIncomplete replays an incomplete run instead of refusing it;
	// the report still lists what is missing.
	AllowIncomplete bool
}

// Run replays run runID of rd under pickerName ("" = the recorded picker),
// refusing an incomplete run.
func Run(rd *recorder.Reader, runID int64, pickerName string) (*Report, error) {
	return RunWith(rd, runID, pickerName, Options{})
}

// Check reads the integrity of run runID (0 = the last run) and returns
// an error wrapping ErrIncomplete, naming every problem, when the run is
// incomplete.
func Check(rd *recorder.Reader, runID int64) (recorder.Integrity, error) {
	info, err := findRun(rd, runID)
	if err != nil {
		return recorder.Integrity{}, err
	}
	in, err := rd.Integrity(info.ID)
	if err != nil {
		return recorder.Integrity{}, err
	}
	if !in.Complete() {
		return in, fmt.Errorf("%w: run %d: %s", ErrIncomplete, info.ID, strings.Join(in.Problems(), "; "))
	}
	return in, nil
}

// RunWith replays run runID of rd under pickerName ("" = the recorded
// picker).
func RunWith(rd *recorder.Reader, runID int64, pickerName string, opts Options) (*Report, error) {
	info, err := findRun(rd, runID)
	if err != nil {
		return nil, err
	}
	integrity, err := Check(rd, info.ID)
	if err != nil && (!errors.Is(err, ErrIncomplete) || !opts.AllowIncomplete) {
		return nil, err
	}
	if pickerName == "" {
		pickerName = info.Picker
	}
	params, err := paramsOf(info)
	if err != nil {
		return nil, err
	}
	// A simulated run seeds its pickers from the scenario's seed; a live
	// router records the seed its picker drew from.
	seed := sim.PickerSeed(info.Seed)
	if info.Kind == "live" {
		seed = info.Seed
	}
	cleared := &clearedPublishers{}
	rc, err := core.New(core.Options{Picker: pickerName, Seed: seed, MaxStaleness: params.maxStaleness,
		KV: params.kv, Port: cleared})
	if err != nil {
		return nil, err
	}
	rep := &Report{RunID: runID, Kind: info.Kind, Recorded: info.Picker, Picker: pickerName,
		Integrity: integrity, Incomplete: integrity.Problems(), samePicker: pickerName == info.Picker}
	pending := map[uint64]pick{}
	var start time.Time
	rep.RunID = info.ID
	err = rd.Entries(info.ID, func(e recorder.Entry) error {
		if start.IsZero() {
			start = e.At
		}
		switch v := e.Value.(type) {
		case events.DiscoveryPut, events.DiscoveryDelete, events.DiscoveryResync, events.DiscoveryPrune, events.DiscoveryReset:
			rep.Inputs++
			rc.ApplyDiscovery(v.(events.Event))
		case recorder.Published:
			rep.Inputs++
			if gen := rc.Publish(v.At); gen != v.Generation {
				rep.GenerationMismatches++
			}
		case events.LoadConnected:
			rep.Inputs++
			rc.LoadConnected(v)
		case events.KVSubscribed:
			rep.Inputs++
			rc.KVSubscribed(v)
		case events.KVConnected:
			rep.Inputs++
			rc.KVConnected(v)
		case events.KVDisconnected:
			rep.Inputs++
			rc.KVDisconnected(v)
		case events.KVUnsubscribed:
			rep.Inputs++
			rc.KVUnsubscribed(v)
		case events.Tick:
			rep.Inputs++
			rc.Tick(v)
		case recorder.ConfigChanged:
			rep.Inputs++
			if !rep.samePicker {
				// A counterfactual keeps its own picker; the other
				// settings change as they did.
				v.Picker = rc.Settings().Picker
			}
			if err := rc.Configure(v); err != nil {
				return fmt.Errorf("replay: configuration change at seq %d: %w", e.Seq, err)
			}
		case recorder.KVMessage:
			if v.Frames == nil && v.Result == kv.PublisherLostResult {
				// A publisher whose ranks were cleared. Since the rule
				// runs in the core, this is an output of the tick or the
				// unsubscription before it, which the replayed core must
				// have produced too; in older recordings it is the input.
				if cleared.take(v.Namespace, v.PublisherID) {
					break
				}
				rep.Inputs++
				if rc.KVPublisherLost(events.KVPublisherLost{At: v.At, Namespace: v.Namespace, PublisherID: v.PublisherID}) == 0 {
					rep.KVResultMismatches++
				}
				break
			}
			rep.Inputs++
			ev := v.KVMessage
			if res := rc.KVMessage(&ev); res != v.Result {
				rep.KVResultMismatches++
			}
		case recorder.LoadMessage:
			rep.Inputs++
			ev := v.LoadMessage
			if res := rc.LoadMessage(&ev); res.String() != v.Result {
				rep.LoadResultMismatches++
			}
		case recorder.Request:
			rep.Inputs++
			req := picker.Request{ID: v.RequestID, Model: v.Model, Namespaces: v.Namespaces, PromptTokens: v.PromptTokens,
				Tokens: v.Tokens, MaxTokens: v.MaxTokens, Route: v.Route, Now: v.At}
			sel, ok := rc.Pick(core.Arrival{Req: req})
			pending[v.RequestID] = pick{req: req, sel: sel, ok: ok}
		case recorder.Selection:
			p, found := pending[v.RequestID]
			if !found {
				return fmt.Errorf("replay: selection of request %d at seq %d has no request before it", v.RequestID, e.Seq)
			}
			rep.compare(e, v, p)
		case recorder.Ended:
			rep.Inputs++
			if p, ok := pending[v.RequestID]; ok && p.ok {
				rc.Ended(p.req, p.sel, v.At, v.Reason)
			}
		case recorder.FirstToken:
			rep.Inputs++
			rc.FirstToken(v)
		case recorder.Progress:
			rep.Inputs++
			rc.Progress(v)
		case recorder.PeerBatch:
			rep.Inputs++
			rc.PeerBatch(v)
		case recorder.Outcome:
			delete(pending, v.RequestID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Publishers the replay cleared that the recording did not.
	rep.KVResultMismatches += len(cleared.pending)
	for i := range rep.Divergences {
		rep.Divergences[i].At -= time.Duration(start.UnixNano())
	}
	return rep, nil
}

// clearedPublishers is the replayed core's port: it keeps the publishers
// the core cleared (kv-events outputs without frames) until the recorded
// row of the same clearing is read.
type clearedPublishers struct {
	pending []core.KVApplied
}

func (c *clearedPublishers) Record(out core.Output) {
	if a, ok := out.(core.KVApplied); ok && a.Frames == nil && a.Result == kv.PublisherLostResult {
		c.pending = append(c.pending, a)
	}
}

// take consumes the oldest pending clearing if it is the publisher's.
func (c *clearedPublishers) take(namespace string, publisherID uint64) bool {
	if len(c.pending) == 0 || c.pending[0].Namespace != namespace || c.pending[0].PublisherID != publisherID {
		return false
	}
	c.pending = c.pending[1:]
	return true
}

type pick struct {
	req picker.Request
	sel picker.Selection
	ok  bool
}

func (rep *Report) compare(e recorder.Entry, rec recorder.Selection, p pick) {
	rep.Selections++
	same := rec.OK == p.ok && (!rec.OK || sameSelection(rec.Sel, p.sel, rep.samePicker))
	decode := rec.OK == p.ok && (!rec.OK || samePin(rec.Sel.Decode, p.sel.Decode))
	prefill := rec.OK == p.ok && rec.Sel.HasPrefill == p.sel.HasPrefill &&
		(!rec.Sel.HasPrefill || samePin(rec.Sel.Prefill, p.sel.Prefill))
	if same {
		rep.Reproduced++
	}
	if decode {
		rep.DecodeAgree++
	}
	if prefill {
		rep.PrefillAgree++
	}
	if !same && len(rep.Divergences) < MaxDivergences {
		rep.Divergences = append(rep.Divergences, Divergence{Seq: e.Seq, At: time.Duration(e.At.UnixNano()), RequestID: rec.RequestID,
			Recorded: describe(rec.OK, rec.Sel), Replayed: describe(p.ok, p.sel)})
	}
}

func sameSelection(a, b picker.Selection, reasons bool) bool {
	pins := a.Namespace == b.Namespace && samePin(a.Decode, b.Decode) && a.HasPrefill == b.HasPrefill &&
		(!a.HasPrefill || samePin(a.Prefill, b.Prefill))
	return pins && (!reasons || a.DecodeReason == b.DecodeReason && a.PrefillReason == b.PrefillReason)
}

func samePin(a, b picker.Pin) bool { return a.WorkerID == b.WorkerID && a.DPRank == b.DPRank }

func describe(ok bool, s picker.Selection) string {
	if !ok {
		return "no worker"
	}
	out := fmt.Sprintf("decode %x/%d (%s)", s.Decode.WorkerID, s.Decode.DPRank, s.DecodeReason)
	if s.HasPrefill {
		out += fmt.Sprintf(", prefill %x/%d (%s)", s.Prefill.WorkerID, s.Prefill.DPRank, s.PrefillReason)
	}
	return out
}

func findRun(rd *recorder.Reader, runID int64) (recorder.RunInfo, error) {
	runs, err := rd.Runs()
	if err != nil {
		return recorder.RunInfo{}, err
	}
	if runID == 0 && len(runs) > 0 {
		return runs[len(runs)-1], nil
	}
	i := slices.IndexFunc(runs, func(r recorder.RunInfo) bool { return r.ID == runID })
	if i < 0 {
		return recorder.RunInfo{}, fmt.Errorf("replay: no run %d in the recording", runID)
	}
	return runs[i], nil
}

// params are the core settings a run was recorded with.
type params struct {
	maxStaleness time.Duration
	kv           picker.KVOptions
}

// paramsOf reads the core settings from the run's scenario (simulated) or
// router configuration (live).
func paramsOf(info recorder.RunInfo) (params, error) {
	if info.Kind == "sim" {
		var sc sim.Scenario
		if err := yaml.Unmarshal([]byte(info.Scenario), &sc); err != nil {
			return params{}, fmt.Errorf("replay: the run's scenario: %w", err)
		}
		return params{maxStaleness: sc.Router.MaxStaleness.Std(), kv: sc.Router.KV.Options()}, nil
	}
	if info.Config == "" {
		return params{kv: picker.DefaultKVOptions()}, nil
	}
	cfg, err := config.Parse([]byte(info.Config), func(string) (string, bool) { return "", false })
	if err != nil {
		return params{}, fmt.Errorf("replay: the run's configuration: %w", err)
	}
	return params{maxStaleness: cfg.Dynamo.Load.MaxStaleness.Std(), kv: coreconfig.KVOptions(cfg.Dynamo.KV)}, nil
}
