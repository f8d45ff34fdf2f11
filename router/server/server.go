// Package server assembles a live Switchyard process from a configuration:
// the optional embedded etcd, the discovery supervisor, metrics, the admin
// API, the OpenAI-compatible gateway and the HTTP listener. The serve and
// demo commands and the end-to-end tests all build the process through it.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"gopkg.in/yaml.v3"
	"k8s.io/client-go/rest"

	"switchyard/recorder"
	"switchyard/router/admin"
	"switchyard/router/bus"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/coreconfig"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource"
	"switchyard/router/discoverysource/etcdsource/embedded"
	"switchyard/router/envelope"
	"switchyard/router/epp"
	"switchyard/router/eventplane"
	"switchyard/router/eventplane/replay"
	"switchyard/router/events"
	"switchyard/router/gateway"
	"switchyard/router/kv"
	"switchyard/router/kvsource"
	"switchyard/router/load"
	"switchyard/router/metrics"
	"switchyard/router/replicasync"
	"switchyard/router/replicasync/peerservice"
)

// Server is one running router process.
type Server struct {
	// blockSizeWarned remembers the (model, block size) pairs logged by
	// warnBlockSize; blockSizeWarnings counts them.
	blockSizeWarned   sync.Map
	blockSizeWarnings atomic.Int64
	// kvReplay runs the replays the core asks for, once the kv-events
	// subscriptions exist.
	kvReplay atomic.Pointer[kvReplays]

	log     *slog.Logger
	cfg     atomic.Pointer[config.Config]
	metrics *metrics.Set
	auth    admin.Auth
	// core is the routing core every input reaches, behind its one lock;
	// recording is its output port, attached or not.
	core *core.Shared
	// epp is the endpoint picker, nil unless epp.enabled.
	epp *eppHost
	// eventBus is the event bus listener's host; it runs a listener
	// while dynamo.event_bus.enabled.
	eventBus  *bus.Host
	recording bool
	// overlay is Options.Overlay.
	overlay func(*config.Config) error
	// kvStaleAfter is Options.kvStaleAfter (tests).
	kvStaleAfter time.Duration
	// peerSilentAfter is Options.peerSilentAfter (tests).
	peerSilentAfter time.Duration
	// replicaSyncTransport is the transport replicaSync runs on;
	// peerService follows epp.peer_service's EndpointSlices (nil when
	// unset).
	replicaSyncTransport string
	peerService          *peerservice.Watcher
	// replicaSync publishes this replica's requests to its peers and
	// follows theirs (epp.replica_sync); nil when off.
	replicaSync *replicasync.Sync
	discovery   *discoverysource.Supervisor
	loadSubs    *eventplane.Supervisor
	kvSubs      *eventplane.Supervisor
	kvListener  *eventplane.Listener // standalone mode's bound kv-events listener, nil without one
	// kvSources follows dynamo.kv.sources through the event bus (its
	// streams wait while the listener does not run); kvSourceNS are their namespaces, whose
	// kv-events publishers are not dialed.
	kvSources  *kvsource.Follower
	kvSourceNS atomic.Pointer[[]string]
	// bus opens relayed streams for dynamo.load.transport broker (the
	// event-bus host: while its listener does not run, broker
	// subscriptions stay pending). coverage is its debounced report.
	bus        eventplane.Bus
	coverage   *eventplane.CoverageReporter
	kvOn       atomic.Bool   // follow kv-events (KV-aware selection is on)
	kick       chan struct{} // wakes the follower after kvOn changed
	stopFollow context.CancelFunc
	followDone chan struct{}
	tickDone   chan struct{}
	etcd       *embedded.Embedded
	etcdTmpDir string
	gateway    *gateway.Gateway
	http       httpServer
	listener   net.Listener
	prompts    *prompts
	reloads    *prometheus.CounterVec // switchyard_config_reloads_total
	unserved   *unservedModels
	closeOnce  sync.Once
}

