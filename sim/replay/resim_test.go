package replay

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"switchyard/fakefleet/registrar"
	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/core"
	"switchyard/router/coreconfig"
	"switchyard/router/events"
	"switchyard/router/picker"
)

// A live run re-simulated routes with the live router's KV and tracking
// settings, read from its recorded configuration, not the simulator's
// defaults: otherwise the simulated picks differ from the live ones for
// reasons that have nothing to do with the fleet.
func TestResimulationKeepsTheLiveRoutersSettings(t *testing.T) {
	cfgYAML := `
dynamo:
  enabled: true
  kv: {enabled: true, prefill_load_scale: 4, track_output_blocks: true, overlap_score_credit_decay: 2}
`
	cfg, err := config.Parse([]byte(cfgYAML), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	want := coreconfig.KVOptions(cfg.Dynamo.KV)
	if !want.Track.PrefillTokens || !want.Track.OutputBlocks || want.PrefillLoadScale != 4 {
		t.Fatalf("the configuration's options: %+v", want)
	}
	path := filepath.Join(t.TempDir(), "live.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Config: cfgYAML, Picker: picker.NameKV, Start: time.Now()},
		recorder.Options{Block: true})
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.New(core.Options{Picker: picker.NameKV, KV: want, Port: w})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recs := registrar.Records(registrar.Worker{Namespace: "ns", Component: "backend", WorkerType: "aggregated", Model: "m",
		BlockSize: 16, TotalKVBlocks: 1000, MaxNumBatchedTokens: 4096, MaxNumSeqs: 64, ContextLength: 8192, Transport: "10.0.0.1:9000/x"}, 0x21)
	var batch []events.Event
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		ks := events.Models
		if strings.HasPrefix(k, "v1/instances/") {
			ks = events.Instances
		}
		batch = append(batch, events.DiscoveryPut{At: at, Namespace: "ns", DiscoveryRecord: events.DiscoveryRecord{Keyspace: ks, Key: k, Value: recs[k]}})
	}
	c.Discovery(batch)
	if _, ok := c.Pick(core.Arrival{Req: picker.Request{ID: 1, Model: "m", Namespaces: []string{"ns"}, PromptTokens: 64, Now: at}}); !ok {
		t.Fatal("no pick")
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rd := open(t, path)
	res, err := PrepareResimulation(rd, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Scenario.Router.KV.Options(); !optionsEqual(got, want) {
		t.Fatalf("re-simulation options\n got %+v\nwant %+v", got, want)
	}
}

func optionsEqual(a, b picker.KVOptions) bool {
	if (a.DecodeBusyThreshold == nil) != (b.DecodeBusyThreshold == nil) {
		return false
	}
	a.DecodeBusyThreshold, b.DecodeBusyThreshold = nil, nil
	return a == b
}
