package reports

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard/sim/stats"
)

func readFile(t *testing.T, dir, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A hand-made summary so every value in summary.json can be checked exactly.
func handSummary() stats.Summary {
	return stats.Summary{
		DurationS: 10, Requests: 4, Completed: 3, Failed: 1, Good: 2,
		Statuses:         map[string]int{"rejected": 1},
		TTFT:             stats.Percentiles{P50: 12.5, P90: 40, P99: 41.25, Mean: 20},
		ITL:              stats.Percentiles{P50: 1, P90: 2, P99: 3, Mean: 1.5},
		E2E:              stats.Percentiles{P50: 100, P90: 200, P99: 300, Mean: 150},
		ThroughputRPS:    0.3,
		OutputTokensPerS: 30,
		GoodputRPS:       0.2,
		GoodputRatio:     0.5,
		PromptTokens:     400,
		CachedTokens:     100,
		HitRatio:         0.25,
		HitRatioBound:    1.0 / 3,
		Imbalance:        1.5,
		Reasons:          map[string]int{"load": 3, "round_robin": 1},
	}
}

func TestSummaryJSONSchema(t *testing.T) {
	c := Comparison{Title: "t", Trace: "mooncake", Fleet: "4 decode", Seed: 1 << 60, Generated: "v1",
		SLO:     stats.SLO{TTFT: 2 * time.Second, ITL: 50 * time.Millisecond},
		Pickers: []Run{{Name: "load", Summary: handSummary()}, {Name: "empty"}}}
	dir := filepath.Join(t.TempDir(), "a", "b")
	if err := Write(dir, c); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(readFile(t, dir, "summary.json"), &got); err != nil {
		t.Fatal(err)
	}
	if got["schema_version"] != 1.0 || got["trace"] != "mooncake" || got["fleet"] != "4 decode" || got["generated"] != "v1" {
		t.Errorf("top level: %v", got)
	}
	slo := got["slo"].(map[string]any)
	if slo["ttft_ms"] != 2000.0 || slo["itl_ms"] != 50.0 {
		t.Errorf("slo %v", slo)
	}
	if order := got["picker_order"].([]any); len(order) != 2 || order[0] != "load" || order[1] != "empty" {
		t.Errorf("picker_order %v", order)
	}
	p := got["pickers"].(map[string]any)["load"].(map[string]any)
	want := map[string]float64{
		"requests": 4, "completed": 3, "failed": 1, "good": 2, "duration_s": 10,
		"throughput_rps": 0.3, "output_tokens_per_s": 30, "goodput_rps": 0.2, "goodput_ratio": 0.5,
		"prompt_tokens": 400, "cached_tokens": 100,
		"hit_ratio": 0.25, "hit_ratio_bound": 0.333333, "imbalance": 1.5,
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %v, want %v", k, p[k], v)
		}
	}
	for metric, vals := range map[string][4]float64{"ttft_ms": {12.5, 40, 41.25, 20}, "itl_ms": {1, 2, 3, 1.5}, "e2e_ms": {100, 200, 300, 150}} {
		m := p[metric].(map[string]any)
		for i, k := range []string{"p50", "p90", "p99", "mean"} {
			if m[k] != vals[i] {
				t.Errorf("%s.%s = %v, want %v", metric, k, m[k], vals[i])
			}
		}
	}
	if r := p["reasons"].(map[string]any); r["load"] != 3.0 || r["round_robin"] != 1.0 {
		t.Errorf("reasons %v", r)
	}
	if s := p["statuses"].(map[string]any); s["rejected"] != 1.0 {
		t.Errorf("statuses %v", s)
	}
	// An empty run still has every key, with zeros and empty objects (never null).
	e := got["pickers"].(map[string]any)["empty"].(map[string]any)
	if len(e) != len(p) {
		t.Errorf("empty run has %d keys, full run %d", len(e), len(p))
	}
	for k, v := range e {
		if v == nil {
			t.Errorf("empty run: %s is null", k)
		}
	}
	// The seed survives exactly (as a JSON number, decoded without float rounding).
	var seed struct{ Seed uint64 }
	if err := json.Unmarshal(readFile(t, dir, "summary.json"), &seed); err != nil || seed.Seed != 1<<60 {
		t.Errorf("seed %d %v", seed.Seed, err)
	}
	// Series stay out of summary.json.
	for _, k := range []string{"Series", "series", "cdf", "Points"} {
		if bytes.Contains(readFile(t, dir, "summary.json"), []byte(k)) {
			t.Errorf("summary.json mentions %q", k)
		}
	}
}

