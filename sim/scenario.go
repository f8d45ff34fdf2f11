package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"switchyard/fakefleet/engine"
	"switchyard/internal/traces"
	"switchyard/router/picker"
	"switchyard/scenario/expect"
	"switchyard/sim/workload"
)

// Scenario is one simulated run: a fleet, the network between it and the
// router, a workload, faults, and the picker. It is read from YAML
// (docs/simulation.md) with unknown fields refused.
type Scenario struct {
	// Version is the scenario format's version: left out or 1
	// (FormatVersion); a file written for a newer format is refused.
	Version   int           `yaml:"version,omitempty"`
	Name      string        `yaml:"name"`
	Seed      uint64        `yaml:"seed"`
	Namespace string        `yaml:"namespace"`
	Model     string        `yaml:"model"`
	Picker    string        `yaml:"picker"`
	Fleet     []WorkerGroup `yaml:"fleet"`
	Network   Network       `yaml:"network"`
	// Discovery chooses how the router discovers the fleet; left out it is
	// etcd, and the rendered scenario is what it was before the field.
	Discovery Discovery `yaml:"discovery,omitempty"`
	Workload  Workload  `yaml:"workload"`
	// Brokers are the in-cluster brokers the router's subscriptions go
	// through under router.load_transport: broker.
	Brokers []Broker     `yaml:"brokers,omitempty"`
	Faults  []Fault      `yaml:"faults"`
	SLO     SLO          `yaml:"slo"`
	Router  RouterParams `yaml:"router"`
	// Until stops the run at this virtual time; 0 runs until the workload
	// is served.
	Until Duration `yaml:"until"`
	// Warmup delays the workload's first arrival, so the router has
	// discovered the fleet before traffic starts (default 100ms).
	Warmup Duration `yaml:"warmup"`
	// Expect is what `switchyard scenario run` checks the run against;
	// the simulator itself ignores it.
	Expect []expect.Expectation `yaml:"expect,omitempty"`

	// dir resolves relative paths (a trace) against the scenario file
	// before the trace directory (tracePath).
	dir string
}

// WorkerGroup is Count identical workers of one role.
type WorkerGroup struct {
	Role                string  `yaml:"role"` // prefill, decode, aggregated
	Count               int     `yaml:"count"`
	DPSize              int     `yaml:"dp_size"`
	BlockSize           int     `yaml:"block_size"`
	TotalKVBlocks       int     `yaml:"total_kv_blocks"`
	MaxNumBatchedTokens int     `yaml:"max_num_batched_tokens"`
	MaxNumSeqs          int     `yaml:"max_num_seqs"`
	ContextLength       int     `yaml:"context_length"`
	SpeedupRatio        float64 `yaml:"speedup_ratio"`
	// KVTransferBandwidth (bytes/s) prices a decode worker's receipt of
	// the prefill worker's KV; 0 is instantaneous.
	KVTransferBandwidth float64 `yaml:"kv_transfer_bandwidth"`
	KVBytesPerBlock     int     `yaml:"kv_bytes_per_block"`
	// LoadFields adds the scheduler fields to each ActiveLoad sample;
	// kv_used_blocks is always sent, as dynamo.vllm does.
	LoadFields []string `yaml:"load_fields"`
	// InstanceIDs, when set, are the workers' instance ids in order (one
	// per worker): a fleet rebuilt from a live recording keeps its ids, so
	// simulated selections compare with the recorded ones.
	InstanceIDs []uint64 `yaml:"instance_ids,omitempty"`
	// Engine chooses the engine's timing: the mocker polynomial (nil, the
	// default) or a profile, which also sets the card values left out.
	Engine *EngineSpec `yaml:"engine,omitempty"`
	// KVReplay makes the group's kv-events publishers offer replay of
	// their recent messages, as vLLM's publisher does with a replay
	// endpoint; nil (the default) offers none.
	KVReplay *KVReplay `yaml:"kv_replay,omitempty"`

	// engineConfig is one rank's engine configuration from the profile.
	engineConfig engine.Config
}

// KVReplay is a worker group's kv-events replay offer: each publisher
// keeps its last Buffer messages (vLLM's buffer_steps) and replays them
// on request.
type KVReplay struct {
	Enabled bool `yaml:"enabled"`
	// Buffer is how many messages a publisher keeps; 0 is
	// DefaultKVReplayBuffer.
	Buffer int `yaml:"buffer,omitempty"`
}

// DefaultKVReplayBuffer is vLLM's default buffer_steps.
const DefaultKVReplayBuffer = 10000

// MaxKVReplayBuffer bounds kv_replay.buffer.
const MaxKVReplayBuffer = 1 << 20

// offers reports whether the group's publishers offer replay.
func (g *WorkerGroup) offersReplay() bool { return g.KVReplay != nil && g.KVReplay.Enabled }

// replayBuffer is how many messages each publisher of the group keeps.
func (g *WorkerGroup) replayBuffer() int {
	if g.KVReplay == nil || g.KVReplay.Buffer == 0 {
		return DefaultKVReplayBuffer
	}
	return g.KVReplay.Buffer
}

// Network shapes how the fleet's state reaches the router.
type Network struct {
	// DiscoveryDelay: a worker's records reach the router this long after
	// they are written (etcd watch latency).
	DiscoveryDelay Duration `yaml:"discovery_delay"`
	// SubscribeDelay: the router's kv_metrics subscription is live this
	// long after it learns of the channel; samples published before are
	// lost, as with ZMQ's slow joiner.
	SubscribeDelay Duration `yaml:"subscribe_delay"`
	// LoadDelay and LoadJitter: a message arrives LoadDelay plus a uniform
	// draw in [0, LoadJitter] after it is published, and never before the
	// message its publisher sent earlier: each subscription is one TCP
	// connection, which delivers in order.
	LoadDelay  Duration `yaml:"load_delay"`
	LoadJitter Duration `yaml:"load_jitter"`
	// LoadLoss is the probability a message is lost on its own (the router
	// sees a sequence gap at the next one). One TCP stream does not lose
	// single messages; this models a lossy relay. LinkFailures models what
	// a connection does.
	LoadLoss float64 `yaml:"load_loss"`
	// KVLoss, when set, replaces LoadLoss for kv-events messages, so a
	// run can lose kv-events without losing load samples (or the
	// reverse).
	KVLoss *float64 `yaml:"kv_loss,omitempty"`
	// LinkFailures breaks the connections between the router and each
	// worker's publishers at random: what the publishers send until the
	// router has reconnected and resubscribed is lost.
	LinkFailures *LinkFailures `yaml:"link_failures,omitempty"`
	// PublishDebounce: a load change is published this long after it
	// happens, coalescing changes in between (Dynamo: 1 ms).
	PublishDebounce Duration `yaml:"publish_debounce"`
	// RequestDelay: a request reaches its worker this long after the pick
	// (frontend and request-plane hops).
	RequestDelay Duration `yaml:"request_delay"`
	// LeaseTTL: a killed worker's records vanish this long after death.
	LeaseTTL Duration `yaml:"lease_ttl"`
}

