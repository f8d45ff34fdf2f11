// Package fleet runs a fake Dynamo fleet on one machine: workers that
// register in etcd under their own leases, publish their load over ZMQ
// like dynamo.vllm workers, and generate through the direct-mode frontend
// emulation. It is the live half of the fake fleet; faults can be injected
// while it runs.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/engine/perf"
	"switchyard/fakefleet/engineworker"
	"switchyard/fakefleet/frontend"
	"switchyard/fakefleet/publish"
	"switchyard/fakefleet/registrar"
	"switchyard/fakefleet/worker"
	"switchyard/router/clock"
	"switchyard/router/prompt"
	"switchyard/router/prompt/artifacts"
)

// Spec describes a fleet serving one model in one namespace.
type Spec struct {
	Namespace string
	Model     string
	// Workers per role.
	Prefill, Decode, Aggregated int
	// Card values every worker advertises.
	BlockSize, TotalKVBlocks, MaxNumBatchedTokens, MaxNumSeqs, ContextLength, DPSize int
	// SpeedupRatio divides the timing model's delays.
	SpeedupRatio float64
	// KVTransferBandwidth (bytes/s) and KVBytesPerBlock price a decode
	// hop's import of the prefill worker's KV on engine-backed workers
	// (engineworker.Config); zero is instantaneous and the default size.
	KVTransferBandwidth float64
	KVBytesPerBlock     int
	// LeaseTTL in seconds (Dynamo's default is 10).
	LeaseTTL int64
	// Fields chooses the ActiveLoad fields published.
	Fields publish.Fields
	// Engine runs every worker on the engine model (fakefleet/engine:
	// continuous batching, prefix-cached KV blocks, preemption) and
	// publishes its KV events on a kv-events channel advertised under the
	// worker's lease. False runs the simpler fakefleet/worker, without KV
	// events.
	Engine bool
	// ReplayBuffer is how many kv-events messages each engine worker keeps
	// for replay (0: publish.DefaultReplayBuffer, vLLM's default; negative:
	// no replay socket). A full buffer holds a few MiB per worker.
	ReplayBuffer int
	// Artifacts, when set, are the tokenizer files every worker names on
	// its card and the frontend emulation tokenizes prompts with, as a
	// dynamo.vllm fleet serving that model does.
	Artifacts *Artifacts
	// Profile, when set, runs every engine on a physical step-time model
	// (fakefleet/engine/perf) instead of the mocker's polynomials, with
	// the profile's vLLM settings: the card values left zero come from it
	// (KV capacity from the GPU's memory, max_num_batched_tokens,
	// max_num_seqs, block size, max_model_len as context length), those
	// set win, and the engine enforces the advertised context length.
	// It needs Engine.
	Profile *perf.Profile
}

// ErrProfileNeedsEngine: only the engine model runs on a profile.
var ErrProfileNeedsEngine = errors.New("fleet: a profile needs engine-backed workers (Spec.Engine)")

// withProfile fills the card values s leaves zero from its profile and
// returns the engine settings every rank runs with.
func (s Spec) withProfile() (Spec, engine.Config, error) {
	if s.Profile == nil {
		return s, engine.Config{}, nil
	}
	if !s.Engine {
		return s, engine.Config{}, ErrProfileNeedsEngine
	}
	p := *s.Profile
	e := &p.Engine
	override := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	override(&e.BlockSize, s.BlockSize)
	override(&e.MaxNumBatchedTokens, s.MaxNumBatchedTokens)
	override(&e.MaxNumSeqs, s.MaxNumSeqs)
	override(&e.MaxModelLen, s.ContextLength)
	override(&e.NumGPUBlocks, s.TotalKVBlocks)
	cfg, err := p.EngineConfig()
	if err != nil {
		return s, engine.Config{}, fmt.Errorf("fleet: profile %s: %w", p.Name, err)
	}
	s.BlockSize, s.TotalKVBlocks = cfg.BlockSize, cfg.TotalKVBlocks
	s.MaxNumBatchedTokens, s.MaxNumSeqs, s.ContextLength = cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs, cfg.MaxModelLen
	return s, cfg, nil
}

