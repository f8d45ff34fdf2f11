package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"switchyard/router/core"
	"switchyard/router/discovery"
	"switchyard/router/discoverysource/k8ssource"
	"switchyard/router/events"
)

// deleteTap is a textTap that also keeps the discovery deletes the core
// applied.
type deleteTap struct {
	*textTap
	deletes []events.DiscoveryDelete
	puts    []events.DiscoveryPut
}

func (d *deleteTap) Record(out core.Output) {
	switch ev := out.(type) {
	case events.DiscoveryDelete:
		d.deletes = append(d.deletes, ev)
	case events.DiscoveryPut:
		d.puts = append(d.puts, ev)
	}
	d.textTap.Record(out)
}

func runWithTap(t *testing.T, sc *Scenario) (*Run, Summary, *deleteTap) {
	t.Helper()
	tap := &deleteTap{textTap: newTextTap()}
	r, err := New(sc, Options{Record: tap})
	if err != nil {
		t.Fatal(err)
	}
	s, err := r.Execute()
	if err != nil {
		t.Fatal(err)
	}
	return r, s, tap
}

func withSource(src, source string) string {
	if source == "" {
		return src
	}
	return src + "discovery: {source: " + source + "}\n"
}

func rolesOf(snap *discovery.Snapshot) map[discovery.Role]int {
	roles := map[discovery.Role]int{}
	for _, w := range snap.Workers {
		roles[w.Role]++
	}
	return roles
}

const disaggScenario = `
seed: 9
fleet:
  - {role: prefill, count: 2}
  - {role: decode, count: 3, kv_transfer_bandwidth: 2e10}
workload:
  poisson: {rate: 20, count: 200, prompt: {min: 200, max: 1500}, output: {min: 8, max: 48}}
`

// One scenario discovered through etcd and through each Kubernetes source
// builds the same fleet (per-role worker counts) and serves every request;
// the metadata source also carries every worker's publishers, the Pod
// source none. Under the Kubernetes sources each worker's id is the hash
// of its Pod's name.
func TestOneScenarioUnderEveryDiscoveryShape(t *testing.T) {
	base, baseSummary, _ := runWithTap(t, scenario(t, disaggScenario))
	want := rolesOf(base.Core().Snapshot())
	if want[discovery.RolePrefill] != 2 || want[discovery.RoleDecode] != 3 {
		t.Fatalf("etcd roles %v", want)
	}
	for _, source := range []string{SourceEtcd, SourceKubernetes, SourceKubernetesPods} {
		r, s, _ := runWithTap(t, scenario(t, withSource(disaggScenario, source)))
		snap := r.Core().Snapshot()
		if got := rolesOf(snap); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: roles %v, etcd %v", source, got, want)
		}
		if s.Requests != baseSummary.Requests || s.Served != s.Requests || s.Failed != 0 {
			t.Errorf("%s: summary %+v, etcd %+v", source, s, baseSummary)
		}
		publishers := snap.CountPublishers(discovery.TopicLoad)
		switch source {
		case SourceKubernetesPods:
			if publishers != 0 || s.LoadMessages != 0 {
				t.Errorf("%s: %d load publishers, %d load messages; Pods carry no channels", source, publishers, s.LoadMessages)
			}
		default:
			if publishers != 5 || s.LoadMessages == 0 {
				t.Errorf("%s: %d load publishers, %d load messages", source, publishers, s.LoadMessages)
			}
		}
		if source == SourceEtcd {
			continue
		}
		for _, w := range r.workers {
			if want := k8ssource.HashPodName(fmt.Sprintf("%s-%d", w.component, w.index)); w.id != want || w.pod == "" {
				t.Errorf("%s: worker %s has id %x in Pod %q, want the hash %x", source, w.label, w.id, w.pod, want)
			}
			if _, ok := snap.Worker(discovery.WorkerKey{Namespace: "dynamo", InstanceID: w.id}); !ok {
				t.Errorf("%s: worker %s (%x) is not in the registry", source, w.label, w.id)
			}
		}
	}
}

// Pods carry no capacity and no load channel, so the load picker rotates
// round-robin over the workers, as the live Pod source does.
func TestPodSourceRoutesRoundRobin(t *testing.T) {
	_, s, tap := runWithTap(t, scenario(t, withSource(aggScenario, SourceKubernetesPods)))
	if s.Served != 300 || tap.kinds["load"] != 0 || tap.kinds["connected"] != 0 {
		t.Fatalf("summary %+v, kinds %v", s, tap.kinds)
	}
	for i, sel := range tap.selections {
		if sel.Sel.DecodeReason != "round_robin" {
			t.Fatalf("selection %d: reason %q", i, sel.Sel.DecodeReason)
		}
		if i >= 3 && sel.Sel.Decode.WorkerID != tap.selections[i-3].Sel.Decode.WorkerID {
			t.Fatalf("selection %d went to %x, not the worker three picks before (%x)", i, sel.Sel.Decode.WorkerID, tap.selections[i-3].Sel.Decode.WorkerID)
		}
	}
}