// LinkFailures are random connection losses between the router and every
// worker's publishers, each worker's drawn independently: a link breaks
// after an exponentially distributed time of mean MeanInterval and stays
// down for Outage (the router's reconnect backoff floor, 500ms, by
// default), then the router reconnects and resubscribes (after
// network.subscribe_delay, the slow joiner), as after a partition heals.
type LinkFailures struct {
	MeanInterval Duration `yaml:"mean_interval"`
	Outage       Duration `yaml:"outage,omitempty"`
}

// DefaultLinkOutage is how long a broken link stays down: the router's
// subscription reconnect backoff starts at 500ms.
const DefaultLinkOutage = 500 * time.Millisecond

// Discovery sources a scenario may choose, named as the router's
// dynamo.discovery.source names them.
const (
	SourceEtcd           = "etcd"
	SourceKubernetes     = "kubernetes"
	SourceKubernetesPods = "kubernetes_pods"
)

// DefaultReadinessDelay is how long a killed worker's Pod stays ready under
// the Kubernetes sources: the container's exit is noticed by the kubelet's
// pod lifecycle relist, every second, which turns the Pod's Ready condition
// (and so its EndpointSlice endpoint) false.
const DefaultReadinessDelay = time.Second

// Discovery is the discovery shape: what the workers write and which of the
// router's sources reads it.
type Discovery struct {
	// Source is etcd (the default: records under leases), kubernetes
	// (DynamoWorkerMetadata joined with EndpointSlice readiness) or
	// kubernetes_pods (labelled Pods alone: no cards' capacity, no event
	// channels, so picking rotates round-robin).
	Source string `yaml:"source,omitempty"`
	// ReadinessDelay (Kubernetes sources only): a killed worker's Pod turns
	// not ready this long after death; Kubernetes has no lease TTL.
	ReadinessDelay Duration `yaml:"readiness_delay,omitempty"`
}

// Kubernetes reports whether the workers are discovered through one of the
// Kubernetes sources.
func (d Discovery) Kubernetes() bool {
	return d.Source == SourceKubernetes || d.Source == SourceKubernetesPods
}

// Workload names exactly one generator.
type Workload struct {
	Poisson      *PoissonSpec  `yaml:"poisson"`
	Bursty       *BurstySpec   `yaml:"bursty"`
	SharedPrefix *PrefixSpec   `yaml:"shared_prefix"`
	Sessions     *SessionsSpec `yaml:"sessions"`
	Trace        *TraceSpec    `yaml:"trace"`
}

// Range is a length drawn uniformly in [min, max].
type Range struct {
	Min int `yaml:"min"`
	Max int `yaml:"max"`
}

func (r Range) w() workload.Range { return workload.Range{Min: r.Min, Max: r.Max} }

// PoissonSpec is workload.PoissonConfig in YAML.
type PoissonSpec struct {
	Rate   float64 `yaml:"rate"`
	Count  int     `yaml:"count"`
	Prompt Range   `yaml:"prompt"`
	Output Range   `yaml:"output"`
}

// BurstySpec is workload.BurstyConfig in YAML.
type BurstySpec struct {
	Rate   float64  `yaml:"rate"`
	On     Duration `yaml:"on"`
	Off    Duration `yaml:"off"`
	Count  int      `yaml:"count"`
	Prompt Range    `yaml:"prompt"`
	Output Range    `yaml:"output"`
}

// PrefixSpec is workload.SharedPrefixConfig in YAML.
type PrefixSpec struct {
	Groups         int     `yaml:"groups"`
	UsersPerGroup  int     `yaml:"users_per_group"`
	SystemTokens   int     `yaml:"system_tokens"`
	QuestionTokens int     `yaml:"question_tokens"`
	Output         Range   `yaml:"output"`
	Rate           float64 `yaml:"rate"`
	Count          int     `yaml:"count"`
}

// SessionsSpec is workload.SessionConfig in YAML.
type SessionsSpec struct {
	Sessions int      `yaml:"sessions"`
	Turns    int      `yaml:"turns"`
	Rate     float64  `yaml:"rate"`
	ThinkMin Duration `yaml:"think_min"`
	ThinkMax Duration `yaml:"think_max"`
	Message  Range    `yaml:"message"`
	Output   Range    `yaml:"output"`
}

// TraceSpec replays a Mooncake JSONL trace.
type TraceSpec struct {
	Path    string  `yaml:"path"`
	Speedup float64 `yaml:"speedup"`
	// Limit stops after this many requests; 0 replays the whole trace.
	Limit int `yaml:"limit"`
}

// Fault is one injected failure.
type Fault struct {
	At Duration `yaml:"at"`
	// Worker indexes the fleet in declaration order (groups expanded).
	Worker int       `yaml:"worker"`
	Kind   FaultKind `yaml:"kind"`
	// Broker names the broker (brokers[].id) of a broker fault.
	Broker string `yaml:"broker,omitempty"`
	// Factor multiplies decode step times for slow (default 2).
	Factor float64 `yaml:"factor,omitempty"`
	// Duration is how long etcd_restart's outage lasts (default
	// DefaultEtcdOutage) and how long after lease_expiry the worker
	// registers again under a new lease (0: never).
	Duration Duration `yaml:"duration,omitempty"`
	// Delay is what degrade adds to every message between the router and
	// the worker's publishers, and shim_slow to every request's hop.
	Delay Duration `yaml:"delay,omitempty"`
	// Loss is the probability degrade loses each of those messages, in
	// [0, 1).
	Loss float64 `yaml:"loss,omitempty"`
	// Router holds the settings a reload changes; what it leaves out
	// stays as it was.
	Router *ReloadParams `yaml:"router,omitempty"`
	// Count is how many kv-events messages drop loses (default 1, at most
	// MaxDropCount).
	Count int `yaml:"count,omitempty"`

	// workerSet: the YAML named a worker, which a fleet-wide fault refuses
	// (worker: 0 cannot be told from no worker otherwise).
	workerSet bool
}

