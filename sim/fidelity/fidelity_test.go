package fidelity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"switchyard/fakefleet/engine/perf"
	"switchyard/recorder"
	"switchyard/router/picker"
	"switchyard/sim"
	"switchyard/sim/replay"
	"switchyard/sim/workload"
)

// Scenario is the fidelity test's live run: the demo's fleet shape (two
// prefill and two decode engine workers at speedup 1) under a seeded
// Poisson workload, about 8 s of wall-clock traffic.
func scenario(path string, profile *perf.Profile) Live {
	return Live{Path: path, Prefill: 2, Decode: 2, Seed: 1, Version: "test", Profile: profile,
		Workload: workload.PoissonConfig{Rate: 8, Count: 60, Prompt: workload.Range{Min: 64, Max: 2048},
			Output: workload.Range{Min: 8, Max: 48}}}
}

// liveAttempts is how many live runs the fidelity test may make. The live
// run shares the machine's cores with whatever else runs; a burst of
// contention delays its timers by milliseconds, which the simulator does
// not model (docs/fidelity.md). An attempt that breaks the tolerances is
// logged and run again; a simulator that is wrong breaks them every time.
const liveAttempts = 3

// maxTimerLateness is the contention beyond which a live run's timing
// tells about the machine rather than the simulator: the p99 lateness of
// the 2 ms sleeps probed during the run. The tolerances were measured to
// hold up to about 5 ms (docs/fidelity.md); beyond, runs were seen to break
// them by small margins, as the simulator, which does not model a
// contended CPU, would predict.
const maxTimerLateness = 5 * time.Millisecond

// untimed keeps the bounds that do not depend on the wall clock: every
// request pinned and ok in both runs, and an exact replay. Agreement does:
// on a busy machine requests received together may be picked in another
// order than their timestamps, which moves even the prefill rotation.
var untimed = Tolerances{P50Abs: time.Hour, P90Abs: time.Hour, MaxKS: 1, MaxPaired: time.Hour}

// agreedRun is a live run and its re-simulation, compared.
type agreedRun struct {
	path   string
	live   *LiveResult
	report *Report
	// profile is the engine profile file both ran on ("" the mocker).
	profile string
}

func (r agreedRun) contended() bool { return r.live.Oversleep[1] > maxTimerLateness }

// runAndCompare makes one live run into a fresh recording, re-simulates it
// and compares the two. Errors of the stack itself (a failed request, a
// dropped record) are not contention and fail the test at once.
func runAndCompare(t *testing.T, profile string) agreedRun {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fidelity.db")
	var p *perf.Profile
	if profile != "" {
		loaded, err := perf.LoadProfile(profile)
		require.NoError(t, err)
		p = &loaded
	}
	live, err := RunLive(context.Background(), scenario(path, p))
	require.NoError(t, err)
	require.Equal(t, 60, live.Sent)
	simRun, err := Resimulate(path, live.RunID, SimOptions{Version: "test", Profile: profile})
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := Compare(rd, live.RunID, simRun)
	require.NoError(t, err)
	return agreedRun{path: path, live: live, report: rep, profile: profile}
}

// The signature check: one workload run live through the whole stack
// (embedded etcd, fake engine workers publishing over ZMQ, the frontend
// emulation, the router, streaming OpenAI clients, the wall clock) and
// recorded, then simulated from the recording on the same fleet. The
// simulated picks must match the live ones, and the TTFT distributions
// must agree within the documented tolerances (docs/fidelity.md), in one
// of liveAttempts live runs.
//
// When every attempt ran on a machine too busy to keep its timers within
// maxTimerLateness, only the bounds that do not depend on the wall clock
// are asserted and the test then skips, saying so; with CI set it fails
// instead, since CI runs it alone and must measure it.
func TestLiveAndSimulatedRunsAgree(t *testing.T) { liveAndSimulatedAgree(t, "") }

// The same check with the fleet's engines on the Llama-3.1-8B/H100
// profile, live and simulated, within the same tolerances.
func TestLiveAndSimulatedRunsAgreeOnAProfile(t *testing.T) {
	liveAndSimulatedAgree(t, "../../profiles/llama-3.1-8b-h100-tp1.json")
}

