package validate

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"switchyard/fakefleet/engine/perf"
	"switchyard/internal/groundtruth"
)

// Deployment is the profile of exp's own deployment (model, GPU, layout and
// vLLM settings, read from its experiment.json) with base's coefficients
// and overheads. An experiment on a GPU without datasheet figures cannot
// be priced and is refused as not simulatable.
func Deployment(exp *groundtruth.Experiment, base perf.Profile) (perf.Profile, error) {
	if exp.Dir == "" {
		return perf.Profile{}, fmt.Errorf("%w: experiment %q was not read from a folder", ErrNotSimulatable, exp.ID)
	}
	data, err := readExperimentFile(filepath.Join(exp.Dir, groundtruth.ExperimentFile))
	if err != nil {
		return perf.Profile{}, err
	}
	p, err := perf.FromExperiment(data, base)
	if err != nil {
		return perf.Profile{}, fmt.Errorf("%w: %v", ErrNotSimulatable, err)
	}
	return p, nil
}

func readExperimentFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, perf.MaxExperimentBytes+1))
	if err != nil {
		return nil, err
	}
	return data, nil
}

// ProfileSetup is the Setup that prices exp's steps with p (a deployment
// profile, see Deployment). The profile's client overhead is added only
// where the set measured from the client (the inference-perf recipes); the
// per-request sets measured inside the server, so they get none.
func ProfileSetup(exp *groundtruth.Experiment, p perf.Profile) (Setup, error) {
	cfg, err := p.EngineConfig()
	if err != nil {
		return Setup{}, fmt.Errorf("%w: %v", ErrNotSimulatable, err)
	}
	s := Setup{Engine: cfg}
	if exp.Workload.Kind == groundtruth.SharedPrefix {
		s.ClientOverhead = time.Duration(p.Overheads.RequestMs * float64(time.Millisecond))
		s.FirstChunkTokens = InferencePerfChunkTokens
	}
	return s, nil
}

// InferencePerfChunkTokens is how many tokens inference-perf's first
// streamed chunk carries: its chunks arrive in pairs (half the measured
// gaps are ~0.05 ms, the data's trap 1), so the TTFT it reports is the
// second token's.
const InferencePerfChunkTokens = 2

// Profiled configures every experiment with its own deployment priced by
// base's coefficients and overheads.
func Profiled(base perf.Profile) Configure {
	return func(exp *groundtruth.Experiment) (Setup, error) {
		p, err := Deployment(exp, base)
		if err != nil {
			return Setup{}, err
		}
		return ProfileSetup(exp, p)
	}
}

// MinScaledRequests is the fewest requests Scaled leaves in a stage (or
// all of it, when it has fewer): enough to pass the recipe's cold prompts
// and reach a steady queue.
const MinScaledRequests = 300

// Scaled is exp with every inference-perf stage shortened to the share f
// of its requests and duration (f in (0, 1]): the same rates, so the
// stationary means the scoring compares stay, for a fraction of the
// simulation time. Measurements are kept whole. Request traces, whose
// queue is built by the exact arrivals, are returned unchanged.
func Scaled(exp *groundtruth.Experiment, f float64) *groundtruth.Experiment {
	if !(f > 0 && f < 1) || exp.Workload.Kind != groundtruth.SharedPrefix {
		return exp
	}
	c := *exp
	c.Workload.Stages = make([]groundtruth.WorkloadStage, len(exp.Workload.Stages))
	for i, st := range exp.Workload.Stages {
		n := max(int(math.Round(float64(st.NumRequests)*f)), min(st.NumRequests, MinScaledRequests))
		if st.NumRequests > 0 {
			st.DurationS *= float64(n) / float64(st.NumRequests)
		}
		st.NumRequests = n
		c.Workload.Stages[i] = st
	}
	return &c
}