// plainFault is Fault without its YAML methods.
type plainFault Fault

// UnmarshalYAML decodes a fault (strictly, with the caller's decoder) and
// notes whether it named a worker.
func (f *Fault) UnmarshalYAML(unmarshal func(any) error) error {
	if err := unmarshal((*plainFault)(f)); err != nil {
		return err
	}
	var keys map[string]any
	if err := unmarshal(&keys); err == nil {
		_, f.workerSet = keys["worker"]
	}
	return nil
}

// MarshalYAML renders a fault; a fleet-wide one without its worker, so
// the rendered scenario parses again.
func (f Fault) MarshalYAML() (any, error) {
	var n yaml.Node
	if err := n.Encode(plainFault(f)); err != nil {
		return nil, err
	}
	if f.Kind.FleetWide() && n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "worker" {
				n.Content = append(n.Content[:i], n.Content[i+2:]...)
				break
			}
		}
	}
	return &n, nil
}

// DefaultEtcdOutage is how long an etcd_restart keeps etcd away when the
// fault names no duration.
const DefaultEtcdOutage = 2 * time.Second

// ReloadParams are the routing settings a reload fault changes, as a
// changed configuration file would; each left out keeps its value.
type ReloadParams struct {
	Picker       string    `yaml:"picker,omitempty"`
	MaxStaleness *Duration `yaml:"max_staleness,omitempty"`
	KV           *KVReload `yaml:"kv,omitempty"`
}

// KVReload is a partial router.kv: the fields set replace those in force.
type KVReload struct {
	OverlapScoreCredit        *float64      `yaml:"overlap_score_credit,omitempty"`
	PrefillLoadScale          *float64      `yaml:"prefill_load_scale,omitempty"`
	RouterTemperature         *float64      `yaml:"router_temperature,omitempty"`
	UseKVEvents               *bool         `yaml:"use_kv_events,omitempty"`
	PredictedBlockTTL         *Duration     `yaml:"predicted_block_ttl,omitempty"`
	ConditionalDisaggregation *DisaggReload `yaml:"conditional_disaggregation,omitempty"`
	TrackActiveBlocks         *bool         `yaml:"track_active_blocks,omitempty"`
	TrackPrefillTokens        *bool         `yaml:"track_prefill_tokens,omitempty"`
	TrackOutputBlocks         *bool         `yaml:"track_output_blocks,omitempty"`
	ExpectedOutputTokens      *int          `yaml:"expected_output_tokens,omitempty"`
	DecodeActiveRequestWeight *float64      `yaml:"decode_active_request_weight,omitempty"`
	OverlapScoreCreditDecay   *float64      `yaml:"overlap_score_credit_decay,omitempty"`
}

// DisaggReload is a partial router.kv.conditional_disaggregation.
type DisaggReload struct {
	Enabled             *bool    `yaml:"enabled,omitempty"`
	DecodeBusyThreshold *float64 `yaml:"decode_busy_threshold,omitempty"`
}

// Over is base with the fields k sets replaced.
func (k *KVReload) Over(base KVParams) KVParams {
	if k == nil {
		return base
	}
	set := func(dst *float64, v *float64) {
		if v != nil {
			*dst = *v
		}
	}
	setB := func(dst *bool, v *bool) {
		if v != nil {
			*dst = *v
		}
	}
	if k.OverlapScoreCredit != nil {
		v := *k.OverlapScoreCredit
		base.OverlapScoreCredit = &v
	}
	if k.PrefillLoadScale != nil {
		v := *k.PrefillLoadScale
		base.PrefillLoadScale = &v
	}
	set(&base.RouterTemperature, k.RouterTemperature)
	if k.UseKVEvents != nil {
		v := *k.UseKVEvents
		base.UseKVEvents = &v
	}
	if k.PredictedBlockTTL != nil {
		base.PredictedBlockTTL = *k.PredictedBlockTTL
	}
	if d := k.ConditionalDisaggregation; d != nil {
		setB(&base.ConditionalDisaggregation.Enabled, d.Enabled)
		if d.DecodeBusyThreshold != nil {
			v := *d.DecodeBusyThreshold
			base.ConditionalDisaggregation.DecodeBusyThreshold = &v
		}
	}
	setB(&base.TrackActiveBlocks, k.TrackActiveBlocks)
	setB(&base.TrackPrefillTokens, k.TrackPrefillTokens)
	setB(&base.TrackOutputBlocks, k.TrackOutputBlocks)
	if k.ExpectedOutputTokens != nil {
		base.ExpectedOutputTokens = *k.ExpectedOutputTokens
	}
	set(&base.DecodeActiveRequestWeight, k.DecodeActiveRequestWeight)
	set(&base.OverlapScoreCreditDecay, k.OverlapScoreCreditDecay)
	return base
}

// FaultKind names a fault.
type FaultKind string

