package live

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/fleet"
	"switchyard/fakefleet/frontend"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/discoverysource/etcdsource/embedded"
	"switchyard/router/prompt"
	"switchyard/router/server"
	"switchyard/sim"
)

// stack is the running parts of a live run, started in the order a
// router meets them (etcd, fleet, frontend, router) and stopped router
// first, so the recording is complete before the fleet goes away.
type stack struct {
	log      *slog.Logger
	dir      string
	etcd     *embedded.Embedded
	cli      *clientv3.Client
	groups   []*fleet.Fleet // one per scenario fleet group, in order
	workers  []member       // declaration order, groups expanded
	frontend *http.Server
	fe       *frontend.Frontend
	feURL    string
	// settings is the scenario with the router settings in force: a
	// reload fault merges its own over them.
	settings sim.Scenario
	token    string
	cfg      *config.Config
	rec      *recorder.Writer
	srv      *server.Server
}

// member is one worker: its instance id and the fleet that runs it.
type member struct {
	id    uint64
	fleet *fleet.Fleet
}

// start brings up everything sc needs; on an error what was started is
// stopped.
func start(ctx context.Context, sc *sim.Scenario, o Options) (*stack, error) {
	s := &stack{log: o.Log, token: randomToken()}
	if err := s.startAll(ctx, sc, o); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

func (s *stack) startAll(ctx context.Context, sc *sim.Scenario, o Options) error {
	dir, err := os.MkdirTemp("", "switchyard-live-")
	if err != nil {
		return err
	}
	s.dir = dir
	s.etcd, err = embedded.Start(embedded.Options{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0", NoFsync: true})
	if err != nil {
		return fmt.Errorf("embedded etcd: %w", err)
	}
	s.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.Endpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	ttl := leaseSeconds(sc.Network.LeaseTTL.Std(), o.TimeScale)
	for i, g := range sc.Fleet {
		spec, err := groupSpec(sc, g, o.TimeScale, ttl)
		if err != nil {
			return fmt.Errorf("fleet[%d]: %w", i, err)
		}
		f, err := fleet.Start(ctx, s.cli, spec, s.log.With("component", "fleet", "group", i))
		if err != nil {
			return fmt.Errorf("fleet[%d]: %w", i, err)
		}
		s.groups = append(s.groups, f)
		for _, m := range f.Members() {
			s.workers = append(s.workers, member{id: m.ID(), fleet: f})
		}
	}
	if err := s.startFrontend(sc.Model); err != nil {
		return err
	}
	s.settings = *sc
	if s.cfg, err = routerConfig(sc, s.token, s.etcd.Endpoint(), s.feURL); err != nil {
		return err
	}
	seed := sc.Seed
	if seed == 0 {
		seed = 1 // the server draws a seed for 0; a run's picker is seeded from its scenario
	}
	masked, err := s.cfg.Masked().YAML()
	if err != nil {
		return err
	}
	s.rec, err = recorder.Create(o.RecordPath, recorder.Run{Kind: "live", Config: string(masked), Scenario: sc.YAML(),
		Version: o.Version, Picker: server.PickerName(s.cfg), Seed: seed, Start: time.Now()},
		recorder.Options{Logger: s.log.With("component", "recorder")})
	if err != nil {
		return err
	}
	s.srv, err = server.NewWithOptions(s.cfg, s.log.With("component", "router"), server.Options{Recorder: s.rec, Seed: seed})
	return err
}

// leaseSeconds is the workers' lease TTL: the scenario's, divided by the
// time scale, in the whole seconds etcd grants (at least 1; etcd may
// still grant more, see Info.LeaseTTL).
func leaseSeconds(ttl time.Duration, scale float64) int64 {
	return max(int64(math.Ceil(ttl.Seconds()/scale)), 1)
}

// groupSpec is the fleet of one scenario group: its role and count, its
// card values, its engine (the mocker's timing or its profile) running
// scale times faster, on the engine model so it publishes KV events.
func groupSpec(sc *sim.Scenario, g sim.WorkerGroup, scale float64, ttl int64) (fleet.Spec, error) {
	spec := fleet.Spec{Namespace: sc.Namespace, Model: sc.Model, BlockSize: g.BlockSize, TotalKVBlocks: g.TotalKVBlocks,
		MaxNumBatchedTokens: g.MaxNumBatchedTokens, MaxNumSeqs: g.MaxNumSeqs, ContextLength: g.ContextLength, DPSize: g.DPSize,
		SpeedupRatio: g.SpeedupRatio * scale, KVTransferBandwidth: g.KVTransferBandwidth, KVBytesPerBlock: g.KVBytesPerBlock,
		LeaseTTL: ttl, Engine: true, ReplayBuffer: -1}
	// As in the simulator, a group's publishers offer replay only when its
	// kv_replay says so.
	if g.KVReplay != nil && g.KVReplay.Enabled {
		spec.ReplayBuffer = cmp.Or(g.KVReplay.Buffer, sim.DefaultKVReplayBuffer)
	}
	switch g.Role {
	case "prefill":
		spec.Prefill = g.Count
	case "decode":
		spec.Decode = g.Count
	default:
		spec.Aggregated = g.Count
	}
	for _, f := range g.LoadFields {
		switch f {
		case "active_decode_blocks":
			spec.Fields.ActiveDecodeBlocks = true
		case "active_prefill_tokens":
			spec.Fields.ActivePrefillTokens = true
		}
	}
	if g.Engine != nil && g.Engine.Profile != "" {
		p, err := perf.LoadProfile(g.Engine.Profile)
		if err != nil {
			return spec, fmt.Errorf("engine.profile: %w", err)
		}
		spec.Profile = &p
	}
	return spec, nil
}

func (s *stack) startFrontend(model string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.feURL = "http://" + ln.Addr().String()
	s.fe = frontend.New(directory{groups: s.groups, model: model}, s.log.With("component", "frontend"))
	s.fe.UsePrompts(tokenIDs{})
	s.frontend = &http.Server{Handler: s.fe, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.frontend.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("frontend emulation stopped", "error", err)
		}
	}()
	return nil
}

// stop closes the router first (which stops recording), then the
// recording, the frontend, the fleet and etcd. Safe on a partly started
// stack.
func (s *stack) stop() error {
	if s.srv != nil {
		s.srv.Close()
	}
	var err error
	if s.rec != nil {
		var st recorder.Stats
		st, err = s.rec.Close()
		for table, n := range st.Dropped {
			if n > 0 {
				err = errors.Join(err, fmt.Errorf("recording: %d %s records dropped", n, table))
			}
		}
	}
	if s.frontend != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if s.frontend.Shutdown(ctx) != nil {
			_ = s.frontend.Close()
		}
		cancel()
	}
	for _, f := range s.groups {
		f.Close()
	}
	if s.cli != nil {
		_ = s.cli.Close()
	}
	if s.etcd != nil {
		s.etcd.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
	return err
}

// directory is the frontend emulation's view of every group's fleet.
type directory struct {
	groups []*fleet.Fleet
	model  string
}

func (d directory) Worker(id uint64) (frontend.Generator, string, bool) {
	for _, f := range d.groups {
		if g, m, ok := f.Directory().Worker(id); ok {
			return g, m, true
		}
	}
	return nil, "", false
}

func (d directory) HasPrefill(model string) bool {
	for _, f := range d.groups {
		if f.Directory().HasPrefill(model) {
			return true
		}
	}
	return false
}

func (d directory) Models() []string { return []string{d.model} }

// tokenIDs is the frontend's "tokenizer": a live run sends every prompt
// as token ids, which the frontend hands the engine as they are (as
// dynamo.frontend does), so the workers cache the very blocks the
// router hashes.
type tokenIDs struct{}

func (tokenIDs) Tokens(_ context.Context, _ string, chat bool, body []byte) ([]uint32, string) {
	if chat {
		return nil, "chat"
	}
	ids, _, ok := prompt.TokenPrompt(body, MaxPromptTokens)
	if !ok {
		return nil, "not token ids"
	}
	return ids, ""
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
