package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"switchyard/fakefleet/fleet"
	"switchyard/fixtures"
	"switchyard/internal/extproctest"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/epp"
	"switchyard/router/load"
	"switchyard/router/prompt/artifacts"
	"switchyard/sim/replay"
)

// withEPP turns on the endpoint picker (plaintext, a free port) with the
// fleet's frontend emulation as every worker's frontend sidecar: the fake
// workers advertise 127.0.0.1, so the destination is the emulation.
func withEPP(cfg *config.Config) {
	u, _ := url.Parse(cfg.Backends[0].URL)
	port, _ := strconv.Atoi(u.Port())
	cfg.EPP.Enabled, cfg.EPP.Listen, cfg.EPP.Plaintext, cfg.EPP.TargetPort = true, "127.0.0.1:0", true, port
}

// builtinArtifacts writes the project's test tokenizer for the fleet's
// cards and returns the checksums a router pins to load it.
func builtinArtifacts(t *testing.T) (*fleet.Artifacts, []string) {
	t.Helper()
	dir := t.TempDir()
	a := &fleet.Artifacts{}
	var pins []string
	for name, path := range map[string]*string{fixtures.TokenizerJSON: &a.TokenizerPath, fixtures.TokenizerConfig: &a.ConfigPath} {
		data, err := fixtures.TokenizerFile(fixtures.TestTokenizer, name)
		require.NoError(t, err)
		*path = filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(*path, data, 0o600))
		pins = append(pins, string(artifacts.Sum(data)))
	}
	return a, pins
}

func eppClient(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

// standIn serves a gateway stand-in routing through the endpoint picker.
func standIn(t *testing.T, conn *grpc.ClientConn, g extproctest.Gateway) string {
	t.Helper()
	g.Picker = extprocv3.NewExternalProcessorClient(conn)
	hs := httptest.NewServer(&g)
	t.Cleanup(hs.Close)
	return hs.URL
}

// The endpoint picker live: a gateway stand-in asks it over ext_proc where
// each OpenAI request goes, on the same core the shim gateway uses (a fake
// engine fleet with real leases, load and KV events, its tokenizer
// pinned). Buffered and streamed chat completions are served through the
// workers it pins, bodies streamed in small chunks or buffered; a client's
// own pin header never reaches the worker; the prompt is rendered and sent
// as nvext.token_data; repeated prompts land where their blocks are. The
// run is recorded, every endpoint-picker decision included, and replays
// exactly.
func TestEPPRoutesAGatewaysRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), "epp.db")
	var w *recorder.Writer
	k := startKVStack(t, fleet.Spec{Prefill: 1, Decode: 2}, func(cfg *config.Config) Options {
		withEPP(cfg)
		w = createRecording(t, path, cfg, 11)
		return Options{Recorder: w, Seed: 11}
	})
	srv := k.srv
	conn := eppClient(t, srv.EPPAddr(), insecure.NewCredentials())

	for _, g := range []extproctest.Gateway{{ChunkSize: 7}, {Buffered: true, Announce: true}, {Announce: true}} {
		base := standIn(t, conn, g)
		client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
			option.WithHeader("x-dynamo-worker-instance-id", "1"))
		for i := range 3 {
			params := openai.ChatCompletionNewParams{Model: kvModel, MaxTokens: openai.Int(4),
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("epp request %d: %s", i, longPrompt(i)))}}
			resp, err := client.Chat.Completions.New(context.Background(), params)
			require.NoError(t, err, "gateway %+v", g)
			require.NotEmpty(t, resp.Choices)
			stream := client.Chat.Completions.NewStreaming(context.Background(), params)
			chunks := 0
			for stream.Next() {
				chunks++
			}
			require.NoError(t, stream.Err())
			require.Positive(t, chunks)
		}
	}
	require.Equal(t, float64(18), metricValue(t, srv, `switchyard_epp_decisions_total{result="routed"}`))
	// A stream closes just after its client has the answer.
	eventually(t, "every ext_proc stream closed", func() bool { return metricValue(t, srv, "switchyard_epp_streams") == 0 })

	k.stop()
	_, err := w.Close()
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := replay.Run(rd, 0, "")
	require.NoError(t, err)
	require.Equal(t, 18, rep.Selections)
	require.True(t, rep.Exact(), "divergences: %+v", rep.Divergences)
	runs, err := rd.Runs()
	require.NoError(t, err)
	outs, err := rd.Outcomes(runs[0].ID)
	require.NoError(t, err)
	require.Len(t, outs, 18)
	for _, o := range outs {
		require.Equal(t, "ok", o.Status, "%+v", o)
	}
}