func TestSummaryJSONFromCollectorRuns(t *testing.T) {
	c := comparison()
	js, err := SummaryJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pickers map[string]struct {
			Requests int
			TTFT     struct{ P50, P90, P99 float64 } `json:"ttft_ms"`
			HitRatio float64                         `json:"hit_ratio"`
			Bound    float64                         `json:"hit_ratio_bound"`
			Imb      float64                         `json:"imbalance"`
		}
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Pickers) != len(c.Pickers) {
		t.Fatalf("%d pickers", len(got.Pickers))
	}
	for _, r := range c.Pickers {
		g := got.Pickers[r.Name]
		if g.Requests != r.Summary.Requests || !close6(g.TTFT.P99, r.Summary.TTFT.P99) || !close6(g.HitRatio, r.Summary.HitRatio) ||
			!close6(g.Bound, r.Summary.HitRatioBound) || !close6(g.Imb, r.Summary.Imbalance) {
			t.Errorf("%s: %+v vs %+v", r.Name, g, r.Summary)
		}
		if g.Requests == 0 || g.TTFT.P50 <= 0 || g.TTFT.P50 > g.TTFT.P90 || g.TTFT.P90 > g.TTFT.P99 || g.Imb < 1 {
			t.Errorf("%s: implausible %+v", r.Name, g)
		}
	}
}

