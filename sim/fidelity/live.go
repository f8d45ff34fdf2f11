package fidelity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/fleet"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/server"
	"switchyard/sim/workload"
)

// Model is the model the live fleet serves.
const Model = "switchyard/fake-model"

// adminToken guards the live router's admin API, which the harness
// polls for its subscriptions; the router listens on loopback only.
const adminToken = "fidelity-admin-token"

// Live is one live run: a fleet of fake engine workers at speedup 1
// behind the router, driven by a seeded Poisson workload on the wall
// clock and recorded.
type Live struct {
	// Path is the recording; the run is appended to it.
	Path string
	// Workers per role.
	Prefill, Decode, Aggregated int
	// Workload gives the arrival offsets, prompt lengths (rounded to a
	// multiple of four tokens, see Prompt) and max_tokens.
	Workload workload.PoissonConfig
	Seed     uint64
	// Version is written into the run's record.
	Version string
	// Log receives the router's and the fleet's logs; nil discards them.
	Log *slog.Logger
	// Profile, when set, runs the fleet's engines on it instead of the
	// mocker's timing (re-simulate with SimOptions.Profile).
	Profile *perf.Profile
}

// LiveResult is what a live run did.
type LiveResult struct {
	RunID int64
	// Sent counts the requests sent; all of them were answered.
	Sent int
	// ClientTTFT is each request's time from the client's send to its
	// first streamed chunk, in arrival order: the recorded TTFT plus the
	// client's side of the connection.
	ClientTTFT []time.Duration
	// Lateness is the largest delay of a send behind its planned time.
	Lateness time.Duration
	// Oversleep is how late a probe's 2 ms sleeps woke during the
	// traffic (median, 99th percentile): the scheduling delay every timer
	// of the live stack saw, which the simulation does not model: about
	// 0.2 ms and 1 ms on an idle machine, several milliseconds on a loaded
	// one.
	Oversleep [2]time.Duration
}

