package scenario

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"switchyard/router/picker"
)

func TestStallScenarioPassesOnTheRealRouter(t *testing.T) {
	r := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim})
	if r.Error != "" || r.Sim == nil || r.Sim.Error != "" {
		t.Fatalf("run: %+v", r)
	}
	if !r.Sim.Passed() || r.Failed() {
		for _, v := range r.Sim.Verdicts {
			t.Log(v.Message())
		}
		t.Fatal("the real router fails its own scenario")
	}
	if len(r.Sim.Verdicts) != 6 || r.Sim.Served != 300 {
		t.Errorf("verdicts %d, served %d", len(r.Sim.Verdicts), r.Sim.Served)
	}
}

// A router whose picker ignores stalls (the round-robin picker never
// reads load signals) fails the stall expectation, by name.
func TestBrokenRouterFailsTheNamedExpectation(t *testing.T) {
	r := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim, brokenPicker: picker.NameRoundRobin})
	if !r.Failed() {
		t.Fatal("a router that ignores stalls passed the stall scenario")
	}
	var out bytes.Buffer
	Print(&out, r)
	if !strings.Contains(out.String(), `expectation "no picks of worker 1 in [6s, 11s)" FAILED`) {
		t.Errorf("the failure does not name the expectation:\n%s", out.String())
	}
}

func TestSimRunsAreDeterministic(t *testing.T) {
	var outs [2][]byte
	for i := range outs {
		dir := t.TempDir()
		r := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim, ReportDir: dir})
		if r.Error != "" {
			t.Fatal(r.Error)
		}
		res, err := os.ReadFile(filepath.Join(dir, "test-stall", "result.json"))
		if err != nil {
			t.Fatal(err)
		}
		page, err := os.ReadFile(filepath.Join(dir, "test-stall", "index.html"))
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = append(res, page...)
		if _, err := os.Stat(filepath.Join(dir, "test-stall", "sim.db")); err != nil {
			t.Errorf("no recording: %v", err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two runs of one scenario and seed differ")
	}
}

func TestReportDrawsTheFaults(t *testing.T) {
	dir := t.TempDir()
	r := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim, ReportDir: dir})
	if err := WriteIndex(dir, []*Result{r}); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(dir, "test-stall", "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(page)
	// Three charts, each with both faults marked.
	if n := strings.Count(s, `<line class="marker"`); n != 6 {
		t.Errorf("%d fault markers, want 6", n)
	}
	for _, want := range []string{"stall w1", "resume w1", "TTFT of the requests arriving", "Requests in flight per worker", "no picks of worker 1 in [6s, 11s)"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	index, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil || !strings.Contains(string(index), `href="test-stall/index.html"`) {
		t.Errorf("suite index: %v %s", err, index)
	}
}

func TestJUnitCountsEveryExpectation(t *testing.T) {
	good := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim})
	bad := RunFile(context.Background(), "testdata/stall.yaml", Options{Mode: Sim, brokenPicker: picker.NameRoundRobin})
	bad.Name = "broken"
	invalid := RunFile(context.Background(), "testdata/missing.yaml", Options{Mode: Sim})
	var buf bytes.Buffer
	if err := WriteJUnit(&buf, []*Result{good, bad, invalid}); err != nil {
		t.Fatal(err)
	}
	var doc junitSuites
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not XML: %v\n%s", err, buf.String())
	}
	if doc.Tests != 13 || doc.Failures != 2 || doc.Errors != 1 || len(doc.Suites) != 3 {
		t.Fatalf("tests %d failures %d errors %d suites %d", doc.Tests, doc.Failures, doc.Errors, len(doc.Suites))
	}
	var failed []string
	for _, c := range doc.Suites[1].Cases {
		if c.Failure != nil {
			failed = append(failed, c.Failure.Message)
		}
	}
	if len(failed) != 2 || !strings.Contains(failed[0], "no picks of worker 1") {
		t.Errorf("failures: %q", failed)
	}
}

func TestFilesExpandsDirectoriesInOrder(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"b.yaml", "a.yml", "sub/c.yaml", "notes.txt"} {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Files([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "a.yml"), filepath.Join(dir, "b.yaml"), filepath.Join(dir, "sub/c.yaml")}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("files %v, want %v", got, want)
	}
	if _, err := Files([]string{filepath.Join(dir, "sub", "none")}); err == nil {
		t.Error("a missing path was accepted")
	}
}

// Both modes run the same scenario: the simulator, then an embedded
// etcd, the fake fleet and the router on loopback. Their verdicts agree
// and their pick shares are close.
func TestBothModesRunAndAgree(t *testing.T) {
	dir := t.TempDir()
	r := RunFile(context.Background(), "testdata/kill.yaml", Options{Mode: Both, ReportDir: dir})
	var out bytes.Buffer
	Print(&out, r)
	t.Log(out.String())
	if r.Failed() || !r.Sim.Passed() || !r.Live.Passed() {
		t.Fatalf("a mode failed:\n%s", out.String())
	}
	a := r.Agreement
	if a == nil || a.Verdicts != 4 || a.VerdictsAgree != 4 {
		t.Fatalf("agreement %+v", a)
	}
	if a.PickShareDistance > 0.2 || a.LiveServedRatio < 0.9 {
		t.Errorf("the runs disagree: %+v", a)
	}
	// Read from the recording: the load messages and their results too.
	if n := r.Live.evidence.Count("load.applied", 0, time.Hour); n < 10 {
		t.Errorf("the live evidence holds %d applied load messages", n)
	}
	if r.Live.Requests != 200 || len(r.Live.evidence.Requests) != 200 {
		t.Errorf("live sent %d, recorded %d", r.Live.Requests, len(r.Live.evidence.Requests))
	}
	for _, f := range []string{"sim.db", "live.db", "result.json", "index.html"} {
		if _, err := os.Stat(filepath.Join(dir, "live-kill", f)); err != nil {
			t.Error(err)
		}
	}
}

func TestLiveSkipsWhatItCannotReproduce(t *testing.T) {
	src, err := os.ReadFile("testdata/stall.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "partition.yaml")
	body := strings.Replace(string(src), "kind: stall", "kind: partition", 1)
	body = strings.Replace(body, "kind: resume", "kind: heal", 1)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	r := RunFile(context.Background(), p, Options{Mode: Live})
	if r.Live == nil || r.Live.Skipped == "" || !strings.Contains(r.Live.Skipped, "partition") {
		t.Fatalf("live run of a partition: %+v", r.Live)
	}
	if r.Failed() || Count([]*Result{r}).Skipped != 1 {
		t.Error("a skipped run counts as failed")
	}
}