// With the fleet's tokenizer pinned, the endpoint picker renders each chat
// and sends its ids to the worker's frontend as nvext.token_data; a
// repeated prompt goes to the worker holding its blocks.
func TestEPPSendsTokenData(t *testing.T) {
	arts, pins := builtinArtifacts(t)
	var mu sync.Mutex
	var seen []captured
	k := startKVStack(t, fleet.Spec{Aggregated: 3, Artifacts: arts}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfg.Dynamo.KV.PinnedArtifacts = pins
		cfg.Dynamo.KV.SendTokenData = true
		cfg.EPP.KVCacheBlockSize = 64 // the cards say 16: every pick counts a mismatch
		// Workers publish load on change only: a quiet worker's sample
		// must not go stale while the test waits between requests.
		cfg.Dynamo.Load.MaxStaleness = config.Duration(time.Minute)
		// A capturing proxy stands in front of the frontend emulation as
		// the workers' sidecar port.
		frontend, _ := url.Parse(cfg.Backends[0].URL)
		rp := httputil.NewSingleHostReverseProxy(frontend)
		hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			seen = append(seen, captured{body: string(b), worker: r.Header.Get(epp.HeaderWorkerID), mode: r.Header.Get(epp.HeaderRoutingMode)})
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(hs.Close)
		u, _ := url.Parse(hs.URL)
		cfg.EPP.TargetPort, _ = strconv.Atoi(u.Port())
		return Options{}
	})
	srv := k.srv
	base := standIn(t, eppClient(t, srv.EPPAddr(), insecure.NewCredentials()), extproctest.Gateway{})
	client := openai.NewClient(option.WithBaseURL(base+"/v1"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ask := func(text string) {
		_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: kvModel, MaxTokens: openai.Int(2),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}})
		require.NoError(t, err)
	}
	// The artifacts load in the background once the cards name them.
	eventually(t, "a prompt rendered with the fleet's tokenizer", func() bool {
		ask("warm up")
		return metricValue(t, srv, `switchyard_dynamo_kv_prompts_total{result="ok"}`) > 0
	})
	mu.Lock()
	seen = nil
	mu.Unlock()
	prompt := "a long shared prefix " + longPrompt(3)
	before := blocksByWorker(srv.KV())
	ask(prompt)
	mu.Lock()
	first, _ := strconv.ParseUint(seen[0].worker, 10, 64)
	mu.Unlock()
	eventually(t, "the prompt's blocks in the index", func() bool { return blocksByWorker(srv.KV())[first] > before[first] })
	// Each repeat is sent once every worker reports itself idle again, so
	// only the cached blocks tell the workers apart.
	idle := func() bool {
		for _, w := range srv.Registry().Snapshot().Workers {
			if srv.Loads().StatusOf(load.Key{Namespace: w.Namespace, WorkerID: w.InstanceID}, load.Decode, time.Now()).Backlog != 0 {
				return false
			}
		}
		return true
	}
	for range 3 {
		eventually(t, "idle workers", idle)
		ask(prompt)
	}
	// A repeat hits the cache and may start and finish between two of its
	// worker's change-driven load samples, so no sample answers for it:
	// only its reported end takes it out of the worker's backlog. Were it
	// still counted, the next repeat would score the worker busy and go
	// elsewhere despite the overlap.
	eventually(t, "answered requests out of every backlog", func() bool {
		for _, w := range srv.Registry().Snapshot().Workers {
			tokens, blocks := srv.Loads().Unanswered(load.Key{Namespace: w.Namespace, WorkerID: w.InstanceID}, time.Now())
			if tokens+blocks != 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 4)
	for _, c := range seen {
		require.Contains(t, c.body, `"token_data":[`)
		require.Equal(t, "aggregated", c.mode)
	}
	// Every repeat goes where the prompt's blocks are.
	for i, c := range seen[1:] {
		require.Equal(t, seen[0].worker, c.worker, "repeat %d goes where the prompt's blocks are", i+1)
	}
	require.Positive(t, metricValue(t, srv, "switchyard_epp_block_size_mismatch_total"))
}

type captured struct{ body, worker, mode string }

// Nothing eligible is an immediate 503, a body past the cap a 413, a
// subset hint excluding every worker a 503; none reaches a worker.
func TestEPPImmediateResponses(t *testing.T) {
	k := startKVStack(t, fleet.Spec{Aggregated: 1}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfg.Gateway.MaxBodyBytes = 4096
		return Options{}
	})
	srv := k.srv
	conn := eppClient(t, srv.EPPAddr(), insecure.NewCredentials())
	post := func(g extproctest.Gateway, body string) (int, string) {
		resp, err := http.Post(standIn(t, conn, g)+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	chat := func(model, text string) string {
		return fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":%q}]}`, model, text)
	}
	code, body := post(extproctest.Gateway{}, chat("no-such-model", "hi"))
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "no_eligible_endpoint")
	code, body = post(extproctest.Gateway{ChunkSize: 1000}, chat(kvModel, strings.Repeat("x", 5000)))
	require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
	code, body = post(extproctest.Gateway{Subset: []string{"192.0.2.9:8000"}}, chat(kvModel, "hi"))
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	code, body = post(extproctest.Gateway{}, `{"model":`)
	require.Equal(t, http.StatusBadRequest, code, body)
	code, body = post(extproctest.Gateway{}, chat(kvModel, "hi"))
	require.Equal(t, http.StatusOK, code, body)
	for result, n := range map[string]float64{"unavailable": 1, "too_large": 1, "out_of_subset": 1, "bad_request": 1, "routed": 1} {
		require.Equal(t, n, metricValue(t, srv, `switchyard_epp_decisions_total{result="`+result+`"}`), result)
	}
}

// By default the endpoint picker serves TLS with a self-signed
// certificate and reports readiness once discovery is connected; the
// health service is also served alone in plaintext on epp.health_listen,
// for Kubernetes gRPC probes.
func TestEPPServesTLSAndHealth(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	healthAddr := l.Addr().String()
	require.NoError(t, l.Close())
	k := startKVStack(t, fleet.Spec{Aggregated: 1}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfg.EPP.Plaintext = false
		cfg.EPP.HealthListen = healthAddr
		return Options{}
	})
	probe := healthpb.NewHealthClient(eppClient(t, healthAddr, insecure.NewCredentials()))
	eventually(t, "plaintext readiness", func() bool {
		r, err := probe.Check(context.Background(), &healthpb.HealthCheckRequest{Service: epp.HealthReadiness})
		return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
	})
	conn := eppClient(t, k.srv.EPPAddr(), credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))
	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{epp.HealthLiveness, epp.HealthReadiness, epp.HealthService} {
		eventually(t, "health "+svc, func() bool {
			r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			return err == nil && r.Status == healthpb.HealthCheckResponse_SERVING
		})
	}
	plain := eppClient(t, k.srv.EPPAddr(), insecure.NewCredentials())
	_, err = healthpb.NewHealthClient(plain).Check(context.Background(), &healthpb.HealthCheckRequest{Service: epp.HealthLiveness})
	require.Error(t, err, "a plaintext client cannot talk to the TLS listener")
}