// Artifacts are a model's tokenizer files on disk.
type Artifacts struct {
	// TokenizerPath is a tokenizer.json; ConfigPath a tokenizer_config.json
	// carrying the chat template (optional).
	TokenizerPath, ConfigPath string
}

// withDefaults fills what a spec leaves out.
func (s Spec) withDefaults() Spec {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.BlockSize, 16)
	def(&s.TotalKVBlocks, 8192)
	def(&s.MaxNumBatchedTokens, 8192)
	def(&s.MaxNumSeqs, 256)
	def(&s.ContextLength, 32768)
	def(&s.DPSize, 1)
	if s.Namespace == "" {
		s.Namespace = "dynamo"
	}
	if s.SpeedupRatio <= 0 {
		s.SpeedupRatio = 1
	}
	if s.LeaseTTL <= 0 {
		s.LeaseTTL = registrar.DefaultTTL
	}
	return s
}

// Generator is what a fleet member runs requests on and injects faults
// into: fakefleet/worker, or an engine-backed worker (Spec.Engine).
type Generator interface {
	frontend.Generator
	Load(rank uint32) worker.Load
	OnChange(f func(rank uint32))
	SetStalled(bool)
	SetSlow(time.Duration)
	SetFailing(bool)
}

// engineGenerator serves the frontend's requests on an engine-backed
// worker. Prompts are synthesized from the prompt's identity, so equal
// prompts share cached blocks; a decode hop after a prefill hop imports
// the prompt's KV (charged at the worker's transfer bandwidth) instead of
// computing it again.
type engineGenerator struct{ *engineworker.Worker }

func (e engineGenerator) Generate(ctx context.Context, r worker.Request, emit func(string) error) (worker.Result, error) {
	return e.Worker.Generate(ctx, engineworker.Request{DPRank: r.DPRank, PromptTokens: r.PromptTokens, Tokens: r.Tokens,
		MaxTokens: r.MaxTokens, Seed: r.PromptID, CachedTokens: r.CachedTokens}, emit)
}

func (e engineGenerator) Config() worker.Config {
	c := e.Worker.Config()
	return worker.Config{Model: c.Model, Role: c.Role, BlockSize: c.BlockSize, TotalKVBlocks: c.TotalKVBlocks,
		MaxNumBatchedTokens: c.MaxNumBatchedTokens, MaxNumSeqs: c.MaxNumSeqs, DPSize: c.DPSize, SpeedupRatio: c.SpeedupRatio}
}

// Member is one running worker.
type Member struct {
	Role   string
	Worker Generator
	pub    *publish.Publisher
	record registrar.Worker
	// regMu guards reg, which a re-registration replaces.
	regMu sync.Mutex
	reg   Registration
	// loads and kvs publish under the member's current instance id; a
	// re-registration replaces them (see Reregister).
	loads   atomic.Pointer[publish.LoadReporter]
	kvs     atomic.Pointer[publish.KVReporter]
	stalled atomic.Bool

	// engine and its kv-events publisher are set only with Spec.Engine.
	engine *engineworker.Worker
	kvPub  *publish.Publisher
}

// channels are the member's advertised event-plane publishers: kv_metrics,
// and kv-events when it has an engine.
func (m *Member) channels() []registrar.Channel {
	out := []registrar.Channel{{Topic: "kv_metrics", PublisherID: m.pub.ID(), Endpoint: m.pub.Endpoint()}}
	if m.kvPub != nil {
		out = append(out, registrar.Channel{Topic: publish.KVEventsTopic, PublisherID: m.kvPub.ID(), Endpoint: m.kvPub.Endpoint(),
			Replay: m.kvPub.ReplayEndpoint()})
	}
	return out
}

