package epp

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/metrics"
	"switchyard/router/picker"
)

// Picker chooses the workers of a request and is told when it ended:
// Finished when it was served to its end, Ended otherwise (core.Shared).
type Picker interface {
	Pick(req picker.Request) (picker.Selection, bool)
	Ended(req picker.Request, sel picker.Selection)
	Finished(req picker.Request, sel picker.Selection)
}

// RankingPicker also returns the candidates it weighed for the pick, with
// their costs (core.Shared), from which fallback endpoints are drawn.
type RankingPicker interface {
	Picker
	PickRanked(req picker.Request, dst []picker.Candidate) (picker.Selection, []picker.Candidate, bool)
}

// Workers is the discovered fleet.
type Workers interface {
	Snapshot() *discovery.Snapshot
}

// Prompter renders and tokenizes a request body for the KV-aware picker
// (router/prompt.Service): chat is a chat completions body, otherwise a
// completions body. It returns the token ids, or nil and why.
type Prompter interface {
	Tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string)
}

// Settings are what a configuration reload may change.
type Settings struct {
	// Namespaces are the Dynamo namespaces whose workers are candidates.
	Namespaces []string
	// ModelName, when set, is the model every request is routed for.
	ModelName string
	// TargetPort is the worker frontend sidecars' port.
	TargetPort int
	// Buffered is assumed when the gateway does not announce its request
	// body mode; false means FULL_DUPLEX_STREAMED.
	Buffered bool
	// MaxBodyBytes caps a request body; larger ones get 413.
	MaxBodyBytes int
	// MaxInFlight caps the routed requests not yet ended; past it a
	// request is shed with 429 (gateway.max_in_flight).
	MaxInFlight int
	// Render tokenizes prompts for KV overlap (dynamo.kv.enabled);
	// SendTokenData also puts the ids in the body as nvext.token_data
	// (dynamo.kv.send_token_data).
	Render, SendTokenData bool
	// BlockSize, when set, is the block size workers must advertise: a
	// pick of a worker whose card says otherwise is counted and logged
	// (its overlaps were scored on other blocks than the operator meant).
	BlockSize int
	// Standalone addresses each worker at the port its record names (the
	// InferencePool's target port) rather than TargetPort.
	Standalone bool
	// Fallbacks is how many next-best endpoints follow the pick in the
	// destination list (epp.fallback_endpoints).
	Fallbacks int
}

// SettingsFrom reads the endpoint picker's settings from a configuration.
func SettingsFrom(c *config.Config) Settings {
	return Settings{
		Namespaces:    c.Dynamo.Discovery.Namespaces(),
		ModelName:     c.EPP.ModelName,
		TargetPort:    c.EPP.TargetPort,
		Buffered:      c.EPP.RequestBodyMode == config.BodyModeBuffered,
		MaxBodyBytes:  int(c.Gateway.MaxBodyBytes),
		MaxInFlight:   c.Gateway.MaxInFlight,
		Render:        c.Dynamo.KV.Enabled,
		SendTokenData: c.Dynamo.KV.Enabled && c.Dynamo.KV.SendTokenData,
		BlockSize:     c.EPP.KVCacheBlockSize,
		Standalone:    c.EPP.Mode == config.EPPModeStandalone,
		Fallbacks:     c.EPP.FallbackEndpoints,
	}
}

// Outcome is how a routed request ended, as the gateway reported it.
type Outcome = core.Outcome

// Options are the server's collaborators. Prompter and OnOutcome may be nil.
type Options struct {
	Picker    Picker
	Workers   Workers
	Prompter  Prompter
	Clock     clock.Clock
	Log       *slog.Logger
	Metrics   metrics.EPP
	OnOutcome func(Outcome)
}

// requestIDBase sets the endpoint picker's request ids apart from the
// shim gateway's, which share the core's dispatch accounting when both
// run in one process.
const requestIDBase = 1 << 62

// Server is the ext_proc service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts     Options
	settings atomic.Pointer[Settings]
	ids      atomic.Uint64
	// inFlight counts routed requests not yet ended.
	inFlight atomic.Int64
	// mismatchLogged: a block-size mismatch is logged once per process.
	mismatchLogged atomic.Bool
}

// New makes a server routing with s.
func New(s Settings, o Options) *Server {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	srv := &Server{opts: o}
	srv.settings.Store(&s)
	return srv
}

// Reload applies new settings to the requests that start from now on.
func (s *Server) Reload(st Settings) { s.settings.Store(&st) }

// Process serves one request's ext_proc stream.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	s.opts.Metrics.Streams.Inc()
	defer s.opts.Metrics.Streams.Dec()
	x := &exchange{s: s, st: *s.settings.Load(), stream: stream, ctx: stream.Context()}
	x.buffered = x.st.Buffered
	err := x.run()
	x.finish(x.s.opts.Clock.Now())
	return err
}

func (s *Server) nextID() uint64 { return requestIDBase + s.ids.Add(1) }

// since is the time from t to now on the server's clock.
func (s *Server) since(t time.Time) time.Duration { return s.opts.Clock.Now().Sub(t) }