// The faults a scenario may inject.
const (
	FaultKill             FaultKind = "kill"              // the worker dies; its lease lapses after lease_ttl
	FaultStall            FaultKind = "stall"             // engine and publisher freeze
	FaultResume           FaultKind = "resume"            // a stall ends
	FaultRestartPublisher FaultKind = "restart_publisher" // new publisher id and endpoint, records rewritten
	FaultGap              FaultKind = "gap"               // the publisher skips a sequence number
	FaultMalformed        FaultKind = "malformed"         // one undecodable kv_metrics frame
	FaultReset            FaultKind = "reset"             // the engine restarts: cache and requests dropped
	FaultSlow             FaultKind = "slow"              // decode steps take factor times longer
	FaultFail             FaultKind = "fail"              // requests reaching the worker fail (a 5xx)
	FaultRecover          FaultKind = "recover"           // slow and fail end
	FaultMalformedRecord  FaultKind = "malformed_record"  // an undecodable discovery record under the worker's prefix
	FaultPartition        FaultKind = "partition"         // the network between the router and the worker's publishers fails
	FaultHeal             FaultKind = "heal"              // a partition or a degrade ends; the subscriptions reconnect

	FaultLeaseExpiry FaultKind = "lease_expiry" // the worker's lease lapses while it lives; it may register again
	FaultDegrade     FaultKind = "degrade"      // messages from the worker's publishers are delayed and lost
	FaultDrop        FaultKind = "drop"         // the worker's next count kv-events messages are lost on the way

	FaultKillBroker    FaultKind = "kill_broker"    // the broker's session ends, and every stream it carries
	FaultRestartBroker FaultKind = "restart_broker" // a new session of the broker (ending a live one first)
	FaultDrainBroker   FaultKind = "drain_broker"   // nothing new is placed on the broker; its streams run on

	FaultEtcdRestart    FaultKind = "etcd_restart"    // the router's etcd watch breaks for duration, then it relists
	FaultEtcdCompaction FaultKind = "etcd_compaction" // the router's watch revision is compacted: it relists
	FaultShimSlow       FaultKind = "shim_slow"       // every request hop through the direct-mode shim takes delay longer
	FaultShimFail       FaultKind = "shim_fail"       // the shim answers every request with a 5xx
	FaultShimRecover    FaultKind = "shim_recover"    // shim_slow and shim_fail end
	FaultReload         FaultKind = "reload"          // the router's configuration changes (router: settings)
)

var faultKinds = []FaultKind{FaultKill, FaultStall, FaultResume, FaultRestartPublisher, FaultGap, FaultMalformed, FaultReset,
	FaultSlow, FaultFail, FaultRecover, FaultMalformedRecord, FaultPartition, FaultHeal, FaultLeaseExpiry, FaultDegrade,
	FaultDrop, FaultKillBroker, FaultRestartBroker, FaultDrainBroker,
	FaultEtcdRestart, FaultEtcdCompaction, FaultShimSlow, FaultShimFail, FaultShimRecover, FaultReload}

// OfBroker reports whether the fault names a broker rather than a worker.
func (k FaultKind) OfBroker() bool {
	return k == FaultKillBroker || k == FaultRestartBroker || k == FaultDrainBroker
}

// FleetWide reports whether the fault is the router's or its
// surroundings' rather than one worker's or broker's.
func (k FaultKind) FleetWide() bool {
	switch k {
	case FaultEtcdRestart, FaultEtcdCompaction, FaultShimSlow, FaultShimFail, FaultShimRecover, FaultReload:
		return true
	}
	return false
}

// ofEtcd reports whether the fault acts on etcd discovery.
func (k FaultKind) ofEtcd() bool {
	return k == FaultEtcdRestart || k == FaultEtcdCompaction || k == FaultLeaseExpiry
}

// SLO bounds used for goodput.
type SLO struct {
	TTFT Duration `yaml:"ttft"`
	ITL  Duration `yaml:"itl"`
}

// RouterParams are the routing core's settings the simulation exposes.
type RouterParams struct {
	// MaxStaleness is dynamo.load.max_staleness (0 = the store's default).
	MaxStaleness Duration `yaml:"max_staleness"`
	// KV configures the kv picker (dynamo.kv); unset fields take Dynamo's defaults.
	KV KVParams `yaml:"kv"`

	// Replicas runs this many router replicas over the same fleet (0 and
	// 1 are one, the run it always was); each request goes to one of
	// them, round robin in arrival order. Left out, none of the fields
	// below is rendered, so older scenarios render as they did.
	Replicas int `yaml:"replicas,omitempty"`
	// ReplicaSync shares each replica's active-sequence changes with the
	// others (epp.replica_sync): batches of at most 256 events or 1 ms,
	// delivered SyncDelay later, each lost with probability SyncLoss.
	ReplicaSync bool     `yaml:"replica_sync,omitempty"`
	SyncDelay   Duration `yaml:"sync_delay,omitempty"`
	SyncLoss    float64  `yaml:"sync_loss,omitempty"`

	// LoadTransport is dynamo.load.transport: direct (left out) or broker,
	// which puts the scenario's brokers between the fleet and the router.
	LoadTransport string `yaml:"load_transport,omitempty"`
}

// DefaultSyncDelay is how long a replica-sync batch takes to reach a
// peer: one hop inside the cluster, as network.request_delay.
const DefaultSyncDelay = 500 * time.Microsecond

// MaxReplicas bounds a scenario's router replicas: a core follows at most
// core.MaxPeers peers.
const MaxReplicas = 64

// ReplicaCount is the number of router replicas the scenario runs.
func (p RouterParams) ReplicaCount() int { return max(p.Replicas, 1) }

// KVParams mirror dynamo.kv's selection settings.
type KVParams struct {
	OverlapScoreCredit *float64 `yaml:"overlap_score_credit"`
	PrefillLoadScale   *float64 `yaml:"prefill_load_scale"`
	RouterTemperature  float64  `yaml:"router_temperature"`
	// UseKVEvents false scores ranks on cache state predicted from the
	// picks (each block kept PredictedBlockTTL, default 120 s).
	UseKVEvents               *bool    `yaml:"use_kv_events"`
	PredictedBlockTTL         Duration `yaml:"predicted_block_ttl"`
	ConditionalDisaggregation struct {
		Enabled             bool     `yaml:"enabled"`
		DecodeBusyThreshold *float64 `yaml:"decode_busy_threshold"`
	} `yaml:"conditional_disaggregation"`
	// The router-side active-sequence switches (picker.Tracking), off
	// unless set, and the per-request decode weight.
	TrackActiveBlocks         bool    `yaml:"track_active_blocks"`
	TrackPrefillTokens        bool    `yaml:"track_prefill_tokens"`
	TrackOutputBlocks         bool    `yaml:"track_output_blocks"`
	ExpectedOutputTokens      int     `yaml:"expected_output_tokens"`
	DecodeActiveRequestWeight float64 `yaml:"decode_active_request_weight"`
	OverlapScoreCreditDecay   float64 `yaml:"overlap_score_credit_decay"`
}