// stop ends the member's publishing and its engine, if any.
func (m *Member) stop() {
	if l := m.loads.Load(); l != nil {
		l.Close()
	}
	m.pub.Close()
	if m.engine != nil {
		m.engine.Close()
		m.kvPub.Close()
	}
}

// PublisherID is the current incarnation of the member's load publisher.
func (m *Member) PublisherID() uint64 { return m.pub.ID() }

// ID is the member's instance id (its lease id in etcd, the hash of its
// Pod's name on Kubernetes).
func (m *Member) ID() uint64 { return m.registration().InstanceID() }

func (m *Member) registration() Registration {
	m.regMu.Lock()
	defer m.regMu.Unlock()
	return m.reg
}

// Fleet is a running fake fleet.
type Fleet struct {
	registry Registry
	spec     Spec
	// engine is the profile's engine configuration (zero without one).
	engine engine.Config
	log    *slog.Logger

	mu      sync.RWMutex
	members map[uint64]*Member
	order   []uint64

	// cards are the artifact slots every worker advertises; prompts the
	// frontend's tokenizer (both nil without Spec.Artifacts).
	tokenizerFile, configFile *registrar.CheckedFile
	prompts                   *prompt.Service
}

// Start registers every worker of spec in etcd, under leases of
// spec.LeaseTTL, and starts it.
func Start(ctx context.Context, cli *clientv3.Client, spec Spec, log *slog.Logger) (*Fleet, error) {
	return StartIn(ctx, EtcdRegistry(cli, spec.LeaseTTL), spec, log)
}

// StartIn publishes every worker of spec in registry and starts it.
func StartIn(ctx context.Context, registry Registry, spec Spec, log *slog.Logger) (*Fleet, error) {
	spec, ecfg, err := spec.withProfile()
	if err != nil {
		return nil, err
	}
	spec = spec.withDefaults()
	if spec.Profile != nil {
		// A profile without a length cap advertises the default context
		// length, and the engine keeps to what is advertised.
		ecfg.MaxModelLen = spec.ContextLength
	}
	f := &Fleet{registry: registry, spec: spec, engine: ecfg, log: log, members: map[uint64]*Member{}}
	if spec.Artifacts != nil {
		if err := f.loadArtifacts(*spec.Artifacts); err != nil {
			return nil, err
		}
	}
	for _, r := range []struct {
		role string
		n    int
	}{{"prefill", spec.Prefill}, {"decode", spec.Decode}, {"aggregated", spec.Aggregated}} {
		for i := 0; i < r.n; i++ {
			if _, err := f.add(ctx, r.role); err != nil {
				f.Close()
				return nil, fmt.Errorf("start %s worker: %w", r.role, err)
			}
		}
	}
	return f, nil
}