func close6(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

func TestNonFiniteBecomesZero(t *testing.T) {
	s := handSummary()
	s.HitRatio = nan()
	s.TTFT.P99 = inf()
	js, err := SummaryJSON(Comparison{Pickers: []Run{{Name: "x", Summary: s}}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(js, []byte(`"hit_ratio": 0,`)) || !bytes.Contains(js, []byte(`"p99": 0,`)) {
		t.Errorf("non-finite values not zeroed:\n%s", js)
	}
	s.Series.TTFT = []stats.Point{{X: nan(), Y: 0.5}, {X: 3, Y: inf()}}
	h := string(HTML(Comparison{Pickers: []Run{{Name: "x", Summary: s}}}))
	noNaN(t, h)
}

func nan() float64 { z := 0.0; return z / z }
func inf() float64 { z := 0.0; return 1 / z }

// elements walks a document and returns every element with its attributes and the aria-label of
// the enclosing svg.
type element struct {
	name, svg string
	attrs     map[string]string
	text      string // character data directly inside the element, before its first child
}

func elements(t *testing.T, doc []byte) []element {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var out []element
	svg := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("index.html is not well-formed: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			attrs := map[string]string{}
			for _, a := range e.Attr {
				attrs[a.Name.Local] = a.Value
			}
			if e.Name.Local == "svg" {
				svg = attrs["aria-label"]
			}
			out = append(out, element{name: e.Name.Local, svg: svg, attrs: attrs})
		case xml.CharData:
			if len(out) > 0 {
				out[len(out)-1].text += string(e)
			}
		case xml.EndElement:
			if e.Name.Local == "svg" {
				svg = ""
			}
		}
	}
}

func TestIndexHTML(t *testing.T) {
	c := comparison()
	dir := t.TempDir()
	if err := Write(dir, c); err != nil {
		t.Fatal(err)
	}
	doc := readFile(t, dir, "index.html")
	s := string(doc)
	noNaN(t, s)
	for _, bad := range []string{"<script", "src=", "href=\"http", "url(", "@import", "random <b>", "<synthetic>"} {
		if strings.Contains(s, bad) {
			t.Errorf("index.html contains %q", bad)
		}
	}
	if !strings.Contains(s, "random &lt;b&gt;") || !strings.Contains(s, "Pickers on &lt;synthetic&gt; &amp; co") {
		t.Error("names not escaped")
	}
	els := elements(t, doc)
	lines := map[string]map[string]int{} // svg -> series -> polylines
	bars := map[string]int{}
	for _, e := range els {
		if e.name == "polyline" {
			if lines[e.svg] == nil {
				lines[e.svg] = map[string]int{}
			}
			lines[e.svg][e.attrs["data-series"]]++
		}
		if e.name == "rect" && e.attrs["class"] == "bar" {
			bars[e.attrs["data-series"]]++
		}
	}
	for _, chart := range []string{"Time to first token", "Inter-token latency (per-request mean)", "End-to-end latency"} {
		got := lines[chart]
		if len(got) != len(c.Pickers) {
			t.Errorf("%s: series %v, want one per picker", chart, got)
		}
		for _, r := range c.Pickers {
			if got[r.Name] != 1 {
				t.Errorf("%s: %d lines for %q", chart, got[r.Name], r.Name)
			}
		}
	}
	hit := lines["Hit ratio over time (cumulative)"]
	for _, r := range c.Pickers {
		if hit[r.Name] != 1 {
			t.Errorf("hit chart: %d lines for %q", hit[r.Name], r.Name)
		}
	}
	// The fixture's pickers see different bounds: one dashed bound line each.
	if hit["load bound"] != 1 || hit["kv|aware bound"] != 1 {
		t.Errorf("hit chart bound lines: %v", hit)
	}
	// Every picker's workers are a heatmap, all on one colour scale with a legend.
	maxes := map[string]string{}
	for _, e := range els {
		if e.name == "g" && strings.Contains(e.attrs["class"], "scale") {
			maxes[e.svg] = e.attrs["data-max"]
		}
	}
	if len(maxes) != len(c.Pickers) {
		t.Fatalf("heatmap legends %v, want one per picker", maxes)
	}
	for _, r := range c.Pickers {
		if got, want := maxes[r.Name+": active KV blocks per worker"], maxes[c.Pickers[0].Name+": active KV blocks per worker"]; got != want || got == "" || got == "0" {
			t.Errorf("%s heatmap scale max %q, %s's %q: want one shared non-zero max", r.Name, got, c.Pickers[0].Name, want)
		}
		if got := lines[r.Name+": active KV blocks per worker"]; len(got) != 0 {
			t.Errorf("%s: worker load drawn as lines %v, want a heatmap", r.Name, got)
		}
	}
	// The load spread: one line per picker, its mean in the legend.
	spread := lines["Load spread over workers (coefficient of variation per window)"]
	if len(spread) != len(c.Pickers) {
		t.Errorf("spread chart lines %v, want one per picker", spread)
	}
	for name := range spread {
		if !strings.Contains(name, "(mean 0.") && !strings.Contains(name, "(mean 1.") {
			t.Errorf("spread line %q does not give its mean", name)
		}
	}
	if strings.Contains(s, "Imbalance over time") {
		t.Error("the imbalance-over-time chart is still there")
	}
	// The context line's items are nowrap spans: they need a space between them to wrap at all.
	if strings.Contains(s, "</span><span>") {
		t.Error("context items without a break opportunity between them: the line cannot wrap")
	}
	// The headline table sits in a horizontal scroll container, with the columns chosen to fit.
	if !strings.Contains(s, `<div class="scroll"><table>`) || !strings.Contains(s, ".scroll{overflow-x:auto}") {
		t.Error("headline table is not in an overflow container")
	}
	var heads []string
	inHead := false
	for _, e := range els {
		if e.name == "tr" {
			inHead = e.attrs["class"] != "group" && len(heads) == 0
		}
		if inHead && e.name == "th" {
			heads = append(heads, strings.TrimSpace(e.text))
		}
	}
	want := []string{"picker", "requests", "failed", "p50", "p90", "p99", "p50", "p99", "p50", "p99", "req", "tokens", "req/s", "ratio", "hit ratio", "bound", "imbalance"}
	if strings.Join(heads, ",") != strings.Join(want, ",") {
		t.Errorf("headline columns %v, want %v", heads, want)
	}
	for _, r := range c.Pickers {
		if bars[r.Name] != 3 { // three reasons in the fixture
			t.Errorf("%d reason bars for %q, want 3", bars[r.Name], r.Name)
		}
	}
	if !strings.Contains(s, `id="definitions"`) {
		t.Error("no definitions section")
	}
}

func TestSameBoundIsOneLine(t *testing.T) {
	a, b := handSummary(), handSummary()
	a.Series.HitRatio = []stats.Point{{X: 1, Y: 0.1}, {X: 5, Y: 0.2}}
	b.Series.HitRatio = []stats.Point{{X: 2, Y: 0.3}}
	h := HTML(Comparison{Pickers: []Run{{Name: "a", Summary: a}, {Name: "b", Summary: b}}})
	var bounds, dashed int
	for _, e := range elements(t, h) {
		if e.svg == "Hit ratio over time (cumulative)" && e.name == "polyline" {
			if e.attrs["data-series"] == "infinite-cache bound" {
				bounds++
			}
			if e.attrs["stroke-dasharray"] != "" {
				dashed++
			}
		}
	}
	if bounds != 1 || dashed != 1 {
		t.Errorf("%d bound lines, %d dashed; want 1 and 1", bounds, dashed)
	}
}

func TestDeterministic(t *testing.T) {
	d1, d2 := t.TempDir(), t.TempDir()
	if err := Write(d1, comparison()); err != nil {
		t.Fatal(err)
	}
	if err := Write(d2, comparison()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"index.html", "summary.md", "summary.json"} {
		if !bytes.Equal(readFile(t, d1, f), readFile(t, d2, f)) {
			t.Errorf("%s differs between identical runs", f)
		}
	}
}

func TestSummaryMarkdown(t *testing.T) {
	c := comparison()
	md := string(SummaryMarkdown(c))
	for _, want := range []string{"| kv\\|aware | 1500 |", "| random \\<b\\> |", "Seed: 42", "SLO: TTFT ≤ 800 ms, ITL ≤ 40 ms", "index.html#definitions"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	rows := 0
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| ") && !strings.HasPrefix(l, "| picker") {
			rows++
			if n := strings.Count(strings.ReplaceAll(l, "\\|", ""), "|"); n != 14 {
				t.Errorf("row has %d cell separators, want 14: %s", n, l)
			}
		}
	}
	if rows != len(c.Pickers) {
		t.Errorf("%d rows, want %d", rows, len(c.Pickers))
	}
}

func TestInvalidComparison(t *testing.T) {
	for _, c := range []Comparison{
		{Pickers: []Run{{Name: ""}}},
		{Pickers: []Run{{Name: "a"}, {Name: "a"}}},
	} {
		dir := filepath.Join(t.TempDir(), "out")
		if err := Write(dir, c); err == nil {
			t.Errorf("%+v: no error", c.Pickers)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("invalid comparison created %s", dir)
		}
		if _, err := SummaryJSON(c); err == nil {
			t.Errorf("SummaryJSON accepted %+v", c.Pickers)
		}
	}
}

func TestEmptyComparison(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, Comparison{}); err != nil {
		t.Fatal(err)
	}
	doc := readFile(t, dir, "index.html")
	elements(t, doc)
	noNaN(t, string(doc))
	if strings.Count(string(doc), "no data") < 5 {
		t.Errorf("empty report should say no data in every chart")
	}
	var got map[string]any
	if err := json.Unmarshal(readFile(t, dir, "summary.json"), &got); err != nil {
		t.Fatal(err)
	}
	if p, ok := got["pickers"].(map[string]any); !ok || len(p) != 0 {
		t.Errorf("pickers = %v", got["pickers"])
	}
}