// Under the Kubernetes sources a killed worker leaves discovery when its
// Pod turns not ready (readiness_delay + discovery_delay after death), not
// after network.lease_ttl, and is never picked after that.
func TestKilledPodLeavesAfterTheReadinessDelay(t *testing.T) {
	for _, source := range []string{SourceKubernetes, SourceKubernetesPods} {
		sc := scenario(t, `
seed: 5
fleet:
  - {role: aggregated, count: 2}
network: {lease_ttl: 30s}
discovery: {source: `+source+`, readiness_delay: 2s}
workload:
  poisson: {rate: 20, count: 200, prompt: {min: 100, max: 400}, output: {min: 4, max: 16}}
faults:
  - {at: 1s, worker: 0, kind: kill}
`)
		r, s, tap := runWithTap(t, sc)
		dead := r.workers[0]
		gone := Epoch.Add(1*time.Second + 2*time.Second + sc.Network.DiscoveryDelay.Std())
		endpoint := fmt.Sprintf("v1/instances/dynamo/backend/generate/%x", dead.id)
		if source == SourceKubernetesPods {
			endpoint = "v1/instances/dynamo/backend/generate/" + dead.pod
		}
		var at time.Time
		for _, d := range tap.deletes {
			if d.Key == endpoint {
				at = d.At
			}
		}
		if !at.Equal(gone) {
			t.Errorf("%s: the dead worker's endpoint left at %v, want %v (deletes %+v)", source, at.Sub(Epoch), gone.Sub(Epoch), tap.deletes)
		}
		for _, sel := range tap.selections {
			if !sel.At.Before(gone) && sel.Sel.Decode.WorkerID == dead.id {
				t.Fatalf("%s: picked the dead worker at %v, after it left", source, sel.At.Sub(Epoch))
			}
		}
		if workers := r.Core().Snapshot().Workers; len(workers) != 1 || workers[0].InstanceID != r.workers[1].id {
			t.Errorf("%s: registry after the kill %+v", source, workers)
		}
		if s.Failed == 0 || s.Served+s.Failed != 200 {
			t.Errorf("%s: summary %+v", source, s)
		}
	}
}

const kubeFaultScenario = aggScenario + `
network: {load_jitter: 3ms, load_loss: 0.05}
discovery: {source: kubernetes}
faults:
  - {at: 2s, worker: 1, kind: stall}
  - {at: 4s, worker: 1, kind: resume}
  - {at: 3s, worker: 2, kind: restart_publisher}
  - {at: 3500ms, worker: 0, kind: malformed_record}
  - {at: 5s, worker: 0, kind: kill}
`

// The same seed gives the same run under the metadata source, faults and
// all; another seed does not.
func TestKubernetesRunIsDeterministic(t *testing.T) {
	for _, picker := range []string{"load", "kv"} {
		sc := scenario(t, "picker: "+picker+"\n"+kubeFaultScenario)
		_, _, a := runWithTap(t, sc)
		_, _, b := runWithTap(t, sc)
		if a.sum() != b.sum() || a.lines != b.lines {
			t.Fatalf("%s: two runs differ: %d lines %s vs %d lines %s", picker, a.lines, a.sum(), b.lines, b.sum())
		}
		sc.Seed++
		if _, _, c := runWithTap(t, sc); c.sum() == a.sum() {
			t.Fatalf("%s: a different seed produced the identical run", picker)
		}
	}
}

// A publisher restart under the metadata source rewrites the worker's
// DynamoWorkerMetadata: the router learns the new channels and connects to
// the new publisher. A malformed rewrite changes nothing: the source keeps
// the last valid records.
func TestPublisherRestartRewritesTheMetadata(t *testing.T) {
	r, s, tap := runWithTap(t, scenario(t, kubeFaultScenario))
	restart := Epoch.Add(3*time.Second + r.sc.Network.DiscoveryDelay.Std())
	channels := 0
	for _, p := range tap.puts {
		if p.At.Equal(restart) && p.Keyspace == events.EventChannels {
			channels++
		}
		if p.At.Equal(Epoch.Add(3500*time.Millisecond + r.sc.Network.DiscoveryDelay.Std())) {
			t.Errorf("the malformed rewrite put %s", p.Key)
		}
	}
	if channels != 2 || tap.kinds["connected"] != 4 {
		t.Fatalf("channel puts at the restart %d (want the new kv_metrics and kv-events), connected %d (want 3 + 1)", channels, tap.kinds["connected"])
	}
	if s.Requests != 300 || s.Served+s.Failed != 300 {
		t.Fatalf("summary %+v", s)
	}
}

func TestDiscoveryShapeIsValidatedAndRendered(t *testing.T) {
	const fleet = "fleet: [{role: aggregated, count: 2, instance_ids: [1, 2]}]\nworkload: {poisson: {rate: 1, count: 1, prompt: {min: 1, max: 1}, output: {min: 1, max: 1}}}\n"
	for src, want := range map[string]string{
		"discovery: {source: consul}\n":                                                                 "discovery.source: must be etcd, kubernetes or kubernetes_pods",
		"discovery: {readiness_delay: 2s}\n":                                                            "discovery.readiness_delay: only under the kubernetes sources",
		"discovery: {source: kubernetes}\n":                                                             "fleet[0].instance_ids: not allowed under discovery.source kubernetes",
		"discovery: {source: kubernetes, readiness_delay: -1s}\n":                                       "discovery.readiness_delay: must be >= 0",
		"discovery: {source: kubernetes_pods}\nfaults: [{at: 1s, worker: 0, kind: malformed_record}]\n": "faults[0].kind: malformed_record needs discovery records",
	} {
		_, err := ParseScenario([]byte(fleet + src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", src, err, want)
		}
	}
	if y := scenario(t, aggScenario).YAML(); strings.Contains(y, "\ndiscovery:") {
		t.Errorf("an etcd scenario renders a discovery field:\n%s", y)
	}
	if y := scenario(t, withSource(aggScenario, SourceKubernetes)).YAML(); !strings.Contains(y, "discovery:\n    source: kubernetes\n    readiness_delay: 1s\n") {
		t.Errorf("the kubernetes scenario renders:\n%s", y)
	}
}