// Options are the optional parts of a process.
type Options struct {
	// Recorder, when set, records every input the routing core applies
	// (discovery, publishes, kv_metrics messages, picks, ended notices)
	// in the order it applied them, and each pinned request's outcome
	// (see record.go). The caller creates it before New and closes it
	// after Close; Close stops recording first, so nothing is lost.
	Recorder *recorder.Writer
	// Seed seeds the KV-aware picker's sampling (dynamo.kv.router_temperature
	// above 0). A recording stores it as its run's seed so that a replay
	// samples the same; 0 without a recorder draws one.
	Seed uint64
	// Overlay, when set, is applied to every configuration read from the
	// watched file before it is validated (`switchyard epp` lays the
	// environment's DYN_* variables over the file this way).
	Overlay func(*config.Config) error

	// Tests shorten the KV stale rule; zero values are core.KVStaleAfter
	// and tickEvery.
	kvStaleAfter, tickEvery time.Duration
	// peerSilentAfter replaces core.PeerSilentAfter (tests).
	peerSilentAfter time.Duration
	// lookupEnv replaces os.LookupEnv and kubeREST the Kubernetes
	// credentials for epp.peer_service (tests).
	lookupEnv func(string) (string, bool)
	kubeREST  *rest.Config
}

// New validates cfg and starts everything it asks for. The caller owns
// Close. A configuration with validation errors is refused.
func New(cfg *config.Config, log *slog.Logger) (*Server, error) {
	return NewWithOptions(cfg, log, Options{})
}

// NewWithOptions is New with optional parts.
func NewWithOptions(cfg *config.Config, log *slog.Logger, o Options) (*Server, error) {
	errs, warns := cfg.Validate()
	for _, w := range warns {
		log.Warn("config", "issue", w.String())
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %s", errs[0].String())
	}
	s := &Server{log: log, metrics: metrics.New(), kick: make(chan struct{}, 1), overlay: o.Overlay}
	seed := o.Seed
	if seed == 0 && o.Recorder == nil {
		seed = rand.Uint64()
	}
	s.cfg.Store(cfg)
	s.auth.SetToken(cfg.Admin.Token)
	s.reloads = newReloadCounter(s.metrics.Registry)
	s.unserved = newUnservedModels(s.metrics.Registry)

	if err := s.startEmbeddedEtcd(cfg); err != nil {
		return nil, err
	}
	var port core.Port
	if o.Recorder != nil {
		// From the empty start: the recording must see every input.
		port = o.Recorder
		s.recording = true
		s.metrics.Registry.MustRegister(recorderCollector{o.Recorder})
	}
	s.kvStaleAfter, s.peerSilentAfter = o.kvStaleAfter, o.peerSilentAfter
	start := s.coreSettings(cfg)
	hooks := core.Hooks{LoadResult: s.metrics.Load.Count, KVResult: s.metrics.KV.CountEvent, Selection: s.metrics.Selection.Count,
		KVSelection: s.metrics.KV.CountSelection, KVUnsupported: s.warnBlockSize, Discovery: s.metrics.Discovery.CountDiscovery,
		ActiveRefused: s.metrics.Selection.ActiveRefused.Inc, KVReplay: s.metrics.KV.CountReplay,
		KVReplayWanted: s.kvReplayWanted}
	if err := s.newReplicaSync(cfg, &hooks, o); err != nil {
		s.Close()
		return nil, err
	}
	c, err := core.New(core.Options{Picker: start.Picker, Seed: seed, MaxStaleness: start.MaxStaleness,
		KV: start.KV, Port: port, Log: log.With("component", "core"), KVStaleAfter: start.KVStaleAfter,
		PeerSilentAfter: start.PeerSilentAfter, KVReplay: start.KVReplay, Hooks: hooks})
	if err != nil {
		s.Close()
		return nil, err
	}
	s.core = core.NewShared(c, clock.Real{})
	if s.replicaSync != nil {
		s.replicaSync.Start(s.core)
	}
	if s.recording {
		// The recording starts with the settings, so a replay runs with
		// exactly these, whatever its configuration file says.
		_ = s.core.Configure(time.Now(), start)
	}
	s.prompts = newPrompts(s, cfg, log.With("component", "prompt"))
	s.discovery = discoverysource.New(s.core, clock.Real{}, log, &s.metrics.Discovery, nil)
	// The event-bus host runs whatever dynamo.event_bus.enabled says, so a
	// reload can start or stop the listener; it must exist before the
	// event plane, whose broker subscriptions and coverage reporter open
	// streams and count sessions through it.
	busMet := bus.NewMetrics()
	s.metrics.Registry.MustRegister(busMet.Collectors()...)
	s.eventBus = bus.StartHost(cfg.Dynamo.EventBus, log.With("component", "event_bus"), busMet)
	s.bus = s.eventBus
	if err := s.startEventPlane(cfg, o); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.startKVListener(cfg); err != nil {
		s.Close()
		return nil, err
	}
	s.discovery.Apply(s.effective(cfg))
	gwOpts := gateway.Options{
		Registry: s.core, Pinner: s.core, Prompter: s.prompts.service, Metrics: s.metrics.Gateway,
		Log: log.With("component", "gateway"), Clock: clock.Real{},
	}
	if s.recording {
		gwOpts.OnOutcome = s.outcome
	}
	s.gateway = gateway.New(cfg, gwOpts)
	if err := s.startEPP(cfg); err != nil {
		s.Close()
		return nil, err
	}
	s.startKVSources(cfg, seed)

	ln, err := net.Listen("tcp", cfg.Server.BindAddress)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("listen on server.bind_address %s: %w", cfg.Server.BindAddress, err)
	}
	s.listener = ln
	s.http = s.newHTTPServer(gateway.StripDynamoHeaders(s.routes()), cfg.Gateway)
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "error", err)
		}
	}()
	log.Info("switchyard serving", "addr", ln.Addr().String(), "dynamo", cfg.Dynamo.Enabled)
	return s, nil
}