func TestSummaryJSONCarriesTheFleetConfig(t *testing.T) {
	threshold := 0.7
	setup := &Setup{
		Workers: []WorkerGroup{{Role: "prefill", Count: 2, DPSize: 1, BlockSize: 64, TotalKVBlocks: 4096, MaxNumBatchedTokens: 8192,
			MaxNumSeqs: 256, ContextLength: 131072, SpeedupRatio: 1, KVTransferBandwidth: 2e10, KVBytesPerBlock: 2 << 20},
			{Role: "decode", Count: 3, DPSize: 2, BlockSize: 16, TotalKVBlocks: 1024, LoadFields: []string{"active_decode_blocks"}}},
		Network: Network{LoadDelay: 250 * time.Microsecond, LoadJitter: 2 * time.Millisecond, LoadLoss: 0.02, LeaseTTL: 10 * time.Second},
		Router:  Router{MaxStaleness: time.Second, KV: KVSettings{OverlapScoreCredit: 1, PrefillLoadScale: 1, DecodeBusyThreshold: &threshold}},
	}
	c := Comparison{Fleet: setup.Describe(), Setup: setup, Seed: 7, SeedSource: "scenario file", Pickers: []Run{{Name: "kv"}}}
	js, err := SummaryJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		SeedSource  string `json:"seed_source"`
		FleetConfig struct {
			Workers []map[string]any `json:"workers"`
			Network map[string]any   `json:"network"`
			Router  struct {
				MaxStalenessMs float64        `json:"max_staleness_ms"`
				KV             map[string]any `json:"kv"`
			} `json:"router"`
		} `json:"fleet_config"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	fc := got.FleetConfig
	if got.SeedSource != "scenario file" || len(fc.Workers) != 2 || fc.Workers[0]["role"] != "prefill" || fc.Workers[0]["total_kv_blocks"] != 4096.0 ||
		fc.Workers[0]["kv_transfer_bandwidth"] != 2e10 || fc.Workers[1]["dp_size"] != 2.0 || fc.Workers[1]["block_size"] != 16.0 {
		t.Errorf("workers %v (seed source %q)", fc.Workers, got.SeedSource)
	}
	if fc.Network["load_delay_ms"] != 0.25 || fc.Network["load_jitter_ms"] != 2.0 || fc.Network["load_loss"] != 0.02 || fc.Network["lease_ttl_ms"] != 10000.0 {
		t.Errorf("network %v", fc.Network)
	}
	if fc.Router.MaxStalenessMs != 1000 || fc.Router.KV["decode_busy_check"] != true || fc.Router.KV["decode_busy_threshold"] != 0.7 {
		t.Errorf("router %+v", fc.Router)
	}
	// Fixed key order: fleet_config follows fleet, seed_source follows seed.
	s := string(js)
	if !(strings.Index(s, `"fleet"`) < strings.Index(s, `"fleet_config"`) && strings.Index(s, `"fleet_config"`) < strings.Index(s, `"seed"`) &&
		strings.Index(s, `"seed"`) < strings.Index(s, `"seed_source"`)) {
		t.Errorf("key order:\n%s", s)
	}
	if !strings.Contains(c.Fleet, "2 prefill (4096 KV blocks × 64 tokens)") || !strings.Contains(c.Fleet, "dp 2") || !strings.Contains(c.Fleet, "loss 0.02") {
		t.Errorf("description %q", c.Fleet)
	}

	// A comparison without a setup still has every key, never null.
	js, err = SummaryJSON(Comparison{Pickers: []Run{{Name: "kv"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"workers": []`) || strings.Contains(string(js), "null") {
		t.Errorf("without a setup:\n%s", js)
	}
}