// Options are the picker options the parameters describe.
func (k KVParams) Options() picker.KVOptions {
	o := picker.DefaultKVOptions()
	if k.OverlapScoreCredit != nil {
		o.OverlapScoreCredit = *k.OverlapScoreCredit
	}
	if k.PrefillLoadScale != nil {
		o.PrefillLoadScale = *k.PrefillLoadScale
	}
	o.Temperature = k.RouterTemperature
	o.ConditionalDisagg = k.ConditionalDisaggregation.Enabled
	o.DecodeBusyThreshold = k.ConditionalDisaggregation.DecodeBusyThreshold
	if k.UseKVEvents != nil && !*k.UseKVEvents {
		o.PredictCache, o.PredictedTTL = true, k.PredictedBlockTTL.Std()
	}
	o.Track = picker.Tracking{ActiveBlocks: k.TrackActiveBlocks, PrefillTokens: k.TrackPrefillTokens,
		OutputBlocks: k.TrackOutputBlocks, ExpectedOutputTokens: k.ExpectedOutputTokens}
	o.DecodeActiveRequestWeight = k.DecodeActiveRequestWeight
	o.OverlapScoreCreditDecay = k.OverlapScoreCreditDecay
	return o
}

// KVParamsOf is the parameters that describe o: Options(KVParamsOf(o))
// is o. A re-simulated live run routes with the live router's settings.
func KVParamsOf(o picker.KVOptions) KVParams {
	k := KVParams{OverlapScoreCredit: &o.OverlapScoreCredit, PrefillLoadScale: &o.PrefillLoadScale,
		RouterTemperature: o.Temperature, TrackActiveBlocks: o.Track.ActiveBlocks, TrackPrefillTokens: o.Track.PrefillTokens,
		TrackOutputBlocks: o.Track.OutputBlocks, ExpectedOutputTokens: o.Track.ExpectedOutputTokens,
		DecodeActiveRequestWeight: o.DecodeActiveRequestWeight, OverlapScoreCreditDecay: o.OverlapScoreCreditDecay}
	k.ConditionalDisaggregation.Enabled = o.ConditionalDisagg
	k.ConditionalDisaggregation.DecodeBusyThreshold = o.DecodeBusyThreshold
	if o.PredictCache {
		off := false
		k.UseKVEvents, k.PredictedBlockTTL = &off, Duration(o.PredictedTTL)
	}
	return k
}

// Duration is a time.Duration written as "250ms", "5s".
type Duration time.Duration

// Std returns the duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalYAML reads a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Set parses a Go duration string (for command-line flags).
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MaxDropCount bounds one drop fault: a replaying publisher keeps its last
// 10,000 messages, so losing more could never be recovered anyway.
const MaxDropCount = 10_000

// FormatVersion is the scenario format this build reads and writes.
const FormatVersion = 1

// MaxWorkers bounds a scenario's fleet.
const MaxWorkers = 4096

// LoadScenario reads and validates a scenario file.
func LoadScenario(path string) (*Scenario, error) { return LoadScenarioWith(path, LoadOptions{}) }

// LoadOptions change a scenario as it is read, before defaults are filled.
type LoadOptions struct {
	// Profile, when set, runs every worker group on this perf.Profile file
	// (a relative path is taken from the working directory): the --profile
	// flag. Card values the file sets still win over the profile's.
	Profile string
}

// LoadScenarioWith is LoadScenario with opts applied.
func LoadScenarioWith(path string, opts LoadOptions) (*Scenario, error) {
	return loadFile(path, opts, true)
}

// loadFile reads a scenario file, applies opts, fills defaults and
// validates it (its workload only when needWorkload).
func loadFile(path string, opts LoadOptions, needWorkload bool) (*Scenario, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sc, err := decodeScenario(raw)
	if err == nil {
		sc.dir = filepath.Dir(path)
		err = sc.prepare(opts, needWorkload)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return sc, nil
}

// prepare applies opts, resolves engine profiles, fills defaults and
// validates.
func (sc *Scenario) prepare(opts LoadOptions, needWorkload bool) error {
	if opts.Profile != "" {
		if err := WithProfile(sc, opts.Profile); err != nil {
			return err
		}
	}
	if errs := sc.resolveEngines(); len(errs) > 0 {
		return errors.Join(errs...)
	}
	sc.defaults()
	return errors.Join(sc.validate(needWorkload)...)
}

// ParseScenario decodes YAML strictly, fills defaults and validates. A
// relative profile path is taken from the working directory.
func ParseScenario(raw []byte) (*Scenario, error) {
	sc, err := decodeScenario(raw)
	if err != nil {
		return nil, err
	}
	if err := sc.prepare(LoadOptions{}, true); err != nil {
		return nil, err
	}
	return sc, nil
}

// decodeScenario decodes YAML strictly: unknown fields are refused.
func decodeScenario(raw []byte) (*Scenario, error) {
	var sc Scenario
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&sc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return &sc, nil
}

// LoadFleet reads a scenario file for its fleet, network, SLOs and router
// settings alone (bench pickers --fleet): the workload may be left out,
// since the caller brings its own. Everything present is still checked.
func LoadFleet(path string) (*Scenario, error) { return LoadFleetWith(path, LoadOptions{}) }

// LoadFleetWith is LoadFleet with opts applied.
func LoadFleetWith(path string, opts LoadOptions) (*Scenario, error) {
	return loadFile(path, opts, false)
}

// ParseFleet is ParseScenario without requiring a workload.
func ParseFleet(raw []byte) (*Scenario, error) {
	sc, err := decodeScenario(raw)
	if err != nil {
		return nil, err
	}
	return Normalize(sc)
}

// Normalize fills a programmatically built scenario's defaults (loading
// the profiles its groups name) and checks everything but its workload,
// which the caller supplies as a Source.
func Normalize(sc *Scenario) (*Scenario, error) {
	return sc, sc.prepare(LoadOptions{}, false)
}

// YAML renders the scenario (with defaults) for the recording.
func (sc *Scenario) YAML() string {
	b, err := yaml.Marshal(sc)
	if err != nil {
		return ""
	}
	return string(b)
}

func (sc *Scenario) defaults() {
	if sc.Namespace == "" {
		sc.Namespace = "dynamo"
	}
	if sc.Model == "" {
		sc.Model = "switchyard/fake-model"
	}
	if sc.Picker == "" {
		sc.Picker = picker.NameLoad
	}
	if sc.Warmup == 0 {
		sc.Warmup = Duration(100 * time.Millisecond)
	}
	n := &sc.Network
	def := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&n.DiscoveryDelay, 5*time.Millisecond)
	def(&n.SubscribeDelay, 2*time.Millisecond)
	def(&n.LoadDelay, 200*time.Microsecond)
	def(&n.PublishDebounce, time.Millisecond)
	def(&n.RequestDelay, 500*time.Microsecond)
	def(&n.LeaseTTL, 10*time.Second)
	if n.LinkFailures != nil {
		def(&n.LinkFailures.Outage, DefaultLinkOutage)
	}
	if sc.Discovery.Kubernetes() {
		def(&sc.Discovery.ReadinessDelay, DefaultReadinessDelay)
	}
	if sc.Router.ReplicaSync {
		def(&sc.Router.SyncDelay, DefaultSyncDelay)
	}
	for i := range sc.Faults {
		if sc.Faults[i].Kind == FaultEtcdRestart {
			def(&sc.Faults[i].Duration, DefaultEtcdOutage)
		}
	}
	for i := range sc.Fleet {
		g := &sc.Fleet[i]
		defInt := func(v *int, d int) {
			if *v == 0 {
				*v = d
			}
		}
		defInt(&g.DPSize, 1)
		defInt(&g.BlockSize, 64)
		defInt(&g.TotalKVBlocks, 16384)
		defInt(&g.MaxNumBatchedTokens, 8192)
		defInt(&g.MaxNumSeqs, 256)
		defInt(&g.ContextLength, 131072)
		defInt(&g.KVBytesPerBlock, 2<<20)
		if g.SpeedupRatio == 0 {
			g.SpeedupRatio = 1
		}
	}
}