// effective fills in what only the running process knows: the embedded
// etcd's actual endpoint.
func (s *Server) effective(cfg *config.Config) *config.Config {
	if s.etcd == nil || !cfg.Dynamo.Discovery.Etcd.Embedded.Enabled {
		return cfg
	}
	c := cfg.Clone()
	c.Dynamo.Discovery.Etcd.Endpoints = []string{s.etcd.Endpoint()}
	return c
}

// startEventPlane starts the event-plane subscriptions, kv_metrics and,
// while KV-aware selection is on, kv-events, both into the core, and
// follows the registry: each new generation reconciles the subscriptions.
// The core moves its own admission gates at each publish.
//
// Both families share the MaxSubscriptions budget: kv_metrics takes what
// it needs first (load signals matter to every picker), kv-events what is
// left. A ticker drives the core's time rules (the kv-events staleness
// rule) on the wall clock.
func (s *Server) startEventPlane(cfg *config.Config, o Options) error {
	policy, err := loadPolicy(cfg, s.bus)
	if err != nil {
		return err
	}
	clk := clock.Real{}
	s.loadSubs = eventplane.NewSupervisor(eventplane.Family{
		Topic: discovery.TopicLoad, Limits: envelope.LoadLimits, Sink: loadSink{s.core},
	}, policy, clk, s.log.With("component", "load"), s.metrics.Load.Count)
	s.metrics.Registry.MustRegister(&metrics.LoadCollector{
		Subscriptions: s.loadSubs.Subscriptions, Store: s.core.Store(), Now: time.Now})
	s.kvSubs = eventplane.NewSupervisor(eventplane.Family{
		Topic: discovery.TopicKVEvents, Limits: envelope.KVEventLimits, Sink: kvSink{s.core},
		// Standalone mode subscribes to vLLM engines' own publishers.
		AllTopics: cfg.Dynamo.Discovery.Source == config.SourceInferencePool,
	}, policy, clk, s.log.With("component", "kv"), s.metrics.KV.CountSubscription)
	s.metrics.Registry.MustRegister(&metrics.KVCollector{Subscriptions: s.kvSubs.Subscriptions, Size: s.core.Tracker().Size})
	family := replay.Dynamo
	if cfg.Dynamo.Discovery.Source == config.SourceInferencePool {
		family = replay.VLLM
	}
	s.kvReplay.Store(newKVReplays(s.core, s.kvSubs, family, policy.Dialer, s.metrics.KVReplay))
	s.coverage = eventplane.NewCoverageReporter(clk, s.bus, s.discovery.Namespaces, s.loadSubs, s.kvSubs)
	s.metrics.Registry.MustRegister(&metrics.BrokerCollector{Coverage: s.brokerCoverage})
	s.metrics.Registry.MustRegister(&metrics.BrokerSubscriptionsCollector{Brokers: s.brokerIDs,
		Families: []func() []eventplane.SubscriptionInfo{s.loadSubs.Subscriptions, s.kvSubs.Subscriptions},
		Names:    []string{discovery.TopicLoad, discovery.TopicKVEvents}})
	every := o.tickEvery
	if every <= 0 {
		every = tickEvery
	}
	s.kvOn.Store(kvActive(cfg))

	ctx, cancel := context.WithCancel(context.Background())
	s.stopFollow, s.followDone, s.tickDone = cancel, make(chan struct{}), make(chan struct{})
	reg := s.core.Registry()
	go func() {
		defer close(s.followDone)
		for {
			changed := reg.Changed()
			snap := reg.Snapshot()
			s.warnUnserved(snap)
			s.prompts.fleet.Warm()
			n := s.loadSubs.ReconcileWithin(snap, eventplane.MaxSubscriptions)
			if s.kvOn.Load() {
				s.kvSubs.ReconcileWithin(s.withoutSourceNamespaces(snap), eventplane.MaxSubscriptions-n)
			} else {
				s.kvSubs.Stop()
			}
			select {
			case <-changed:
			case <-s.kick:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		defer close(s.tickDone)
		covDone := make(chan struct{})
		go func() { defer close(covDone); s.coverage.Run(ctx, nil) }()
		defer func() { <-covDone }()
		for clock.Sleep(clk, every, ctx.Done()) {
			s.core.Tick(clk.Now())
		}
	}()
	return nil
}

// outcome records how a pinned request ended.
func (s *Server) outcome(o gateway.Outcome) {
	s.core.Outcome(core.Outcome{At: o.End, RequestID: o.RequestID, Status: o.Status, Error: o.Error,
		PromptTokens: int(min(o.PromptTokens, 1<<31-1)), OutputTokens: o.OutputTokens, TTFT: o.TTFT, E2E: o.E2E, ITL: o.ITL})
}

// maxBlockSizeWarnings bounds the (model, block size) pairs remembered
// for logging once: fleet-authored cards could name endlessly many.
const maxBlockSizeWarnings = 1024

// warnBlockSize logs, once per model and size, a block size prompts are
// not hashed for; the selections are counted unsupported.
func (s *Server) warnBlockSize(model string, blockSize int) {
	type key struct {
		model string
		size  int
	}
	k := key{model, blockSize}
	if _, seen := s.blockSizeWarned.Load(k); seen || s.blockSizeWarnings.Load() >= maxBlockSizeWarnings {
		return
	}
	if _, loaded := s.blockSizeWarned.LoadOrStore(k, struct{}{}); !loaded {
		s.blockSizeWarnings.Add(1)
		s.log.Warn("KV-aware selection cannot hash prompts for this block size (16..65536, at most two per request); those ranks score without prefix overlap",
			"model", model, "block_size", blockSize)
	}
}

// reloadCore hands the core the settings cfg asks for, as a recorded
// ConfigChanged input when they changed: turning KV-aware selection on or
// off swaps the picker (and starts or stops the kv-events subscriptions),
// new KV settings reach the next pick, a new max_staleness the load store.
func (s *Server) reloadCore(cfg *config.Config) {
	next := s.coreSettings(cfg)
	cur := s.core.Settings()
	if next.Picker == cur.Picker && next.MaxStaleness == cur.MaxStaleness && kvOptionsEqual(next.KV, cur.KV) {
		return
	}
	if err := s.core.Configure(time.Now(), next); err != nil {
		s.log.Error("routing settings not applied", "error", err) // not reached: both pickers are known
		return
	}
	if next.Picker != cur.Picker {
		s.kvOn.Store(kvActive(cfg))
		select {
		case s.kick <- struct{}{}:
		default:
		}
		s.log.Info("picker replaced", "picker", next.Picker)
	}
}

// coreSettings are the routing settings of cfg.
func (s *Server) coreSettings(cfg *config.Config) core.Settings {
	return core.Settings{Picker: PickerName(cfg), KV: coreconfig.KVOptions(cfg.Dynamo.KV),
		MaxStaleness: cfg.Dynamo.Load.MaxStaleness.Std(), KVStaleAfter: s.kvStaleAfter, PeerSilentAfter: s.peerSilentAfter,
		KVReplay: coreconfig.KVReplay(cfg.Dynamo.KV.Replay)}
}

// brokerCoverage is the broker transport's coverage report; nil under
// the direct transport.
func (s *Server) brokerCoverage() []eventplane.NamespaceCoverage {
	if s.coverage == nil || s.cfg.Load().Dynamo.Load.Transport != config.TransportBroker {
		return nil
	}
	return s.coverage.Coverage()
}

// brokerIDs are the configured brokers[].id of role broker while the
// event bus is enabled: the closed label set of
// switchyard_dynamo_broker_subscriptions.
func (s *Server) brokerIDs() []string {
	b := s.cfg.Load().Dynamo.EventBus
	if !b.Enabled {
		return nil
	}
	var ids []string
	for _, e := range b.Brokers {
		if e.Role == "" || e.Role == config.BusRoleBroker {
			ids = append(ids, e.ID)
		}
	}
	return ids
}

// kvReplayWanted is the core's request for missed kv-events (see
// kvReplays); before the subscriptions exist nothing can answer it.
func (s *Server) kvReplayWanted(w events.KVReplayWanted) {
	if r := s.kvReplay.Load(); r != nil {
		r.wanted(w)
		return
	}
	go s.core.KVReplayEnd(w.Namespace, w.PublisherID, "no replays yet", time.Now())
}

func loadPolicy(cfg *config.Config, bus eventplane.Bus) (eventplane.Policy, error) {
	allow, err := eventplane.ParseAllow(cfg.Dynamo.Load.DirectAllowCIDRs)
	if err != nil {
		return eventplane.Policy{}, fmt.Errorf("dynamo.load.direct_allow_cidrs: %w", err)
	}
	return eventplane.Policy{Transport: cfg.Dynamo.Load.Transport, Dialer: &eventplane.Dialer{Allow: allow}, Bus: bus}, nil
}

func (s *Server) startEmbeddedEtcd(cfg *config.Config) error {
	e := cfg.Dynamo.Discovery.Etcd.Embedded
	if !e.Enabled {
		return nil
	}
	dir := e.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "switchyard-etcd-")
		if err != nil {
			return err
		}
		s.etcdTmpDir, dir = tmp, filepath.Join(tmp, "data")
	}
	etcd, err := embedded.Start(embedded.Options{Dir: dir, ClientAddr: e.Listen})
	if err != nil {
		return fmt.Errorf("embedded etcd on %s: %w", e.Listen, err)
	}
	s.etcd = etcd
	s.log.Info("embedded etcd serving", "endpoint", etcd.Endpoint(), "data_dir", dir)
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	})
	mux.HandleFunc("GET /ready", s.serveReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	mux.Handle("/admin/", s.auth.Wrap(admin.Handler(dynamoStatus{s.discovery, s.loadSubs, s.kvSubs, s.replicaSyncStatus, s.brokerCoverage, s.kvSourcesStatus}, s.maskedConfig)))
	api := s.gateway.Handler()
	mux.Handle("/v1/", api)
	mux.Handle("/anthropic/", api)
	// Profiles for operators, behind the admin token like the admin API.
	mux.Handle("/debug/pprof/", s.auth.Wrap(http.HandlerFunc(pprof.Index)))
	mux.Handle("/debug/pprof/profile", s.auth.Wrap(http.HandlerFunc(pprof.Profile)))
	mux.Handle("/debug/pprof/trace", s.auth.Wrap(http.HandlerFunc(pprof.Trace)))
	return apiFirst{api: api, mux: mux}
}