// Each run's router settings are written under its name, as dynamo.kv names them, so two runs of
// one picker with different knobs never look alike; a run without settings is left out.
func TestSummaryJSONCarriesEachRunsRouter(t *testing.T) {
	busy := 0.25
	c := Comparison{Pickers: []Run{
		{Name: "round_robin"},
		{Name: "kv", Router: &RunRouter{Picker: "kv", KVScored: true, KV: KVBlock{OverlapScoreCredit: 1, PrefillLoadScale: 1, UseKVEvents: true}}},
		{Name: "kv_tuned", Router: &RunRouter{Picker: "kv", KVScored: true, MaxStaleness: 2 * time.Second, Replicas: 2, ReplicaSync: true,
			SyncDelay: 500 * time.Microsecond, SyncLoss: 0.01,
			KV: KVBlock{OverlapScoreCredit: 0.75, PrefillLoadScale: 8, RouterTemperature: 0.05, DecodeActiveRequestWeight: 1,
				TrackActiveBlocks: true, TrackPrefillTokens: true, PredictedBlockTTL: 30 * time.Second,
				ConditionalDisaggregation: true, DecodeBusyThreshold: &busy}}},
	}}
	js, err := SummaryJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Router map[string]struct {
			Picker         string         `json:"picker"`
			KVScored       bool           `json:"kv_scored"`
			MaxStalenessMs float64        `json:"max_staleness_ms"`
			KV             map[string]any `json:"kv"`
			Replicas       int            `json:"replicas"`
			ReplicaSync    bool           `json:"replica_sync"`
			SyncDelayMs    float64        `json:"sync_delay_ms"`
			SyncLoss       float64        `json:"sync_loss"`
		} `json:"router"`
	}
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Router) != 2 {
		t.Fatalf("router %v", got.Router)
	}
	kv, tuned := got.Router["kv"], got.Router["kv_tuned"]
	if kv.Picker != "kv" || !kv.KVScored || kv.KV["prefill_load_scale"] != 1.0 || kv.KV["use_kv_events"] != true ||
		kv.KV["predicted_block_ttl_ms"] != 0.0 || kv.Replicas != 1 {
		t.Errorf("kv %+v", kv)
	}
	cd := tuned.KV["conditional_disaggregation"].(map[string]any)
	if tuned.KV["prefill_load_scale"] != 8.0 || tuned.KV["overlap_score_credit"] != 0.75 || tuned.KV["router_temperature"] != 0.05 ||
		tuned.KV["decode_active_request_weight"] != 1.0 || tuned.KV["track_active_blocks"] != true || tuned.KV["track_prefill_tokens"] != true ||
		tuned.KV["track_output_blocks"] != false || tuned.KV["predicted_block_ttl_ms"] != 30000.0 || cd["enabled"] != true ||
		cd["decode_busy_threshold"] != 0.25 || tuned.MaxStalenessMs != 2000 || tuned.Replicas != 2 || !tuned.ReplicaSync ||
		tuned.SyncDelayMs != 0.5 || tuned.SyncLoss != 0.01 {
		t.Errorf("kv_tuned %+v", tuned)
	}
	if v, ok := kv.KV["conditional_disaggregation"].(map[string]any)["decode_busy_threshold"]; !ok || v != nil {
		t.Errorf("no busy check is null, got %v (present %v)", v, ok)
	}
	// The top-level key follows fleet_config.
	s, top := string(js), "\n  \"router\": {"
	if !(strings.Index(s, `"fleet_config"`) < strings.Index(s, top) && strings.Index(s, top) < strings.Index(s, `"seed"`)) {
		t.Errorf("key order:\n%s", s)
	}
}

