package sim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"switchyard/fakefleet/engine"
	"switchyard/fakefleet/engine/perf"
)

// TimingMocker names Dynamo's mocker polynomial, the engine timing a
// worker group runs on unless it names a profile.
const TimingMocker = "mocker"

// EngineSpec chooses how a worker group's engine prices its steps: the
// mocker polynomial (the default), or a profile (fakefleet/engine/perf), a
// physical model of one model on one kind of GPU that also sets vLLM's
// scheduler settings and the KV capacity.
type EngineSpec struct {
	// Timing is "mocker" (or empty) when no profile is named.
	Timing string `yaml:"timing,omitempty"`
	// Profile is a perf.Profile JSON file. A relative path is taken from
	// the scenario file's folder, else from the working directory; once
	// found it is rewritten as an absolute path, so a recorded scenario
	// re-simulates from anywhere on the same machine.
	Profile string `yaml:"profile,omitempty"`

	// profile is the loaded file.
	profile *perf.Profile
}

// ProfileName is the loaded profile's name ("" on the mocker).
func (e *EngineSpec) ProfileName() string {
	if e == nil || e.profile == nil {
		return ""
	}
	return e.profile.Name
}

// usesProfile reports whether the group runs on a profile.
func (g *WorkerGroup) usesProfile() bool { return g.Engine != nil && g.Engine.Profile != "" }

// resolveEngines loads every group's profile and fills the group's card
// values the scenario left out from it, before the mocker defaults fill
// the rest. Card values the scenario sets win over the profile's, and
// total_kv_blocks is the KV capacity estimated from the GPU's memory
// unless the scenario sets it. Resolving twice changes nothing.
func (sc *Scenario) resolveEngines() []error {
	var errs []error
	for i := range sc.Fleet {
		g := &sc.Fleet[i]
		if g.Engine == nil {
			continue
		}
		field := fmt.Sprintf("fleet[%d].engine", i)
		if err := g.Engine.check(field); err != nil {
			errs = append(errs, err)
			continue
		}
		if !g.usesProfile() {
			continue
		}
		if err := g.Engine.load(sc.dir, field); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := g.applyProfile(); err != nil {
			errs = append(errs, fmt.Errorf("%s.profile: %w", field, err))
		}
	}
	return errs
}

// check refuses a spec that names no known timing or two at once.
func (e *EngineSpec) check(field string) error {
	switch {
	case e.Timing != "" && e.Timing != TimingMocker:
		return fmt.Errorf("%s.timing: unknown timing %q (mocker, or name a profile)", field, e.Timing)
	case e.Timing != "" && e.Profile != "":
		return fmt.Errorf("%s: give timing or profile, not both", field)
	}
	return nil
}

// load reads the profile once, resolving its path.
func (e *EngineSpec) load(dir, field string) error {
	if e.profile != nil {
		return nil
	}
	path, err := profilePath(dir, e.Profile)
	if err != nil {
		return fmt.Errorf("%s.profile: %w", field, err)
	}
	p, err := perf.LoadProfile(path)
	if err != nil {
		return fmt.Errorf("%s.profile: %w", field, err)
	}
	e.Profile, e.profile = path, &p
	return nil
}

// profilePath finds a profile file: an absolute path as written, a
// relative one beside the scenario file, else from the working directory.
func profilePath(dir, path string) (string, error) {
	candidates := []string{path}
	if !filepath.IsAbs(path) && dir != "" {
		candidates = []string{filepath.Join(dir, path), path}
	}
	for _, c := range candidates {
		if info, err := os.Stat(c); err == nil && info.Mode().IsRegular() {
			return filepath.Abs(c)
		}
	}
	if len(candidates) == 2 {
		return "", fmt.Errorf("%s is neither beside the scenario file (%s) nor in the working directory", path, candidates[0])
	}
	return "", fmt.Errorf("%s: no such file", path)
}

// applyProfile fills the group's card values from its profile where the
// scenario left them zero, as the profile's engine would run them.
func (g *WorkerGroup) applyProfile() error {
	p := *g.Engine.profile
	settings := &p.Engine
	override := func(dst *int, v int) {
		if v > 0 {
			*dst = v
		}
	}
	override(&settings.BlockSize, g.BlockSize)
	override(&settings.MaxNumBatchedTokens, g.MaxNumBatchedTokens)
	override(&settings.MaxNumSeqs, g.MaxNumSeqs)
	override(&settings.MaxModelLen, g.ContextLength)
	override(&settings.NumGPUBlocks, g.TotalKVBlocks)
	cfg, err := p.EngineConfig()
	if err != nil {
		return err
	}
	g.BlockSize, g.TotalKVBlocks = cfg.BlockSize, cfg.TotalKVBlocks
	g.MaxNumBatchedTokens, g.MaxNumSeqs = cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs
	if g.ContextLength == 0 {
		g.ContextLength = cfg.MaxModelLen // 0 (no cap) takes the mocker default below
	}
	if g.KVBytesPerBlock == 0 {
		// The whole model's KV of one block: what a disaggregated
		// transfer moves, whichever way the GPUs split it.
		g.KVBytesPerBlock = int(min(p.Model.KVCacheBytesPerToken*float64(cfg.BlockSize), 1<<40))
	}
	g.engineConfig = cfg
	return nil
}

// errUnresolved: a scenario built in code reached sim.New without
// Normalize, so its profiles were never loaded.
var errUnresolved = errors.New("sim: a worker group names a profile that was not loaded (call Normalize or ParseScenario first)")

// rankConfig is one rank's engine configuration for the group: the
// profile's, with the group's card values, or the mocker's.
func (g *WorkerGroup) rankConfig() (engine.Config, error) {
	if !g.usesProfile() {
		return engine.Config{BlockSize: g.BlockSize, TotalKVBlocks: g.TotalKVBlocks, MaxNumBatchedTokens: g.MaxNumBatchedTokens,
			MaxNumSeqs: g.MaxNumSeqs, SpeedupRatio: g.SpeedupRatio, Timing: engine.Mocker{}}, nil
	}
	if g.Engine.profile == nil || g.engineConfig.Timing == nil {
		return engine.Config{}, errUnresolved
	}
	cfg := g.engineConfig
	cfg.SpeedupRatio = g.SpeedupRatio
	// The card advertises context_length; the engine refuses what is
	// longer, as vLLM refuses a request beyond max_model_len.
	cfg.MaxModelLen = g.ContextLength
	return cfg, nil
}

// WithProfile sets every worker group of sc to run on the profile at
// path (the --profile flag of sim and bench pickers), before defaults
// fill the groups' card values. A relative path is taken from the working
// directory.
func WithProfile(sc *Scenario, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for i := range sc.Fleet {
		sc.Fleet[i].Engine = &EngineSpec{Profile: abs}
	}
	return nil
}