func (f *Fleet) add(ctx context.Context, role string) (*Member, error) {
	s := f.spec
	pub, err := publish.New("kv_metrics")
	if err != nil {
		return nil, err
	}
	component := role
	if role == "aggregated" {
		component = "backend"
	}
	rec := registrar.Worker{Namespace: s.Namespace, Component: component, WorkerType: role, Model: s.Model,
		BlockSize: s.BlockSize, TotalKVBlocks: s.TotalKVBlocks, MaxNumBatchedTokens: s.MaxNumBatchedTokens,
		MaxNumSeqs: s.MaxNumSeqs, ContextLength: s.ContextLength, DPSize: s.DPSize,
		Transport: "127.0.0.1:0/fake/" + component, Tokenizer: f.tokenizerFile, PromptFormatter: f.configFile}
	m := &Member{Role: role, pub: pub}
	if s.Engine {
		if m.kvPub, err = publish.New(publish.KVEventsTopic); err != nil {
			pub.Close()
			return nil, err
		}
		if s.ReplayBuffer >= 0 {
			if err = m.kvPub.ServeReplay(s.ReplayBuffer); err != nil {
				m.kvPub.Close()
				pub.Close()
				return nil, err
			}
		}
		e := f.engine
		m.engine = engineworker.New(engineworker.Config{Model: s.Model, Role: role, BlockSize: s.BlockSize,
			TotalKVBlocks: s.TotalKVBlocks, MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs,
			DPSize: s.DPSize, SpeedupRatio: s.SpeedupRatio, Timing: e.Timing, MaxModelLen: e.MaxModelLen,
			DisablePrefixCaching: e.DisablePrefixCaching, DisableChunkedPrefill: e.DisableChunkedPrefill,
			KVTransferBandwidth: s.KVTransferBandwidth, KVBytesPerBlock: s.KVBytesPerBlock}, clock.Real{})
		m.Worker = engineGenerator{m.engine}
	} else {
		m.Worker = worker.New(worker.Config{Model: s.Model, Role: role, BlockSize: s.BlockSize, TotalKVBlocks: s.TotalKVBlocks,
			MaxNumBatchedTokens: s.MaxNumBatchedTokens, MaxNumSeqs: s.MaxNumSeqs, DPSize: s.DPSize,
			SpeedupRatio: s.SpeedupRatio}, clock.Real{})
	}
	w := m.Worker
	rec.Channels = m.channels()
	reg, err := f.registry.Register(ctx, rec, f.log.With("role", role))
	if err != nil {
		m.stop()
		return nil, err
	}
	m.reg, m.record = reg, rec // not shared yet
	if err := m.report(reg.InstanceID(), s.Fields); err != nil {
		m.stop()
		reg.Kill()
		return nil, err
	}
	if m.engine != nil {
		// The worker id is the lease id, known only now; no request can
		// have reached the fresh engine yet, so no event is missed.
		m.engine.OnKVEvents(func(rank uint32, evs []engine.KVEvent) {
			if k := m.kvs.Load(); k != nil {
				_ = k.Report(rank, evs)
			}
		})
	}
	w.OnChange(func(rank uint32) { m.loads.Load().Changed(rank) })
	f.mu.Lock()
	f.members[m.ID()] = m
	f.order = append(f.order, m.ID())
	f.mu.Unlock()
	f.log.Info("fake worker started", "role", role, "instance_id", fmt.Sprintf("%x", m.ID()), "publisher_id", pub.ID())
	return m, nil
}

// report makes the member publish its load and KV events as instance id,
// replacing (and closing) the reporters of an earlier identity.
func (m *Member) report(id uint64, fields publish.Fields) error {
	if m.kvPub != nil {
		kvs, err := publish.NewKVReporter(m.kvPub, id)
		if err != nil {
			return err
		}
		m.kvs.Store(kvs)
	}
	w := m.Worker
	loads := publish.NewLoadReporter(m.pub, id, func(rank uint32) publish.Load {
		l := w.Load(rank)
		return publish.Load{KVUsedBlocks: l.KVUsedBlocks, ActiveDecodeBlocks: l.ActiveDecodeBlocks, ActivePrefillTokens: l.ActivePrefillTokens}
	}, fields)
	loads.SetStalled(m.stalled.Load())
	if old := m.loads.Swap(loads); old != nil {
		old.Close()
	}
	return nil
}

// Members lists the running workers in start order.
func (f *Fleet) Members() []*Member {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*Member, 0, len(f.order))
	for _, id := range f.order {
		out = append(out, f.members[id])
	}
	return out
}

// ErrNoWorker is returned for an unknown instance id.
var ErrNoWorker = errors.New("no such worker")

func (f *Fleet) member(id uint64) (*Member, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m, ok := f.members[id]
	if !ok {
		return nil, ErrNoWorker
	}
	return m, nil
}

// Kill ends a worker as a crash would: it stops serving and publishing at
// once, and its keys vanish when its lease lapses.
func (f *Fleet) Kill(id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	delete(f.members, id)
	f.order = slices.DeleteFunc(f.order, func(x uint64) bool { return x == id })
	f.mu.Unlock()
	m.stop()
	m.registration().Kill()
	return nil
}

