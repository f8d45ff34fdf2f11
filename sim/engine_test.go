package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard/fakefleet/engine/perf"
)

// shippedProfile is the project's Llama-3.1-8B on one H100 profile.
const shippedProfile = "../profiles/llama-3.1-8b-h100-tp1.json"

// profileDir writes the shipped profile, changed by edit, beside a
// scenario file made of body, and returns the scenario's path.
func profileDir(t *testing.T, edit func(*perf.Profile), body string) string {
	t.Helper()
	p, err := perf.LoadProfile(shippedProfile)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&p)
	}
	data, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "h100.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const oneGroupOnProfile = `
seed: 3
fleet:
  - {role: aggregated, count: 2, engine: {profile: h100.json}}
  - {role: aggregated, count: 1, engine: {profile: h100.json}, total_kv_blocks: 1000, max_num_seqs: 8, context_length: 16384}
  - {role: aggregated, count: 1}
workload:
  poisson: {rate: 5, count: 10, prompt: {min: 100, max: 200}, output: {min: 4, max: 8}}
`

func TestAProfileSetsTheGroupsEngineAndCard(t *testing.T) {
	path := profileDir(t, nil, oneGroupOnProfile)
	sc, err := LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := perf.LoadProfile(shippedProfile)
	blocks, err := p.KVBlocks()
	if err != nil {
		t.Fatal(err)
	}
	g := sc.Fleet[0]
	if g.BlockSize != 16 || g.MaxNumBatchedTokens != 2048 || g.MaxNumSeqs != 256 || g.ContextLength != 8192 ||
		g.TotalKVBlocks != blocks || g.KVBytesPerBlock != 131072*16 {
		t.Fatalf("profile group's card: %+v, want the profile's (KV blocks %d)", g, blocks)
	}
	if !filepath.IsAbs(g.Engine.Profile) || g.Engine.ProfileName() != "llama-3.1-8b-h100-tp1" {
		t.Fatalf("engine %+v: the path should be resolved and the profile loaded", g.Engine)
	}
	o := sc.Fleet[1]
	if o.TotalKVBlocks != 1000 || o.MaxNumSeqs != 8 || o.ContextLength != 16384 || o.BlockSize != 16 {
		t.Fatalf("the scenario's card values should win over the profile's: %+v", o)
	}
	if m := sc.Fleet[2]; m.Engine != nil || m.BlockSize != 64 || m.TotalKVBlocks != 16384 {
		t.Fatalf("a group without engine keeps the mocker defaults: %+v", m)
	}
	cfg, err := o.rankConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TotalKVBlocks != 1000 || cfg.MaxNumSeqs != 8 || cfg.MaxModelLen != 16384 || cfg.MaxNumBatchedTokens != 2048 {
		t.Fatalf("engine config %+v does not follow the card", cfg)
	}
	if _, ok := cfg.Timing.(*perf.Roofline); !ok {
		t.Fatalf("timing %T, want the profile's roofline", cfg.Timing)
	}

	// A recording keeps the scenario as YAML; read back, it is the same
	// fleet (a re-simulation runs the same engines).
	again, err := ParseScenario([]byte(sc.YAML()))
	if err != nil {
		t.Fatalf("the rendered scenario does not parse: %v\n%s", err, sc.YAML())
	}
	for i := range sc.Fleet {
		a, b := sc.Fleet[i], again.Fleet[i]
		a.Engine, b.Engine = nil, nil
		a.engineConfig.Timing, b.engineConfig.Timing = nil, nil
		if a.BlockSize != b.BlockSize || a.TotalKVBlocks != b.TotalKVBlocks || a.ContextLength != b.ContextLength ||
			a.engineConfig != b.engineConfig {
			t.Fatalf("group %d read back as %+v, was %+v", i, b, a)
		}
	}
}

func TestAnEngineIsValidatedWithItsFieldPath(t *testing.T) {
	for name, c := range map[string]struct{ engine, want string }{
		"unknown timing": {"{timing: fast}", "fleet[0].engine.timing"},
		"both":           {"{timing: mocker, profile: h100.json}", "fleet[0].engine: give timing or profile"},
		"missing file":   {"{profile: nowhere.json}", "fleet[0].engine.profile: nowhere.json is neither"},
		"bad profile":    {"{profile: scenario.yaml}", "fleet[0].engine.profile"},
		"unknown key":    {"{profil: h100.json}", "profil"},
	} {
		path := profileDir(t, nil, "fleet: [{role: aggregated, count: 1, engine: "+c.engine+"}]\n")
		_, err := LoadFleet(path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
	// A profile whose weights leave no KV room is refused, naming why.
	path := profileDir(t, func(p *perf.Profile) { p.GPU.MemoryGB = 16 }, "fleet: [{role: aggregated, count: 1, engine: {profile: h100.json}}]\n")
	if _, err := LoadFleet(path); err == nil || !strings.Contains(err.Error(), "no room for KV") {
		t.Errorf("a profile without KV room: %v", err)
	}
	// The file itself is refused, whatever the group sets.
	path = profileDir(t, func(p *perf.Profile) { p.GPU.MemoryGB = 16 }, "fleet: [{role: aggregated, count: 1, total_kv_blocks: 64, engine: {profile: h100.json}}]\n")
	if _, err := LoadFleet(path); err == nil {
		t.Errorf("an invalid profile was accepted with total_kv_blocks set")
	}
}

// runHash runs a scenario and returns its output hash and outcomes.
func runHash(t *testing.T, sc *Scenario) (string, *textTap, Summary) {
	t.Helper()
	tap := newTextTap()
	r, err := New(sc, Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return string(tap.h.Sum(nil)), tap, s
}

const poissonOn = `
seed: 5
fleet:
  - {role: prefill, count: 1%s}
  - {role: decode, count: 2%s}