func liveAndSimulatedAgree(t *testing.T, profile string) {
	if testing.Short() {
		t.Skip("starts etcd, a fleet and the router, and runs about 8 s of live traffic")
	}
	var run agreedRun
	var breaches []string
	allContended := true
	for attempt := 1; attempt <= liveAttempts; attempt++ {
		run = runAndCompare(t, profile)
		live := run.live
		t.Logf("attempt %d: %s  sends at most %v late; 2 ms sleeps woke %v late (median), %v (p99)", attempt, run.report,
			live.Lateness.Round(time.Microsecond), live.Oversleep[0].Round(time.Microsecond), live.Oversleep[1].Round(time.Microsecond))
		err := run.report.Check(DefaultTolerances)
		if err == nil {
			assertAgreement(t, run)
			return
		}
		breaches = append(breaches, fmt.Sprintf("attempt %d (2 ms sleeps %v late at p99): %v", attempt,
			live.Oversleep[1].Round(time.Microsecond), err))
		allContended = allContended && run.contended()
	}
	summary := fmt.Sprintf("no live run of %d agreed with its simulation within the tolerances:\n%s",
		liveAttempts, strings.Join(breaches, "\n"))
	if !allContended || os.Getenv("CI") != "" {
		t.Fatal(summary)
	}
	require.NoError(t, run.report.Check(untimed), "bounds independent of the wall clock")
	requireClientBracketsRouter(t, run)
	random := randomPickerReport(t, run)
	require.Less(t, random.Agreement(), run.report.Agreement(), "a random picker agrees less than the load picker")
	t.Skipf("%s\nthe machine was too busy for the timing bounds (timers more than %v late at p99 in every attempt); "+
		"the bounds independent of the wall clock held", summary, maxTimerLateness)
}

// assertAgreement asserts what a run within the tolerances shows, and that
// the comparison notices a simulator that is wrong.
func assertAgreement(t *testing.T, run agreedRun) {
	t.Helper()
	require.Equal(t, 60, run.report.Requests)
	requireClientBracketsRouter(t, run)
	rd, err := recorder.Open(run.path)
	require.NoError(t, err)
	defer rd.Close()
	// Engines twice as fast: the TTFT distribution moves away.
	fast, err := Resimulate(run.path, run.live.RunID, SimOptions{Version: "test", SpeedupRatio: 2, Profile: run.profile})
	require.NoError(t, err)
	bad, err := Compare(rd, run.live.RunID, fast)
	require.NoError(t, err)
	t.Logf("engines at speedup 2:\n%s", bad)
	require.Error(t, bad.Check(DefaultTolerances))
	require.Greater(t, bad.TTFTKS, DefaultTolerances.MaxKS)
	// Another picker: the pins no longer match.
	bad = randomPickerReport(t, run)
	require.Error(t, bad.Check(DefaultTolerances))
	require.Less(t, bad.Agreement(), DefaultTolerances.MinAgreement)
}

// requireClientBracketsRouter: the recorded TTFT runs from the router's
// receipt to its first byte out; the client's brackets it.
func requireClientBracketsRouter(t *testing.T, run agreedRun) {
	t.Helper()
	client := slices.Clone(run.live.ClientTTFT)
	slices.Sort(client)
	clientP50 := percentile(client, 50)
	t.Logf("client-side TTFT p50 %.1f ms", float64(clientP50)/1e6)
	require.GreaterOrEqual(t, clientP50, run.report.Live.TTFTP50)
}

// randomPickerReport compares the live run with its re-simulation under
// the random picker.
func randomPickerReport(t *testing.T, run agreedRun) *Report {
	t.Helper()
	rd, err := recorder.Open(run.path)
	require.NoError(t, err)
	defer rd.Close()
	random, err := Resimulate(run.path, run.live.RunID, SimOptions{Version: "test", Picker: picker.NameRandom, Profile: run.profile})
	require.NoError(t, err)
	bad, err := Compare(rd, run.live.RunID, random)
	require.NoError(t, err)
	t.Logf("re-simulated under the random picker:\n%s", bad)
	return bad
}

