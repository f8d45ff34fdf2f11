package admin

import (
	"net/http"
	"strconv"
	"time"

	"switchyard/router/discovery"
	"switchyard/router/eventplane"
)

// DynamoStatus is what the workers endpoint reads from discovery.
type DynamoStatus interface {
	Enabled() bool
	Connected() bool
	// Source is etcd, kubernetes or kubernetes_pods.
	Source() string
	// Namespaces are the configured Dynamo namespaces; the first is primary.
	Namespaces() []string
	Snapshot() *discovery.Snapshot
	// Subscriptions lists the running event-plane subscriptions.
	Subscriptions() []eventplane.SubscriptionInfo
}

// WorkersResponse is the body of GET /admin/dynamo/workers. It never carries
// transport addresses, IPs, publisher endpoints or raw cards.
type WorkersResponse struct {
	Enabled           bool               `json:"enabled"`
	Connected         bool               `json:"connected"`
	Source            string             `json:"source,omitempty"`
	Signals           *Signals           `json:"signals,omitempty"`
	Namespace         string             `json:"namespace,omitempty"`
	Namespaces        []string           `json:"namespaces,omitempty"`
	Generation        uint64             `json:"generation"`
	Workers           []WorkerJSON       `json:"workers"`
	LoadPublishers    int                `json:"load_publishers"`
	KVEventPublishers int                `json:"kv_event_publishers"`
	Subscriptions     []SubscriptionJSON `json:"subscriptions,omitempty"`
	// BrokerCoverage is present under dynamo.load.transport broker: per
	// configured namespace, the event-bus sessions covering it and the
	// subscriptions waiting for one.
	BrokerCoverage []BrokerCoverageJSON `json:"broker_coverage,omitempty"`
	// ReplicaSync is what replica sync did to the active-sequence
	// account; absent when it is off.
	ReplicaSync *ReplicaSyncJSON `json:"replica_sync,omitempty"`
	// KVSources are the kv_cache_index sources (dynamo.kv.sources)
	// followed through the event bus; absent when none is configured.
	KVSources []KVSourceJSON `json:"kv_sources,omitempty"`
}

// KVSourceJSON is one followed kv_cache_index source.
type KVSourceJSON struct {
	Backend   string `json:"backend"`
	Namespace string `json:"namespace"`
	Connected bool   `json:"connected"`
	// LastEventID is the last SSE id applied (decimal), where a stream
	// resumes; absent before the first event.
	LastEventID string `json:"last_event_id,omitempty"`
	// Workers counts the workers whose ranks the source has fed.
	Workers int `json:"workers"`
}

// KVSourceStatus is read by the workers endpoint when the DynamoStatus
// also implements it.
type KVSourceStatus interface {
	KVSources() []KVSourceJSON
}

// BrokerCoverageJSON is one namespace of broker_coverage.
type BrokerCoverageJSON struct {
	Namespace string `json:"namespace"`
	Sessions  int    `json:"sessions"`
	// PendingSubscriptions counts pending subscriptions per family.
	PendingSubscriptions map[string]int `json:"pending_subscriptions"`
}

// BrokerCoverageStatus is read by the workers endpoint when the
// DynamoStatus also implements it; nil outside the broker transport.
type BrokerCoverageStatus interface {
	BrokerCoverage() []eventplane.NamespaceCoverage
}

// ReplicaSyncStatus is read by the workers endpoint when the DynamoStatus
// also implements it.
type ReplicaSyncStatus interface {
	// ReplicaSync is nil when replica sync is off.
	ReplicaSync() *ReplicaSyncJSON
}

// ReplicaSyncJSON is this replica's replica sync: its id, its transport
// and the routing core's account of its peers (never their addresses).
type ReplicaSyncJSON struct {
	Replica   string `json:"replica"` // hexadecimal
	Transport string `json:"transport"`
	Peers     int    `json:"peers"`    // peers followed now
	Requests  int    `json:"requests"` // peer requests tracked now
	Batches   uint64 `json:"batches"`  // peer batches applied
	Events    uint64 `json:"events"`   // peer events applied
	Gaps      uint64 `json:"gaps"`     // batches peers sent that never arrived
	Expired   uint64 `json:"expired"`  // peer requests let go by the request time rule
	Dropped   uint64 `json:"dropped"`  // peers dropped for silence
	// Refused counts peer events not applied, by reason.
	Refused map[string]uint64 `json:"refused"`
}

// SubscriptionJSON is one running subscription; never its address.
type SubscriptionJSON struct {
	Family      string `json:"family"`
	PublisherID string `json:"publisher_id"`
	Namespace   string `json:"namespace"`
	Component   string `json:"component"`
	State       string `json:"state"`
	Transport   string `json:"transport"`
	// Broker is the id of the broker carrying a broker-transport
	// subscription's stream, absent while none does.
	Broker string `json:"broker,omitempty"`
	// Replay says the publisher advertises a replay socket the router can
	// ask for missed kv-events; ReplayRefused that it advertises one the
	// router refused (the log says why).
	Replay        bool `json:"replay,omitempty"`
	ReplayRefused bool `json:"replay_refused,omitempty"`
	// Parked: the session is idle and parked with the poller, no
	// goroutine reading it until the publisher sends.
	Parked bool `json:"parked,omitempty"`
}