// apiFirst hands a clean /v1/ path to the gateway without ServeMux's tree
// walk, the lookup every inference request would pay; the rest (unclean
// paths included, which ServeMux redirects) goes through the mux.
type apiFirst struct {
	api http.Handler
	mux *http.ServeMux
}

func (a apiFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p := r.URL.Path; strings.HasPrefix(p, "/v1/") && path.Clean(p) == p {
		a.api.ServeHTTP(w, r)
		return
	}
	a.mux.ServeHTTP(w, r)
}

// maskedConfig renders the live configuration with secrets masked, keyed
// by the YAML field names operators write.
func (s *Server) maskedConfig() any {
	b, err := s.cfg.Load().Masked().YAML()
	if err != nil {
		return map[string]string{"error": err.Error()}
	}
	var v map[string]any
	if err := yaml.Unmarshal(b, &v); err != nil {
		return map[string]string{"error": err.Error()}
	}
	return v
}

// Reload installs a new configuration. One with validation errors is
// rejected and the running configuration kept. Settings that need a restart
// (the listen address, the embedded etcd) are logged and left as they are.
func (s *Server) Reload(cfg *config.Config) error {
	errs, warns := cfg.Validate()
	if len(errs) > 0 {
		for _, e := range errs {
			s.log.Error("config reload rejected; keeping the running configuration", "issue", e.String())
		}
		return fmt.Errorf("invalid configuration: %s", errs[0].String())
	}
	for _, w := range warns {
		s.log.Warn("config", "issue", w.String())
	}
	old := s.cfg.Load()
	if cfg.Server.BindAddress != old.Server.BindAddress {
		s.log.Warn("server.bind_address changes take effect after a restart")
	}
	if cfg.Dynamo.Discovery.Etcd.Embedded != old.Dynamo.Discovery.Etcd.Embedded {
		s.log.Warn("dynamo.discovery.etcd.embedded changes take effect after a restart")
		c := cfg.Clone()
		c.Dynamo.Discovery.Etcd.Embedded = old.Dynamo.Discovery.Etcd.Embedded
		cfg = c
	}
	if cfg.Gateway.ReadTimeout != old.Gateway.ReadTimeout || cfg.Gateway.Server != old.Gateway.Server {
		s.log.Warn("gateway.read_timeout and gateway.server changes take effect after a restart")
	}
	if cfg.EPP.Enabled != old.EPP.Enabled || cfg.EPP.Listen != old.EPP.Listen || cfg.EPP.HealthListen != old.EPP.HealthListen || cfg.EPP.Plaintext != old.EPP.Plaintext ||
		cfg.EPP.CertFile != old.EPP.CertFile || cfg.EPP.KeyFile != old.EPP.KeyFile {
		s.log.Warn("epp.enabled, epp.listen and the endpoint picker's TLS settings take effect after a restart")
	}
	s.cfg.Store(cfg)
	s.auth.SetToken(cfg.Admin.Token)
	s.gateway.Reload(cfg)
	if s.epp != nil {
		s.epp.srv.Reload(epp.SettingsFrom(cfg))
	}
	if !reflect.DeepEqual(cfg.Dynamo.EventBus, old.Dynamo.EventBus) {
		// Starts, stops or rebinds the listener and applies its settings;
		// discovery, the registry and the subscriptions are not touched.
		s.eventBus.Reload(cfg.Dynamo.EventBus)
	}
	if !slices.Equal(kvSourcesOf(cfg), kvSourcesOf(old)) {
		s.reloadKVSources(cfg)
	}
	if cfg.Dynamo.Load.Transport != old.Dynamo.Load.Transport ||
		!slices.Equal(cfg.Dynamo.Load.DirectAllowCIDRs, old.Dynamo.Load.DirectAllowCIDRs) {
		policy, err := loadPolicy(cfg, s.bus)
		if err == nil {
			// Both families stop and restart together; discovery, the
			// load store and the KV index are untouched, and restarted
			// kv-events subscriptions keep their ranks' cursors.
			s.log.Info("event-plane subscriptions restarting under the new dial policy", "transport", policy.Transport)
			if r := s.kvReplay.Load(); r != nil {
				r.setDialer(policy.Dialer)
			}
			var wg sync.WaitGroup
			for _, sup := range []*eventplane.Supervisor{s.loadSubs, s.kvSubs} {
				wg.Add(1)
				go func() { defer wg.Done(); sup.SetPolicy(policy) }()
			}
			wg.Wait()
		}
	}
	if n, o := cfg.Dynamo.Discovery.InferencePool.KVEventsListen, old.Dynamo.Discovery.InferencePool.KVEventsListen; n != o {
		s.log.Warn("dynamo.discovery.inference_pool.kv_events_listen applies at the next start; the listener stays where it is",
			"listening", o, "configured", n)
	}
	s.reloadCore(cfg)
	s.prompts.reload(cfg, s.log)
	s.discovery.Apply(s.effective(cfg))
	s.log.Info("configuration reloaded")
	return nil
}