// The comparison itself, without the live stack: a simulated run
// re-simulated on its own scenario and network reproduces itself exactly,
// so everything compares equal; at another engine speed it does not.
func TestASimulatedRunReSimulatesToItself(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(`
seed: 3
fleet:
  - {role: prefill, count: 2, block_size: 16, total_kv_blocks: 8192}
  - {role: decode, count: 2, block_size: 16, total_kv_blocks: 8192}
workload:
  poisson: {rate: 8, count: 40, prompt: {min: 64, max: 2048}, output: {min: 8, max: 48}}
`))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sim.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Version: "test",
		Picker: sc.Picker, Start: time.Now()}, recorder.Options{Block: true})
	require.NoError(t, err)
	r, err := sim.New(sc, sim.Options{Record: w})
	require.NoError(t, err)
	_, err = r.Execute()
	require.NoError(t, err)
	_, err = w.Close()
	require.NoError(t, err)

	again, err := Resimulate(path, w.RunID(), SimOptions{Network: sc.Network, Version: "test"})
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := Compare(rd, w.RunID(), again)
	require.NoError(t, err)
	t.Logf("%s", rep)
	require.NoError(t, rep.Check(DefaultTolerances))
	require.Equal(t, 40, rep.Compared)
	require.Equal(t, rep.Compared, rep.Agree)
	require.Zero(t, rep.TTFTKS)
	require.Zero(t, rep.TTFTPaired)
	require.Equal(t, rep.Live.TTFTP90, rep.Sim.TTFTP90)
	require.Equal(t, rep.Live.E2EP50, rep.Sim.E2EP50)

	slow, err := Resimulate(path, w.RunID(), SimOptions{Network: sc.Network, SpeedupRatio: 0.5, Version: "test"})
	require.NoError(t, err)
	rep, err = Compare(rd, w.RunID(), slow)
	require.NoError(t, err)
	err = rep.Check(DefaultTolerances)
	require.Error(t, err)
	require.Contains(t, err.Error(), "TTFT p50")
	require.Contains(t, err.Error(), "KS distance")
	require.Greater(t, rep.Sim.TTFTP50, rep.Live.TTFTP50)
}

func TestKS(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	require.Zero(t, KS(ms(5, 1, 3), ms(1, 3, 5)), "the same sample, in any order")
	require.Equal(t, 1.0, KS(ms(1, 2, 3), ms(4, 5)), "disjoint samples")
	require.Equal(t, 0.5, KS(ms(1, 2, 3, 4), ms(3, 4, 5, 6)))
	// Ties step both CDFs at once: F_a(2) = 1, F_b(2) = 1/2.
	require.Equal(t, 0.5, KS(ms(2, 2), ms(2, 7)))
	require.InDelta(t, 2.0/3, KS(ms(1, 1, 1), ms(1, 9, 9)), 1e-12)
	require.Zero(t, KS(nil, ms(1)))
	require.InDelta(t, 0.2480, KSCritical(60, 60, 0.05), 1e-3)
	require.InDelta(t, 0.2977, KSCritical(60, 60, 0.01), 1e-3)
}

// A prompt's size is the same to the router's estimator and to the
// frontend emulation, which sizes the prompt the live engine computes.
func TestPromptSizesAgree(t *testing.T) {
	for _, n := range []int{1, 3, 4, 5, 6, 64, 100, 511, 2048} {
		text, tokens := Prompt(n, uint64(n))
		require.Equal(t, max(4, (n+2)/4*4), tokens, "the nearest multiple of four, at least four")
		require.Equal(t, uint64(tokens), picker.Heuristic{}.Estimate(text+"\n"), "the router's estimate of a chat message")
		words := len(strings.Fields(text))
		require.Equal(t, tokens, max(words*4/3, 1), "the frontend emulation's estimate")
		again, _ := Prompt(n, uint64(n))
		require.Equal(t, text, again)
		other, _ := Prompt(n, uint64(n)+1000)
		require.NotEqual(t, text, other)
	}
}