// Signals says what the active source can tell about workers.
type Signals struct {
	Load     bool `json:"load"`
	Capacity bool `json:"capacity"`
}

// WorkerJSON is one worker as operators see it.
type WorkerJSON struct {
	InstanceID            string       `json:"instance_id"`
	Namespace             string       `json:"namespace"`
	WorkerID              string       `json:"worker_id"`
	Role                  string       `json:"role"`
	Model                 string       `json:"model"`
	Component             string       `json:"component"`
	Endpoint              string       `json:"endpoint"`
	DPStartRank           uint32       `json:"dp_start_rank"`
	DPSize                uint32       `json:"dp_size"`
	BlockSize             uint32       `json:"block_size"`
	Capacity              CapacityJSON `json:"capacity"`
	DisaggregatedEndpoint *string      `json:"disaggregated_endpoint"`
	FirstSeen             string       `json:"first_seen"`
	LastUpdated           string       `json:"last_updated"`
}

// CapacityJSON is a card's runtime capacity; null where the card is silent.
type CapacityJSON struct {
	TotalKVBlocks       *uint64 `json:"total_kv_blocks"`
	MaxNumBatchedTokens *uint64 `json:"max_num_batched_tokens"`
	MaxNumSeqs          *uint64 `json:"max_num_seqs"`
	ContextLength       *uint32 `json:"context_length"`
}

// timeFormat is RFC 3339 with a numeric offset (+00:00 rather than Z).
const timeFormat = "2006-01-02T15:04:05-07:00"

// BuildWorkers renders the workers response from the discovery status.
func BuildWorkers(st DynamoStatus) WorkersResponse {
	if !st.Enabled() {
		return WorkersResponse{Enabled: false, Workers: []WorkerJSON{}}
	}
	snap := st.Snapshot()
	resp := WorkersResponse{
		Enabled:           true,
		Connected:         st.Connected(),
		Source:            st.Source(),
		Namespaces:        st.Namespaces(),
		Generation:        snap.Generation,
		Workers:           make([]WorkerJSON, 0, len(snap.Workers)),
		LoadPublishers:    snap.CountPublishers(discovery.TopicLoad),
		KVEventPublishers: snap.CountPublishers(discovery.TopicKVEvents),
	}
	// Pods carry no cards or channels; the other sources carry both.
	full := st.Source() != "kubernetes_pods"
	resp.Signals = &Signals{Load: full, Capacity: full}
	if len(resp.Namespaces) > 0 {
		resp.Namespace = resp.Namespaces[0]
	}
	for _, w := range snap.Workers {
		resp.Workers = append(resp.Workers, workerJSON(w))
	}
	resp.Subscriptions = []SubscriptionJSON{}
	for _, s := range st.Subscriptions() {
		resp.Subscriptions = append(resp.Subscriptions, SubscriptionJSON{
			Family: s.Family, PublisherID: strconv.FormatUint(s.PublisherID, 10), Namespace: s.Namespace,
			Component: s.Component, State: s.State.String(), Transport: s.Transport, Broker: s.Broker,
			Replay: s.Replay, ReplayRefused: s.ReplayRefused, Parked: s.Parked})
	}
	if rs, ok := st.(ReplicaSyncStatus); ok {
		resp.ReplicaSync = rs.ReplicaSync()
	}
	if ks, ok := st.(KVSourceStatus); ok {
		resp.KVSources = ks.KVSources()
	}
	if bc, ok := st.(BrokerCoverageStatus); ok {
		for _, c := range bc.BrokerCoverage() {
			resp.BrokerCoverage = append(resp.BrokerCoverage, BrokerCoverageJSON{Namespace: c.Namespace,
				Sessions: c.Sessions, PendingSubscriptions: c.Pending})
		}
	}
	return resp
}

func workerJSON(w *discovery.Worker) WorkerJSON {
	j := WorkerJSON{
		InstanceID:  strconv.FormatUint(w.InstanceID, 16),
		Namespace:   w.Namespace,
		WorkerID:    strconv.FormatUint(w.InstanceID, 10),
		Role:        w.Role.String(),
		Model:       w.Model,
		Component:   w.Component,
		Endpoint:    w.Endpoint,
		DPStartRank: w.Runtime.DPStartRank,
		DPSize:      w.Runtime.DPSize,
		BlockSize:   w.BlockSize,
		Capacity: CapacityJSON{
			TotalKVBlocks:       w.Runtime.TotalKVBlocks,
			MaxNumBatchedTokens: w.Runtime.MaxNumBatchedTokens,
			MaxNumSeqs:          w.Runtime.MaxNumSeqs,
			ContextLength:       w.Runtime.ContextLength,
		},
		FirstSeen:   formatTime(w.FirstSeen),
		LastUpdated: formatTime(w.LastUpdated),
	}
	if de := w.Runtime.DisaggregatedEndpoint; de != "" {
		j.DisaggregatedEndpoint = &de
	}
	return j
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

// Handler serves the admin routes. Mount it behind Auth.Wrap.
func Handler(dyn DynamoStatus, config func() any) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/dynamo/workers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, BuildWorkers(dyn))
	})
	mux.HandleFunc("GET /admin/config", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, config())
	})
	mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such admin endpoint")
	})
	return mux
}
