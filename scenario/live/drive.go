package live

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/publish"
	"switchyard/router/admin"
	"switchyard/router/picker"
	"switchyard/sim"
	"switchyard/sim/workload"
)

// run waits for the router to know the fleet, then drives the workload
// and the faults from that moment (scenario time 0) until every request
// has ended.
func (s *stack) run(ctx context.Context, sc *sim.Scenario, o Options, src workload.Source, info *Info) error {
	base := "http://" + s.srv.Addr()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 30 * time.Second}}
	defer client.CloseIdleConnections()
	if err := s.waitReady(ctx, client, base, sc.Picker == picker.NameKV, o.ReadyTimeout); err != nil {
		return err
	}
	info.LeaseTTL = s.grantedTTL(ctx)
	info.Start = time.Now()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if sc.Until > 0 {
		runCtx, cancel = context.WithDeadline(runCtx, info.Start.Add(o.wall(sc.Until.Std())))
		defer cancel()
	}

	faultCtx, stopFaults := context.WithCancel(runCtx)
	faultsDone := make(chan []Injected, 1)
	go func() { faultsDone <- s.inject(faultCtx, sc, o, info.Start) }()

	var (
		wg      sync.WaitGroup
		results []*Result
	)
	for {
		r, ok := src.Next()
		if !ok || !waitUntil(runCtx, info.Start.Add(o.wall(sc.Warmup.Std()+r.Arrival))) {
			break
		}
		res := &Result{ID: r.ID, Sent: time.Now()}
		results = append(results, res)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.send(runCtx, client, base, sc.Model, r, o.RequestTimeout, res)
		}()
	}
	wg.Wait()
	stopFaults()
	info.Faults = <-faultsDone
	info.Requests = len(results)
	info.Results = make([]Result, len(results))
	for i, r := range results {
		info.Results[i] = *r
	}
	if e, ok := src.(interface{ Err() error }); ok && e.Err() != nil {
		return fmt.Errorf("workload: %w", e.Err())
	}
	return ctx.Err()
}

// waitUntil waits until t or ctx's end, reporting whether t came first.
func waitUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// completionBody is what a live run sends: the prompt as token ids (the
// router hashes them as given, the frontend hands them to the engine),
// the request's output length, streamed so the router times the first
// token.
type completionBody struct {
	Model         string   `json:"model"`
	Prompt        []uint32 `json:"prompt"`
	MaxTokens     int      `json:"max_tokens"`
	Stream        bool     `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// maxErrorBody bounds what is kept of an error answer.
const maxErrorBody = 4 << 10

// send sends one request and reads its answer to the end.
func (s *stack) send(ctx context.Context, client *http.Client, base, model string, r workload.Request, timeout time.Duration, res *Result) {
	defer func() { res.Ended = time.Now() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body := completionBody{Model: model, Prompt: r.Tokens, MaxTokens: r.MaxTokens, Stream: true}
	body.StreamOptions.IncludeUsage = true
	raw, err := json.Marshal(body)
	if err != nil {
		res.Err = err.Error()
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(raw))
	if err != nil {
		res.Err = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "live-"+strconv.FormatUint(r.ID, 10))
	resp, err := client.Do(req)
	if err != nil {
		res.Err = err.Error()
		return
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		res.Err = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	done := false
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		switch {
		case bytes.Equal(data, []byte("[DONE]")):
			done = true
		case bytes.Contains(data, []byte(`"error"`)):
			res.Err = "stream error: " + string(data[:min(len(data), maxErrorBody)])
		default:
			res.Events++
		}
	}
	if err := sc.Err(); err != nil && res.Err == "" {
		res.Err = err.Error()
	} else if !done && res.Err == "" {
		res.Err = "the stream ended without [DONE]"
	}
}

// readyPoll is how often the router's admin API is read while waiting.
const readyPoll = 50 * time.Millisecond

// waitReady waits until the router lists every worker and has connected
// to each one's kv_metrics publisher (and kv-events publisher under the
// kv picker), so no early sample is lost to the slow joiner.
func (s *stack) waitReady(ctx context.Context, client *http.Client, base string, kv bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, why := s.ready(ctx, client, base, kv)
		if ok {
			return nil
		}
		last = why
		if !waitUntil(ctx, time.Now().Add(readyPoll)) {
			return fmt.Errorf("live: the router was not ready within %s: %s", timeout, last)
		}
	}
}

func (s *stack) ready(ctx context.Context, client *http.Client, base string, kv bool) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/admin/dynamo/workers", nil)
	if err != nil {
		return false, err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, "admin API answered " + resp.Status
	}
	var w admin.WorkersResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&w); err != nil {
		return false, err.Error()
	}
	seen := map[string]bool{}
	for _, wk := range w.Workers {
		seen[wk.WorkerID] = true
	}
	for _, m := range s.workers {
		if !seen[strconv.FormatUint(m.id, 10)] {
			return false, fmt.Sprintf("worker %x not discovered", m.id)
		}
	}
	connected := map[string]int{}
	for _, sub := range w.Subscriptions {
		if sub.State == "connected" {
			connected[sub.Family]++
		}
	}
	families := []string{"kv_metrics"}
	if kv {
		families = append(families, publish.KVEventsTopic)
	}
	for _, f := range families {
		if connected[f] < len(s.workers) {
			return false, fmt.Sprintf("%d of %d %s subscriptions connected", connected[f], len(s.workers), f)
		}
	}
	return true, ""
}

// grantedTTL is the lease TTL etcd granted the first worker (0 when it
// cannot be read).
func (s *stack) grantedTTL(ctx context.Context) time.Duration {
	if len(s.workers) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(s.workers[0].id))
	if err != nil {
		return 0
	}
	return time.Duration(r.GrantedTTL) * time.Second
}

// fault injects one fault into worker m through its fleet.
func (s *stack) fault(ctx context.Context, m member, f sim.Fault) error {
	switch f.Kind {
	case sim.FaultKill:
		return m.fleet.Kill(m.id)
	case sim.FaultStall:
		return m.fleet.Stall(m.id, true)
	case sim.FaultResume:
		return m.fleet.Stall(m.id, false)
	case sim.FaultRestartPublisher:
		return m.fleet.RestartPublisher(ctx, m.id)
	case sim.FaultGap:
		return m.fleet.Gap(m.id)
	case sim.FaultDrop:
		return m.fleet.Drop(m.id, max(f.Count, 1))
	case sim.FaultMalformed:
		return m.fleet.Malformed(m.id)
	case sim.FaultReset:
		return m.fleet.Reset(m.id)
	case sim.FaultSlow:
		factor := f.Factor
		if factor == 0 {
			factor = 2 // the simulator's default
		}
		return m.fleet.SlowBy(m.id, factor)
	case sim.FaultFail:
		return m.fleet.Fail(m.id, true)
	case sim.FaultRecover:
		return errors.Join(m.fleet.Fail(m.id, false), m.fleet.SlowBy(m.id, 1))
	case sim.FaultMalformedRecord:
		return m.fleet.MalformedRecord(ctx, m.id)
	case sim.FaultLeaseExpiry:
		return m.fleet.ExpireLease(ctx, m.id)
	}
	return fmt.Errorf("fault %s is not injected live", f.Kind)
}