// Addr is the HTTP listen address.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Loads is the load store.
func (s *Server) Loads() *load.Store { return s.core.Store() }

// KV is the KV tracker (the index the KV-aware picker matches against).
func (s *Server) KV() *kv.Tracker { return s.core.Tracker() }

// Registry is the routing core's registry.
func (s *Server) Registry() *discovery.Registry { return s.core.Registry() }

// Discovery exposes the discovery supervisor (registry, status).
func (s *Server) Discovery() *discoverysource.Supervisor { return s.discovery }

// EtcdEndpoint is the embedded etcd's client URL, or "" without one.
func (s *Server) EtcdEndpoint() string {
	if s.etcd == nil {
		return ""
	}
	return s.etcd.Endpoint()
}

// Close stops serving, then discovery, then recording (Options.Recorder
// may be closed once Close returns), then the embedded etcd. Requests
// in flight, streams included, get gateway.shutdown_grace to finish; the
// connections still open after it are closed, which cancels their
// upstream requests.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		if s.http != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Load().Gateway.ShutdownGrace.Std())
			if err := s.http.Shutdown(ctx); err != nil {
				s.log.Warn("shutdown grace expired; closing the remaining connections", "error", err)
				_ = s.http.Close()
			}
			cancel()
		}
		if s.gateway != nil {
			s.gateway.Close()
		}
		if s.epp != nil {
			s.epp.close()
		}
		if s.kvSources != nil {
			s.kvSources.Stop()
		}
		if s.eventBus != nil {
			s.eventBus.Close()
		}
		if s.discovery != nil {
			s.discovery.Stop()
		}
		if s.peerService != nil {
			s.peerService.Close()
		}
		if s.replicaSync != nil {
			s.replicaSync.Close()
		}
		if s.stopFollow != nil {
			s.stopFollow()
			<-s.followDone
			<-s.tickDone
			if r := s.kvReplay.Load(); r != nil {
				r.close()
			}
			s.loadSubs.Stop()
			s.kvSubs.Stop()
		}
		if s.kvListener != nil {
			_ = s.kvListener.Close()
		}
		if s.prompts != nil {
			s.prompts.service.Close()
			s.prompts.fleet.Close()
		}
		if s.core != nil {
			// Inputs still arriving are applied but no longer recorded,
			// so closing the recorder afterwards loses nothing it was
			// given.
			s.core.SetPort(nil)
		}
		if s.etcd != nil {
			s.etcd.Close()
		}
		if s.etcdTmpDir != "" {
			_ = os.RemoveAll(s.etcdTmpDir)
		}
	})
}

// dynamoStatus is what the admin API reads: discovery plus subscriptions,
// kv_metrics ones first, then kv-events ones.
type dynamoStatus struct {
	*discoverysource.Supervisor
	load, kv *eventplane.Supervisor
	replica  func() *admin.ReplicaSyncJSON
	coverage func() []eventplane.NamespaceCoverage
	sources  func() []admin.KVSourceJSON
}

func (d dynamoStatus) KVSources() []admin.KVSourceJSON { return d.sources() }

func (d dynamoStatus) BrokerCoverage() []eventplane.NamespaceCoverage { return d.coverage() }

func (d dynamoStatus) ReplicaSync() *admin.ReplicaSyncJSON { return d.replica() }

func (d dynamoStatus) Subscriptions() []eventplane.SubscriptionInfo {
	return append(d.load.Subscriptions(), d.kv.Subscriptions()...)
}
