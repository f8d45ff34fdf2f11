package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/fixtures"
	"switchyard/router/config"
	"switchyard/router/server"
)

const shipped = "../../deploy/config/"

// setShippedSecrets sets the variables the shipped files reference, to
// values long enough to draw no warning.
func setShippedSecrets(t *testing.T) {
	t.Setenv("SWITCHYARD_ADMIN_TOKEN", "admin-token-0123456789abcdef")
	t.Setenv("SWITCHYARD_API_KEY", "client-key-0123456789abcdef")
}

// Every shipped file, router or fleet, validates with no warning at all
// once its secrets are provided.
func TestShippedConfigsValidateClean(t *testing.T) {
	files, err := filepath.Glob(shipped + "*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 3)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			setShippedSecrets(t)
			root := newRootCmd()
			var out strings.Builder
			root.SetOut(&out)
			root.SetErr(&out)
			root.SetArgs([]string{"config", "validate", f})
			require.NoError(t, root.Execute(), out.String())
			assert.Regexp(t, `^(fleet )?config OK \(0 warnings\)\n$`, out.String())
		})
	}
}

// No shipped file carries a usable admin token of its own: without
// SWITCHYARD_ADMIN_TOKEN the admin API is off or the file is refused.
func TestShippedConfigsHaveNoDefaultAdminToken(t *testing.T) {
	t.Setenv("SWITCHYARD_ADMIN_TOKEN", "")
	t.Setenv("SWITCHYARD_API_KEY", "client-key-0123456789abcdef")
	for _, name := range []string{"embedded.yaml", "etcd.yaml"} {
		c, err := config.Load(shipped + name)
		if err != nil {
			continue // a required ${SWITCHYARD_ADMIN_TOKEN}: refused, fine
		}
		assert.Empty(t, c.Admin.Token, "%s must not fall back to a known token", name)
	}
}

// loadShippedPair loads embedded.yaml and fleet.yaml as shipped, checks
// they name each other (the router watches the fleet's etcd and
// namespace, and pins through a shim backend at the fleet's frontend),
// and moves every listener to a free
// loopback port so the test cannot collide with anything.
func loadShippedPair(t *testing.T) (*config.Config, *fleetFile) {
	t.Helper()
	setShippedSecrets(t)
	cfg, err := config.Load(shipped + "embedded.yaml")
	require.NoError(t, err)
	ff, err := loadFleetFile(shipped + "fleet.yaml")
	require.NoError(t, err)

	i := slices.IndexFunc(cfg.Backends, func(b config.Backend) bool {
		return b.URL == "http://"+ff.Frontend && slices.Contains(cfg.Dynamo.Shim.Backends, b.Name)
	})
	require.GreaterOrEqual(t, i, 0, "embedded.yaml needs a shim backend at the fleet's frontend %s", ff.Frontend)
	assert.True(t, cfg.Dynamo.Enabled && cfg.DisaggregatedServing.Enabled, "requests are pinned only with both on")
	assert.Equal(t, []string{ff.Namespace}, cfg.Dynamo.Discovery.Namespaces())
	assert.Equal(t, ff.Etcd.Endpoints, cfg.Dynamo.Discovery.Etcd.EffectiveEndpoints())

	ff.Frontend = freeAddr(t)
	cfg.Backends[i].URL = "http://" + ff.Frontend
	cfg.Server.BindAddress = "127.0.0.1:0"
	cfg.Dynamo.Discovery.Etcd.Embedded.Listen = "127.0.0.1:0"
	return cfg, ff
}

// The README's serve + fleet path: the router of embedded.yaml, the fleet
// of fleet.yaml, and a chat completion served through the fleet's
// frontend emulation.
func TestShippedServeAndFleetServeChat(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an embedded etcd and a fleet")
	}
	cfg, ff := loadShippedPair(t)
	log := slog.New(slog.DiscardHandler)
	srv, err := server.New(cfg, log)
	require.NoError(t, err)
	defer srv.Close()
	ff.Etcd.Endpoints = []string{srv.EtcdEndpoint()}
	rf, err := startFleet(t.Context(), ff, log)
	require.NoError(t, err)
	defer rf.Close()

	base := "http://" + srv.Addr()
	waitFor(t, 30*time.Second, "the fleet's model in /v1/models", func() bool {
		resp, err := http.Get(base + "/v1/models")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var list struct {
			Data []struct{ ID string } `json:"data"`
		}
		return json.NewDecoder(resp.Body).Decode(&list) == nil &&
			slices.ContainsFunc(list.Data, func(m struct{ ID string }) bool { return m.ID == ff.Model })
	})
	// Until the first load signals arrive the model is known but not yet
	// pickable: 503, never a 404 or an unpinned request to the frontend.
	body := `{"model": "` + ff.Model + `", "max_tokens": 4, "messages": [{"role": "user", "content": "Hello!"}]}`
	var got []byte
	waitFor(t, 30*time.Second, "a served chat completion", func() bool {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		got, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(got))
		}
		return resp.StatusCode == http.StatusOK
	})
	var chat struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	require.NoError(t, json.Unmarshal(got, &chat))
	require.Len(t, chat.Choices, 1)
	assert.NotEmpty(t, chat.Choices[0].Message.Content)

	// KV-aware selection tokenizes chats with the fleet's built-in
	// tokenizer, which embedded.yaml pins (the artifacts load in the
	// background after discovery).
	waitFor(t, 30*time.Second, "a chat rendered and tokenized with the fleet's tokenizer", func() bool {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return scrape(t, base, `switchyard_dynamo_kv_prompts_total{result="ok"}`) > 0
	})
}

// scrape reads one series from a router's /metrics (0 when absent).
func scrape(t *testing.T, base, series string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	return 0
}

// embedded.yaml pins exactly the artifacts fleet.yaml's cards name: the
// built-in test tokenizer's files (retraining it changes them).
func TestShippedRouterPinsTheShippedFleetsTokenizer(t *testing.T) {
	cfg, ff := loadShippedPair(t)
	require.True(t, cfg.Dynamo.KV.Enabled)
	require.Equal(t, builtinTokenizerPrefix+fixtures.TestTokenizer, ff.Tokenizer)
	require.Equal(t, []string{fixtureChecksum(t, fixtures.TokenizerJSON), fixtureChecksum(t, fixtures.TokenizerConfig)},
		cfg.Dynamo.KV.PinnedArtifacts)
}