// A search's account comes before the comparison: the trade-off of every evaluated setting, the
// search's progress and the expected gain of the tuned run over the current one.
func TestTuningSection(t *testing.T) {
	tu := &Tuning{Objective: "ttft_p90", Label: "TTFT p90 (ms)", LowerIsBetter: true, Budget: 8, Current: 0, Tuned: 2,
		CurrentRun: "kv", TunedRun: "kv_tuned", Points: []TunePoint{
			{PrefillLoadScale: 1, OverlapScoreCredit: 1, Phase: "current", Value: 300},
			{PrefillLoadScale: 0.25, OverlapScoreCredit: 1, Phase: "grid", Value: 500},
			{PrefillLoadScale: 8, OverlapScoreCredit: 1, TrackPrefillTokens: true, Phase: "grid", Value: 90},
			{PrefillLoadScale: 8, OverlapScoreCredit: 0.5, Phase: "refine", Value: 120},
		}}
	cur, tuned := run(1, 4, 3), run(1, 4, 1)
	c := Comparison{Title: "Tuning", Pickers: []Run{{Name: "kv", Summary: cur}, {Name: "kv_tuned", Summary: tuned}}, Tuning: tu}
	html := string(HTML(c))
	for _, want := range []string{`id="tuning"`, "TTFT p90 (ms) by prefill_load_scale", "Search progress", `data-series="credit 0.5"`,
		`data-series="tuned"`, "prefill_load_scale 8, overlap_score_credit 1, router_temperature 0, decode_active_request_weight 0, tracking prefill tokens",
		"budget 8; the budget ran out"} {
		if !strings.Contains(html, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	// Four points, each drawn once (the current and tuned ones in their own series), plus the
	// progress chart's four, plus legend dots.
	if n := strings.Count(html, "<circle cx"); n < 8 {
		t.Errorf("%d circles", n)
	}
	md := string(SummaryMarkdown(c))
	p90 := func(s stats.Summary) string { return fmtMs(s.TTFT.P90) }
	for _, want := range []string{"## Tuning: ttft\\_p90", "| figure | kv | kv\\_tuned | change |", "| TTFT p90 | " + p90(cur) + " | " + p90(tuned) + " | "} {
		if !strings.Contains(md, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, md)
		}
	}
	// Out-of-range indexes leave the section out rather than failing.
	c.Tuning = &Tuning{Points: tu.Points, Current: 0, Tuned: 9}
	if strings.Contains(string(HTML(c)), `id="tuning"`) || strings.Contains(string(SummaryMarkdown(c)), "## Tuning") {
		t.Error("a broken tuning account was shown")
	}
}