// RunLive starts the live stack, runs the workload through it, stops the
// router and closes the recording. Every request is streamed, so its
// time to first token is observable. An error means the run is unusable:
// a request failed, or the recording dropped records.
func RunLive(ctx context.Context, l Live) (res *LiveResult, err error) {
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	total := l.Prefill + l.Decode + l.Aggregated
	if total == 0 {
		return nil, errors.New("fidelity: a live run needs workers")
	}
	reqs, err := generate(l.Workload, l.Seed)
	if err != nil {
		return nil, err
	}

	feLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer feLn.Close()
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
server: {bind_address: "127.0.0.1:0"}
admin: {token: %q}
disaggregated_serving: {enabled: true}
backends:
  - {name: frontend, type: openai, url: "http://%s", role: unified, models: [%q]}
dynamo:
  enabled: true
  discovery:
    etcd:
      embedded: {enabled: true, listen: "127.0.0.1:0"}
  load: {direct_allow_cidrs: ["127.0.0.0/8"]}
  shim: {backends: [frontend]}
`, adminToken, feLn.Addr(), Model)), nil)
	if err != nil {
		return nil, err
	}
	masked, err := cfg.Masked().YAML()
	if err != nil {
		return nil, err
	}
	w, err := recorder.Create(l.Path, recorder.Run{Kind: "live", Config: string(masked), Version: l.Version,
		Picker: server.PickerName(cfg), Start: time.Now()}, recorder.Options{Logger: log})
	if err != nil {
		return nil, err
	}
	srv, err := server.NewWithOptions(cfg, log, server.Options{Recorder: w})
	if err != nil {
		_, _ = w.Close()
		return nil, err
	}
	// Shutdown: the workers stop as a crash would, leaving their keys to
	// their leases, so the recording ends with the fleet the requests saw
	// (a re-simulation rebuilds the fleet from the last registry state);
	// the etcd client closes, since the embedded etcd waits for its open
	// streams before it stops; then the router with the embedded etcd,
	// the recording, and the rest.
	var cli *clientv3.Client
	var fl *fleet.Fleet
	var fe *http.Server
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		if fl != nil {
			for _, m := range fl.Members() {
				_ = fl.Kill(m.ID())
			}
		}
		if cli != nil {
			cli.Close() // the embedded etcd waits for open client streams
		}
		srv.Close()
		st, cerr := w.Close()
		if fl != nil {
			fl.Close() // nothing left to deregister
		}
		if fe != nil {
			fe.Close()
		}
		var dropped uint64
		for _, n := range st.Dropped {
			dropped += n
		}
		if cerr == nil && dropped > 0 {
			cerr = fmt.Errorf("fidelity: the recording dropped %d records", dropped)
		}
		return cerr
	}
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	if cli, err = clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second}); err != nil {
		return nil, err
	}
	if fl, err = fleet.Start(ctx, cli, fleet.Spec{Model: Model, Prefill: l.Prefill, Decode: l.Decode, Aggregated: l.Aggregated,
		SpeedupRatio: 1, Engine: true, Profile: l.Profile}, log); err != nil {
		return nil, err
	}
	fe = &http.Server{Handler: fl.Handler(log), ReadHeaderTimeout: 10 * time.Second}
	go fe.Serve(feLn)

	if err := waitReady(ctx, srv, total); err != nil {
		return nil, err
	}

	res = &LiveResult{RunID: w.RunID(), Sent: len(reqs), ClientTTFT: make([]time.Duration, len(reqs))}
	tr := &http.Transport{MaxIdleConnsPerHost: 256}
	defer tr.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL("http://"+srv.Addr()+"/v1"), option.WithAPIKey("unused"),
		option.WithMaxRetries(0), option.WithHTTPClient(&http.Client{Transport: tr}))
	var wg sync.WaitGroup
	errs := make([]error, len(reqs))
	probeDone := make(chan struct{})
	probed := make(chan []time.Duration, 1)
	go func() { probed <- probe(probeDone) }()
	t0 := time.Now().Add(20 * time.Millisecond)
send:
	for i, r := range reqs {
		at := t0.Add(r.arrival)
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				break send
			}
		}
		res.Lateness = max(res.Lateness, time.Since(at))
		wg.Add(1)
		go func() {
			defer wg.Done()
			res.ClientTTFT[i], errs[i] = ask(ctx, client, r)
		}()
	}
	wg.Wait()
	close(probeDone)
	late := <-probed
	res.Oversleep = [2]time.Duration{percentile(late, 50), percentile(late, 99)}
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return nil, err
	}
	return res, stop()
}

// probe sleeps 2 ms at a time until done and returns how late each
// sleep woke, ascending.
func probe(done <-chan struct{}) []time.Duration {
	const d = 2 * time.Millisecond
	var late []time.Duration
	for {
		select {
		case <-done:
			slices.Sort(late)
			return late
		default:
		}
		start := time.Now()
		time.Sleep(d)
		late = append(late, time.Since(start)-d)
	}
}

// request is one planned request.
type request struct {
	arrival   time.Duration
	text      string
	maxTokens int
}

func generate(cfg workload.PoissonConfig, seed uint64) ([]request, error) {
	src, err := workload.NewPoisson(cfg, seed)
	if err != nil {
		return nil, err
	}
	var out []request
	for {
		r, ok := src.Next()
		if !ok {
			return out, nil
		}
		text, _ := Prompt(len(r.Tokens), seed<<20^r.ID)
		out = append(out, request{arrival: r.Arrival, text: text, maxTokens: r.MaxTokens})
	}
}

// ask streams one chat completion and returns the time to its first chunk.
func ask(ctx context.Context, client openai.Client, r request) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	s := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:     Model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(r.text)},
		MaxTokens: openai.Int(int64(r.maxTokens)),
	})
	defer s.Close()
	var first time.Duration
	chunks := 0
	for s.Next() {
		if chunks == 0 {
			first = time.Since(start)
		}
		chunks++
	}
	if err := s.Err(); err != nil {
		return 0, err
	}
	if chunks == 0 {
		return 0, errors.New("fidelity: an empty stream")
	}
	return first, nil
}

// waitReady waits until the router knows every worker and its load
// publisher, and every load subscription is connected: samples published
// before a subscription is live are lost (ZMQ's slow joiner), and the
// simulation starts its requests with every subscription up.
//
// The wait is generous and an admin request that fails is asked again: on
// a busy machine the stack can take many seconds to come up, and only a
// fleet that never becomes ready is an error.
func waitReady(ctx context.Context, srv *server.Server, workers int) error {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	hc := &http.Client{Timeout: 5 * time.Second}
	var lastErr error
	for {
		snap := srv.Discovery().Snapshot()
		if len(snap.Workers) == workers && snap.CountPublishers(discovery.TopicLoad) == workers {
			n, err := connectedLoadSubscriptions(ctx, hc, srv.Addr())
			if err == nil && n == workers {
				return nil
			}
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fidelity: the router did not see the fleet ready within %v (last admin error: %v): %w",
				readyWait, lastErr, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// readyWait bounds the wait for the fleet to be ready.
const readyWait = 60 * time.Second

func connectedLoadSubscriptions(ctx context.Context, hc *http.Client, addr string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/admin/dynamo/workers", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fidelity: admin API: %s", resp.Status)
	}
	var body struct {
		Subscriptions []struct {
			Family string `json:"family"`
			State  string `json:"state"`
		} `json:"subscriptions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range body.Subscriptions {
		if s.Family == discovery.TopicLoad && s.State == "connected" {
			n++
		}
	}
	return n, nil
}

// Prompt is a chat prompt of about tokens tokens, distinct per id. It is
// 3·k two-letter words with k = max(1, round(tokens/4)), so the router's
// prompt-size heuristic (the larger of ⌈characters/4⌉ and
// ⌊(4·words+2)/3⌋) and the frontend emulation's estimate (⌊4·words/3⌋)
// agree on exactly 4·k tokens, which the function returns: the recorded
// prompt size is then the size the live engine computed.
func Prompt(tokens int, id uint64) (string, int) {
	k := max(1, (tokens+2)/4)
	rng := rand.New(rand.NewPCG(id, 0x70726f6d7074))
	var b strings.Builder
	b.Grow(9 * k)
	for i := 0; i < 3*k; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte(byte('a' + rng.IntN(26)))
		b.WriteByte(byte('a' + rng.IntN(26)))
	}
	return b.String(), 4 * k
}