// Stall stops (or resumes) a worker's progress and its publishing.
func (f *Fleet) Stall(id uint64, on bool) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	m.Worker.SetStalled(on)
	m.stalled.Store(on)
	m.loads.Load().SetStalled(on)
	return nil
}

// RestartPublisher gives a worker's load publisher a new incarnation (new
// id and port) and re-advertises it, as a restarted worker process would.
func (f *Fleet) RestartPublisher(ctx context.Context, id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	if err := m.pub.Restart(); err != nil {
		return err
	}
	m.record.Channels = m.channels()
	return m.registration().Readvertise(ctx, m.record)
}

// ExpireLease ends a worker's registration while it keeps serving and
// publishing, as when its lease lapses because its keep-alives failed:
// its records leave discovery at once (the lease is revoked) and are not
// put back. Reregister registers it again.
func (f *Fleet) ExpireLease(ctx context.Context, id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	return m.registration().Deregister(ctx)
}

// Reregister registers a worker whose lease expired under a new
// registration, as a Dynamo worker does when it gets a new lease: in
// etcd that is a new lease, so a new instance id, which it returns. The
// worker's load and KV events are published under the new id from then
// on, and the frontend finds it by the new id only.
func (f *Fleet) Reregister(ctx context.Context, id uint64) (uint64, error) {
	m, err := f.member(id)
	if err != nil {
		return 0, err
	}
	reg, err := f.registry.Register(ctx, m.record, f.log.With("role", m.Role))
	if err != nil {
		return 0, err
	}
	next := reg.InstanceID()
	if err := m.report(next, f.spec.Fields); err != nil {
		_ = reg.Deregister(ctx)
		return 0, err
	}
	m.regMu.Lock()
	m.reg = reg
	m.regMu.Unlock()
	f.mu.Lock()
	delete(f.members, id)
	f.members[next] = m
	if i := slices.Index(f.order, id); i >= 0 {
		f.order[i] = next
	}
	f.mu.Unlock()
	_ = f.publishLoad(m) // the first sample under the new identity
	f.log.Info("fake worker registered again", "role", m.Role, "old_instance_id", fmt.Sprintf("%x", id), "instance_id", fmt.Sprintf("%x", next))
	return next, nil
}

// PublishLoad publishes every rank's current load now, changed or not,
// unless the worker is stalled. ZMQ PUB drops what is sent before a
// subscriber joins, so a worker's first sample can be lost to a router
// that connects a moment later; a test that needs one sends it again.
func (f *Fleet) PublishLoad(id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	return f.publishLoad(m)
}

func (f *Fleet) publishLoad(m *Member) error {
	if m.stalled.Load() {
		return nil
	}
	for rank := range uint32(max(f.spec.DPSize, 1)) {
		if err := m.loads.Load().Publish(rank); err != nil {
			return err
		}
	}
	return nil
}

// Gap makes a worker's next load message skip a sequence.
func (f *Fleet) Gap(id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	m.pub.SkipSequence()
	return nil
}

// maxDrop bounds one drop fault: a replay buffer holds 10,000 messages.
const maxDrop = publish.DefaultReplayBuffer

// Drop loses a worker's next n kv-events messages on the way: the router
// sees a gap that a replay can recover, unlike Gap's skipped sequence.
func (f *Fleet) Drop(id uint64, n int) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	if m.kvPub == nil {
		return ErrNoEngine
	}
	m.kvPub.DropNext(n)
	return nil
}

// Malformed publishes one malformed message on a worker's load channel.
func (f *Fleet) Malformed(id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	return m.pub.SendRaw([]byte("kv_metrics"), []byte{1, 2, 3}, []byte("not a sequence"), []byte{9, 0xff})
}

// ErrNoEngine is returned by faults that need an engine-backed worker.
var ErrNoEngine = errors.New("the worker has no engine model (Spec.Engine is false)")

// Reset empties an engine-backed worker's KV cache, as an engine restart
// would: in-flight requests fail and a Cleared event is published.
func (f *Fleet) Reset(id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	if m.engine == nil {
		return ErrNoEngine
	}
	m.engine.Reset()
	return nil
}