workload:
  poisson: {rate: 10, count: 40, prompt: {min: 64, max: 1024}, output: {min: 4, max: 32}}
`

func TestTimingMockerIsTheDefault(t *testing.T) {
	plain, err := ParseScenario([]byte(strings.ReplaceAll(poissonOn, "%s", "")))
	if err != nil {
		t.Fatal(err)
	}
	named, err := ParseScenario([]byte(strings.ReplaceAll(poissonOn, "%s", ", engine: {timing: mocker}")))
	if err != nil {
		t.Fatal(err)
	}
	a, _, _ := runHash(t, plain)
	b, _, _ := runHash(t, named)
	if a != b {
		t.Fatal("engine: {timing: mocker} ran differently from the default engine")
	}
	if strings.Contains(plain.YAML(), "engine") {
		t.Fatalf("a scenario without engines renders one, so old recordings would change:\n%s", plain.YAML())
	}
}

func TestAProfileRunPricesStepsOnTheProfile(t *testing.T) {
	body := strings.ReplaceAll(poissonOn, "%s", ", engine: {profile: h100.json}")
	run := func(edit func(*perf.Profile)) (string, []time.Duration) {
		sc, err := LoadScenario(profileDir(t, edit, body))
		if err != nil {
			t.Fatal(err)
		}
		h, tap, s := runHash(t, sc)
		if s.Served != 40 {
			t.Fatalf("served %d of 40: %+v", s.Served, s)
		}
		var ttft []time.Duration
		for _, o := range tap.outcomes {
			ttft = append(ttft, o.TTFT)
		}
		return h, ttft
	}
	h1, base := run(nil)
	if h2, _ := run(nil); h1 != h2 {
		t.Fatal("two runs on one profile differ")
	}
	// 50 ms more per step: a first token takes a prefill step on the
	// prefill worker and one on the decode worker, so at least 100 ms.
	_, slow := run(func(p *perf.Profile) { p.Coefficients.StepOverheadUs += 50_000 })
	for i := range base {
		if slow[i] < 100*time.Millisecond || base[i] >= 100*time.Millisecond {
			t.Fatalf("request %d: TTFT %v on the slower profile, %v on the base one: the profile does not price the steps",
				i, slow[i], base[i])
		}
	}
	mocker, err := ParseScenario([]byte(strings.ReplaceAll(poissonOn, "%s", "")))
	if err != nil {
		t.Fatal(err)
	}
	if h, _, _ := runHash(t, mocker); h == h1 {
		t.Fatal("the profile run is the mocker's")
	}
}

func TestAProfileRefusesRequestsBeyondMaxModelLen(t *testing.T) {
	const long = `
seed: 2
fleet: [{role: aggregated, count: 1, engine: {profile: h100.json}%s}]
workload:
  poisson: {rate: 2, count: 5, prompt: {min: 9000, max: 9000}, output: {min: 4, max: 4}}
`
	sc, err := LoadScenario(profileDir(t, nil, strings.ReplaceAll(long, "%s", "")))
	if err != nil {
		t.Fatal(err)
	}
	_, tap, s := runHash(t, sc)
	if s.Served != 0 || s.Failed != 5 {
		t.Fatalf("prompts of 9,000 tokens beyond max_model_len 8,192: %+v", s)
	}
	for _, o := range tap.outcomes {
		if o.Status != "rejected" {
			t.Fatalf("outcome %+v, want rejected", o)
		}
	}
	sc, err = LoadScenario(profileDir(t, nil, strings.ReplaceAll(long, "%s", ", context_length: 16384")))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, s := runHash(t, sc); s.Served != 5 {
		t.Fatalf("with context_length 16,384 the same prompts should be served: %+v", s)
	}
}

func TestWithProfileRunsEveryGroupOnIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fleet.yaml")
	if err := os.WriteFile(path, []byte("fleet:\n  - {role: prefill, count: 1, max_num_seqs: 4}\n  - {role: decode, count: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadFleetWith(path, LoadOptions{Profile: shippedProfile})
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range sc.Fleet {
		if g.Engine.ProfileName() != "llama-3.1-8b-h100-tp1" || g.BlockSize != 16 || g.ContextLength != 8192 {
			t.Fatalf("group %d: %+v", i, g)
		}
	}
	if sc.Fleet[0].MaxNumSeqs != 4 || sc.Fleet[1].MaxNumSeqs != 256 {
		t.Fatalf("card values set in the file still win: %d, %d", sc.Fleet[0].MaxNumSeqs, sc.Fleet[1].MaxNumSeqs)
	}
	// A scenario built in code and not normalized cannot run a profile
	// it never loaded.
	raw := &Scenario{Picker: "load", Fleet: []WorkerGroup{{Role: "aggregated", Count: 1, Engine: &EngineSpec{Profile: "x.json"}}}}
	if _, err := New(raw, Options{}); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Fatalf("an unloaded profile: %v", err)
	}
}