// Past gateway.max_in_flight routed requests, the endpoint picker sheds
// with an immediate 429; once the request in flight ends, requests route
// again.
func TestEPPShedsPastMaxInFlight(t *testing.T) {
	k := startKVStack(t, fleet.Spec{Aggregated: 1}, func(cfg *config.Config) Options {
		withEPP(cfg)
		cfg.Gateway.MaxInFlight = 1
		return Options{}
	})
	srv := k.srv
	base := standIn(t, eppClient(t, srv.EPPAddr(), insecure.NewCredentials()), extproctest.Gateway{})
	chat := fmt.Sprintf(`{"model":%q,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, kvModel)
	post := func() (int, string) {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(chat))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	worker := k.fl.Members()[0].ID()
	require.NoError(t, k.fl.Stall(worker, true))
	held := make(chan int, 1)
	go func() { code, _ := post(); held <- code }()
	eventually(t, "the held request in flight", func() bool {
		return metricValue(t, srv, `switchyard_epp_decisions_total{result="routed"}`) == 1
	})
	code, body := post()
	require.Equal(t, http.StatusTooManyRequests, code, body)
	require.Contains(t, body, "overloaded")
	require.NoError(t, k.fl.Stall(worker, false))
	require.Equal(t, http.StatusOK, <-held)
	code, body = post()
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, float64(1), metricValue(t, srv, `switchyard_epp_decisions_total{result="shed"}`))
}