// SlowBy makes an engine-backed worker's decode steps take factor times
// longer (1 restores them), as the simulator's slow fault does; the admin
// API's slow adds a fixed delay instead.
func (f *Fleet) SlowBy(id uint64, factor float64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	if m.engine == nil {
		return ErrNoEngine
	}
	m.engine.SetSlowFactor(factor)
	return nil
}

// Fail makes a worker answer generations with a 5xx (on), or serve again.
func (f *Fleet) Fail(id uint64, on bool) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	m.Worker.SetFailing(on)
	return nil
}

// MalformedRecord publishes a record discovery cannot read beside the
// worker's own (in etcd a value that is not JSON under its lease; on
// Kubernetes a malformed metadata spec): the router must skip it and keep
// the worker.
func (f *Fleet) MalformedRecord(ctx context.Context, id uint64) error {
	m, err := f.member(id)
	if err != nil {
		return err
	}
	return m.registration().PutMalformed(ctx)
}

// Directory is the frontend emulation's view of the fleet.
func (f *Fleet) Directory() *Directory { return &Directory{f} }

// Close deregisters every worker (revoking leases) and stops publishing.
func (f *Fleet) Close() {
	f.mu.Lock()
	members := f.members
	f.members, f.order = map[uint64]*Member{}, nil
	f.mu.Unlock()
	if f.prompts != nil {
		f.prompts.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3e9)
	defer cancel()
	for _, m := range members {
		m.stop()
		_ = m.registration().Deregister(ctx)
	}
}

// Directory resolves instance ids for the frontend emulation.
type Directory struct{ f *Fleet }

// Worker returns a live worker and the model it serves.
func (d *Directory) Worker(id uint64) (frontend.Generator, string, bool) {
	m, err := d.f.member(id)
	if err != nil {
		return nil, "", false
	}
	return m.Worker, d.f.spec.Model, true
}

// HasPrefill reports whether prefill workers serve model.
func (d *Directory) HasPrefill(model string) bool {
	if model != d.f.spec.Model {
		return false
	}
	for _, m := range d.f.Members() {
		if m.Role == "prefill" {
			return true
		}
	}
	return false
}

// Models lists the served model.
func (d *Directory) Models() []string { return []string{d.f.spec.Model} }

// loadArtifacts reads the model's tokenizer files: the cards name them by
// absolute path and blake3 checksum, and the frontend tokenizes with them.
func (f *Fleet) loadArtifacts(a Artifacts) error {
	file := func(path string) ([]byte, *registrar.CheckedFile, error) {
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, nil, err
		}
		data, err := os.ReadFile(abs)
		if err != nil {
			return nil, nil, fmt.Errorf("fleet artifacts: %w", err)
		}
		return data, &registrar.CheckedFile{Path: abs, Checksum: string(artifacts.Sum(data)), Size: int64(len(data))}, nil
	}
	tok, tf, err := file(a.TokenizerPath)
	if err != nil {
		return err
	}
	var cfg []byte
	var cf *registrar.CheckedFile
	if a.ConfigPath != "" {
		if cfg, cf, err = file(a.ConfigPath); err != nil {
			return err
		}
	}
	p, err := prompt.FromFiles(tok, cfg)
	if err != nil {
		return fmt.Errorf("fleet artifacts: %w", err)
	}
	f.tokenizerFile, f.configFile = tf, cf
	f.prompts = prompt.New(prompt.Static{P: p}, prompt.Limits{}, prompt.Hooks{})
	return nil
}

// Checksums are the blake3 checksums of the fleet's artifacts, as an
// operator pins them (empty without Spec.Artifacts).
func (f *Fleet) Checksums() []string {
	var out []string
	for _, c := range []*registrar.CheckedFile{f.tokenizerFile, f.configFile} {
		if c != nil {
			out = append(out, c.Checksum)
		}
	}
	return out
}