func exactReplay() *replay.Report { return &replay.Report{Selections: 10, Reproduced: 10} }

func TestCheckReportsEveryBreach(t *testing.T) {
	good := func() *Report {
		return &Report{Requests: 10, Compared: 10, Agree: 10, DecodeAgree: 10, PrefillAgree: 10,
			Live:   Latencies{OK: 10, TTFTP50: 80 * time.Millisecond, TTFTP90: 100 * time.Millisecond},
			Sim:    Latencies{OK: 10, TTFTP50: 81 * time.Millisecond, TTFTP90: 99 * time.Millisecond},
			TTFTKS: 0.1, Replay: exactReplay()}
	}
	require.NoError(t, good().Check(DefaultTolerances))

	cases := map[string]func(r *Report){
		"selection agreement":     func(r *Report) { r.Agree, r.DecodeAgree = 5, 5 },
		"prefill pin agreement":   func(r *Report) { r.Agree, r.PrefillAgree = 8, 8 },
		"TTFT p50":                func(r *Report) { r.Sim.TTFTP50 = 100 * time.Millisecond },
		"TTFT p90":                func(r *Report) { r.Sim.TTFTP90 = 160 * time.Millisecond },
		"KS distance":             func(r *Report) { r.TTFTKS = 0.9 },
		"not pinned":              func(r *Report) { r.Compared = 9 },
		"ended ok":                func(r *Report) { r.Sim.OK, r.Sim.NotOK = 9, map[string]int{recorder.StatusFailed: 1} },
		"replay is not exact":     func(r *Report) { r.Replay.Reproduced-- },
		"TTFT paired difference":  func(r *Report) { r.TTFTPaired = -20 * time.Millisecond },
		"the live run pinned no ": func(r *Report) { *r = Report{Replay: exactReplay()} },
	}
	for want, breach := range cases {
		r := good()
		breach(r)
		err := r.Check(DefaultTolerances)
		require.Error(t, err, want)
		require.Contains(t, err.Error(), want)
	}
	// The percentile bounds are the larger of the absolute and relative ones.
	r := good()
	r.Live.TTFTP50, r.Sim.TTFTP50 = time.Second, time.Second+DefaultTolerances.P50Abs+time.Millisecond
	require.NoError(t, r.Check(DefaultTolerances), "within the relative bound")
}

// A simulated run on a profile names the profile in its recorded
// scenario, so its re-simulation runs on it again and reproduces it.
func TestASimulatedProfileRunReSimulatesToItself(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(`
seed: 4
fleet:
  - {role: prefill, count: 2, engine: {profile: ../../profiles/llama-3.1-8b-h100-tp1.json}}
  - {role: decode, count: 2, engine: {profile: ../../profiles/llama-3.1-8b-h100-tp1.json}}
workload:
  poisson: {rate: 8, count: 40, prompt: {min: 64, max: 2048}, output: {min: 8, max: 48}}
`))
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "sim.db")
	w, err := recorder.Create(path, recorder.Run{Kind: "sim", Scenario: sc.YAML(), Seed: sc.Seed, Version: "test",
		Picker: sc.Picker, Start: time.Now()}, recorder.Options{Block: true})
	require.NoError(t, err)
	r, err := sim.New(sc, sim.Options{Record: w})
	require.NoError(t, err)
	_, err = r.Execute()
	require.NoError(t, err)
	_, err = w.Close()
	require.NoError(t, err)

	again, err := Resimulate(path, w.RunID(), SimOptions{Network: sc.Network, Version: "test"})
	require.NoError(t, err)
	rd, err := recorder.Open(path)
	require.NoError(t, err)
	defer rd.Close()
	rep, err := Compare(rd, w.RunID(), again)
	require.NoError(t, err)
	require.NoError(t, rep.Check(DefaultTolerances))
	require.Equal(t, 40, rep.Agree)
	require.Zero(t, rep.TTFTKS)
	require.Equal(t, rep.Live.E2EP50, rep.Sim.E2EP50)
}