// Validate reports every problem at once.
func (sc *Scenario) Validate() error { return errors.Join(sc.validate(true)...) }

func (sc *Scenario) validate(needWorkload bool) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !slices.Contains(picker.Names(), sc.Picker) {
		bad("picker: unknown picker %q (known: %s)", sc.Picker, strings.Join(picker.Names(), ", "))
	}
	if len(sc.Fleet) == 0 {
		bad("fleet: at least one worker group is required")
	}
	total, roles := 0, map[string]int{}
	for i, g := range sc.Fleet {
		p := fmt.Sprintf("fleet[%d]", i)
		switch g.Role {
		case "prefill", "decode", "aggregated":
			roles[g.Role] += g.Count
		default:
			bad("%s.role: must be prefill, decode or aggregated, got %q", p, g.Role)
		}
		if g.Count < 1 {
			bad("%s.count: must be >= 1", p)
		}
		total += max(g.Count, 0)
		for name, v := range map[string]int{"dp_size": g.DPSize, "block_size": g.BlockSize, "total_kv_blocks": g.TotalKVBlocks,
			"max_num_batched_tokens": g.MaxNumBatchedTokens, "max_num_seqs": g.MaxNumSeqs, "context_length": g.ContextLength,
			"kv_bytes_per_block": g.KVBytesPerBlock} {
			if v < 1 {
				bad("%s.%s: must be >= 1, got %d", p, name, v)
			}
		}
		if g.KVReplay != nil && (g.KVReplay.Buffer < 0 || g.KVReplay.Buffer > MaxKVReplayBuffer) {
			bad("%s.kv_replay.buffer: must be between 0 (the default, %d) and %d, got %d", p, DefaultKVReplayBuffer, MaxKVReplayBuffer, g.KVReplay.Buffer)
		}
		if len(g.InstanceIDs) > 0 && len(g.InstanceIDs) != g.Count {
			bad("%s.instance_ids: %d ids for %d workers", p, len(g.InstanceIDs), g.Count)
		}
		if g.DPSize > 64 {
			bad("%s.dp_size: at most 64", p)
		}
		if g.BlockSize > 65536 || g.TotalKVBlocks > 1<<22 {
			bad("%s: block_size at most 65536 and total_kv_blocks at most %d", p, 1<<22)
		}
		if !(g.SpeedupRatio > 0) || math.IsInf(g.SpeedupRatio, 0) {
			bad("%s.speedup_ratio: must be a finite number > 0", p)
		}
		if g.KVTransferBandwidth < 0 || math.IsNaN(g.KVTransferBandwidth) {
			bad("%s.kv_transfer_bandwidth: must be >= 0", p)
		}
		for _, f := range g.LoadFields {
			if f != "active_decode_blocks" && f != "active_prefill_tokens" && f != "kv_used_blocks" {
				bad("%s.load_fields: unknown field %q", p, f)
			}
		}
	}
	if total > MaxWorkers {
		bad("fleet: %d workers, at most %d", total, MaxWorkers)
	}
	if roles["prefill"] > 0 && roles["decode"] == 0 {
		bad("fleet: prefill workers need decode workers beside them")
	}
	n := sc.Network
	for name, d := range map[string]Duration{"discovery_delay": n.DiscoveryDelay, "subscribe_delay": n.SubscribeDelay,
		"load_delay": n.LoadDelay, "load_jitter": n.LoadJitter, "publish_debounce": n.PublishDebounce,
		"request_delay": n.RequestDelay, "lease_ttl": n.LeaseTTL} {
		if d < 0 {
			bad("network.%s: must be >= 0", name)
		}
	}
	if !(n.LoadLoss >= 0 && n.LoadLoss < 1) {
		bad("network.load_loss: must be in [0, 1)")
	}
	if n.KVLoss != nil && !(*n.KVLoss >= 0 && *n.KVLoss < 1) {
		bad("network.kv_loss: must be in [0, 1)")
	}
	if lf := n.LinkFailures; lf != nil {
		if lf.MeanInterval < Duration(time.Millisecond) {
			bad("network.link_failures.mean_interval: must be at least 1ms")
		}
		if lf.Outage < 0 {
			bad("network.link_failures.outage: must be >= 0")
		}
	}
	errs = append(errs, sc.validateDiscovery()...)
	kinds := 0
	w := sc.Workload
	for _, set := range []bool{w.Poisson != nil, w.Bursty != nil, w.SharedPrefix != nil, w.Sessions != nil, w.Trace != nil} {
		if set {
			kinds++
		}
	}
	if needWorkload && kinds != 1 {
		bad("workload: exactly one of poisson, bursty, shared_prefix, sessions, trace is required")
	}
	if w.Trace != nil && w.Trace.Path == "" {
		bad("workload.trace.path: required")
	}
	if w.Trace != nil && w.Trace.Limit < 0 {
		bad("workload.trace.limit: must be >= 0")
	}
	errs = append(errs, sc.validateBrokers()...)
	for i, f := range sc.Faults {
		if f.Kind.OfBroker() {
			continue // validateBrokers
		}
		if f.Broker != "" {
			bad("faults[%d].broker: only for kill_broker, restart_broker and drain_broker", i)
		}
		if !f.Kind.FleetWide() && (f.Worker < 0 || f.Worker >= total) {
			bad("faults[%d].worker: %d is not a fleet index (0..%d)", i, f.Worker, total-1)
		}
		known := false
		for _, k := range faultKinds {
			known = known || f.Kind == k
		}
		if !known {
			bad("faults[%d].kind: unknown fault %q", i, f.Kind)
		}
		if f.At < 0 {
			bad("faults[%d].at: must be >= 0", i)
		}
		if f.Factor < 0 || f.Factor > 1000 || math.IsNaN(f.Factor) {
			bad("faults[%d].factor: must be in (0, 1000]", i)
		}
		errs = append(errs, sc.validateFault(i, f)...)
	}
	errs = append(errs, validateKV("router.kv", sc.Router.KV)...)
	if sc.SLO.TTFT < 0 || sc.SLO.ITL < 0 || sc.Until < 0 || sc.Warmup < 0 || sc.Router.MaxStaleness < 0 {
		bad("slo, until and router.max_staleness must be >= 0")
	}
	errs = append(errs, sc.Router.validateReplicas()...)
	if sc.Version < 0 || sc.Version > FormatVersion {
		bad("version: this build reads scenario format versions up to %d, got %d", FormatVersion, sc.Version)
	}
	errs = append(errs, expect.Validate(sc.Expect, total)...)
	return errs
}

// Source builds the scenario's workload.
func (sc *Scenario) Source() (workload.Source, io.Closer, error) { return sc.source(false) }

// source builds the workload; deferTokens leaves a trace's prompts
// unsynthesized (workload.TraceConfig.DeferTokens), for a run.
func (sc *Scenario) source(deferTokens bool) (workload.Source, io.Closer, error) {
	w := sc.Workload
	switch {
	case w.Poisson != nil:
		p := w.Poisson
		s, err := workload.NewPoisson(workload.PoissonConfig{Rate: p.Rate, Count: p.Count, Prompt: p.Prompt.w(), Output: p.Output.w()}, sc.Seed)
		return s, nil, err
	case w.Bursty != nil:
		b := w.Bursty
		s, err := workload.NewBursty(workload.BurstyConfig{Rate: b.Rate, On: b.On.Std(), Off: b.Off.Std(), Count: b.Count,
			Prompt: b.Prompt.w(), Output: b.Output.w()}, sc.Seed)
		return s, nil, err
	case w.SharedPrefix != nil:
		p := w.SharedPrefix
		s, err := workload.NewSharedPrefix(workload.SharedPrefixConfig{Groups: p.Groups, UsersPerGroup: p.UsersPerGroup,
			SystemTokens: p.SystemTokens, QuestionTokens: p.QuestionTokens, Output: p.Output.w(), Rate: p.Rate, Count: p.Count}, sc.Seed)
		return s, nil, err
	case w.Sessions != nil:
		p := w.Sessions
		s, err := workload.NewSessions(workload.SessionConfig{Sessions: p.Sessions, Turns: p.Turns, Rate: p.Rate,
			Think: workload.DurationRange{Min: p.ThinkMin.Std(), Max: p.ThinkMax.Std()}, Message: p.Message.w(), Output: p.Output.w()}, sc.Seed)
		return s, nil, err
	case w.Trace != nil:
		path, err := sc.tracePath()
		if err != nil {
			return nil, nil, err
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("workload.trace: %w", err)
		}
		t, err := workload.NewTrace(f, workload.TraceConfig{Speedup: w.Trace.Speedup, DeferTokens: deferTokens})
		if err != nil {
			f.Close()
			return nil, nil, err
		}
		var src workload.Source = t
		if w.Trace.Limit > 0 {
			src = &limited{src: t, left: w.Trace.Limit}
		}
		return &traceSource{Source: src, t: t}, f, nil
	}
	return nil, nil, errors.New("workload: none configured")
}

// traceSource surfaces a trace's read error once it ends.
type traceSource struct {
	workload.Source
	t *workload.Trace
}

// Err is the trace's read or parse error, if it ended on one.
func (s *traceSource) Err() error { return s.t.Err() }

type limited struct {
	src  workload.Source
	left int
}

func (l *limited) Next() (workload.Request, bool) {
	if l.left <= 0 {
		return workload.Request{}, false
	}
	l.left--
	return l.src.Next()
}

// ExpectedRequests is how many requests the workload will produce (for
// progress bars); a trace is counted by its lines.
func (sc *Scenario) ExpectedRequests() int {
	w := sc.Workload
	switch {
	case w.Poisson != nil:
		return w.Poisson.Count
	case w.Bursty != nil:
		return w.Bursty.Count
	case w.SharedPrefix != nil:
		return w.SharedPrefix.Count
	case w.Sessions != nil:
		return w.Sessions.Sessions * w.Sessions.Turns
	case w.Trace != nil:
		path, err := sc.tracePath()
		if err != nil {
			return 0
		}
		n, err := countLines(path)
		if err != nil {
			return 0
		}
		if w.Trace.Limit > 0 {
			n = min(n, w.Trace.Limit)
		}
		return n
	}
	return 0
}

// tracePath finds the trace file. An absolute path is taken as written; a
// relative one from the scenario file's directory or, when it is not
// there, from the trace directory ($SWITCHYARD_TRACE_DIR, internal/traces),
// where the traces that cannot ship with the project live. So
// "path: mooncake_conversation_trace.jsonl" works from any clone that has
// the trace directory, and paths written against the scenario file still do.
func (sc *Scenario) tracePath() (string, error) {
	path := sc.Workload.Trace.Path
	if filepath.IsAbs(path) {
		return path, nil
	}
	beside := filepath.Join(sc.dir, path)
	if _, err := os.Stat(beside); err == nil {
		return beside, nil
	}
	if found, err := traces.Find(path); err == nil {
		return found, nil
	}
	return "", fmt.Errorf("workload.trace.path: %s is neither at %s nor at %s. %s",
		path, beside, traces.Path(path), traces.Hint(path))
}

// countLines counts a file's lines (a last line without its newline
// included) reading it in blocks, not whole.
func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	n, last := 0, byte('\n')
	for {
		m, err := f.Read(buf)
		if m > 0 {
			n += bytes.Count(buf[:m], []byte{'\n'})
			last = buf[m-1]
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		n++
	}
	return n, nil
}

// validateDiscovery checks the discovery shape and what it rules out
// elsewhere in the scenario.
func (sc *Scenario) validateDiscovery() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	d := sc.Discovery
	switch d.Source {
	case "", SourceEtcd, SourceKubernetes, SourceKubernetesPods:
	default:
		bad("discovery.source: must be etcd, kubernetes or kubernetes_pods, got %q", d.Source)
	}
	if d.ReadinessDelay < 0 {
		bad("discovery.readiness_delay: must be >= 0")
	}
	if !d.Kubernetes() {
		if d.ReadinessDelay != 0 {
			bad("discovery.readiness_delay: only under the kubernetes sources (etcd records leave after network.lease_ttl)")
		}
		return errs
	}
	for i, g := range sc.Fleet {
		if len(g.InstanceIDs) > 0 {
			bad("fleet[%d].instance_ids: not allowed under discovery.source %s: a worker's instance id is the hash of its Pod name", i, d.Source)
		}
	}
	if d.Source == SourceKubernetesPods {
		for i, f := range sc.Faults {
			if f.Kind == FaultMalformedRecord {
				bad("faults[%d].kind: malformed_record needs discovery records, and discovery.source kubernetes_pods reads Pods alone", i)
			}
		}
	}
	return errs
}

// validateReplicas checks the router replicas' settings.
func (p RouterParams) validateReplicas() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if p.Replicas < 0 || p.Replicas > MaxReplicas {
		bad("router.replicas: must be in 1..%d, got %d", MaxReplicas, p.Replicas)
	}
	if p.ReplicaSync && p.Replicas < 2 {
		bad("router.replica_sync: needs router.replicas >= 2")
	}
	if !p.ReplicaSync && (p.SyncDelay != 0 || p.SyncLoss != 0) {
		bad("router: sync_delay and sync_loss apply only with replica_sync: true")
	}
	if p.SyncDelay < 0 {
		bad("router.sync_delay: must be >= 0")
	}
	if !(p.SyncLoss >= 0 && p.SyncLoss < 1) {
		bad("router.sync_loss: must be in [0, 1)")
	}
	return errs
}

// MaxBrokers bounds a scenario's brokers; MaxBrokerNamespaces the
// namespaces one broker covers, as a broker's hello may declare them.
const (
	MaxBrokers          = 64
	MaxBrokerNamespaces = 64
)

// validateBrokers checks the load transport, the brokers and the broker
// faults.
func (sc *Scenario) validateBrokers() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	broker := false
	switch sc.Router.LoadTransport {
	case "", TransportDirect:
	case TransportBroker:
		broker = true
		if len(sc.Brokers) == 0 {
			bad("brokers: router.load_transport broker needs at least one broker")
		}
		if sc.Discovery.Source == SourceKubernetesPods {
			bad("router.load_transport: broker needs event channels, and discovery.source kubernetes_pods has none")
		}
	default:
		bad("router.load_transport: must be direct or broker, got %q", sc.Router.LoadTransport)
	}
	if !broker && len(sc.Brokers) > 0 {
		bad("brokers: apply only with router.load_transport: broker")
	}
	if len(sc.Brokers) > MaxBrokers {
		bad("brokers: %d brokers, at most %d", len(sc.Brokers), MaxBrokers)
	}
	ids := map[string]bool{}
	for i, b := range sc.Brokers {
		p := fmt.Sprintf("brokers[%d]", i)
		switch {
		case b.ID == "":
			bad("%s.id: required", p)
		case len(b.ID) > 128:
			bad("%s.id: at most 128 bytes", p)
		case ids[b.ID]:
			bad("%s.id: %q is already a broker's", p, b.ID)
		}
		ids[b.ID] = true
		switch {
		case len(b.Namespaces) == 0:
			bad("%s.namespaces: at least one namespace is required", p)
		case len(b.Namespaces) > MaxBrokerNamespaces:
			bad("%s.namespaces: %d namespaces, at most %d", p, len(b.Namespaces), MaxBrokerNamespaces)
			continue
		}
		for j, ns := range b.Namespaces {
			if ns == "" || len(ns) > 255 {
				bad("%s.namespaces[%d]: must be 1-255 bytes", p, j)
			}
		}
	}
	for i, f := range sc.Faults {
		if !f.Kind.OfBroker() {
			continue
		}
		switch {
		case !broker:
			bad("faults[%d].kind: %s needs router.load_transport: broker", i, f.Kind)
		case f.Broker == "":
			bad("faults[%d].broker: required for %s", i, f.Kind)
		case !ids[f.Broker]:
			bad("faults[%d].broker: %q is not a broker's id", i, f.Broker)
		}
		if f.Worker != 0 || f.Factor != 0 {
			bad("faults[%d]: %s takes broker, not worker or factor", i, f.Kind)
		}
		if f.At < 0 {
			bad("faults[%d].at: must be >= 0", i)
		}
	}
	return errs
}
