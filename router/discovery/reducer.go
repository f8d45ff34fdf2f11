package discovery

import (
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"switchyard/router/events"
)

// Discovery event kinds counted under switchyard_dynamo_discovery_events_total.
// The set is closed: metrics pre-register exactly these.
var EventKinds = []string{
	"put", "delete", "resync", "prune", "reset",
	"malformed", "oversized", "duplicate", "over_capacity", "excluded",
	"restart", "compacted", "watch_ended", "connect_failed",
}

// Worker is one routable (or operator-visible) Dynamo worker. Snapshots
// share Worker values: treat them as immutable.
type Worker struct {
	Namespace  string
	InstanceID uint64
	Role       Role
	Model      string
	Component  string
	Endpoint   string
	BlockSize  uint32
	Runtime    RuntimeConfig
	// HasCard is false until a base card joins the worker.
	HasCard bool
	// Card is the opaque model card, nil when absent or over
	// MaxRetainedCardBytes. Never exported by the admin API.
	Card        json.RawMessage
	FirstSeen   time.Time
	LastUpdated time.Time
}

// WorkerKey is a worker's identity: the namespace of the watched prefix
// plus the instance id read from the record.
type WorkerKey struct {
	Namespace  string
	InstanceID uint64
}

// Key returns the worker's identity.
func (w *Worker) Key() WorkerKey { return WorkerKey{w.Namespace, w.InstanceID} }

type cardKey struct {
	namespace, component, endpoint string
	instanceID                     uint64
}

type publisherKey struct {
	namespace string
	id        uint64
}

// held is one etcd key's current record.
type held struct {
	namespace string
	hash      uint64 // of the raw value, so a resync of an unchanged value is free
	size      int
	rec       parsed
	updatedAt time.Time
}

// Reducer folds discovery events into a fleet view. It is a pure function
// of its event stream: no clock reads, no goroutines, no I/O besides logging
// through the injected logger. One Reducer lives as long as its watcher, so
// first_seen survives resyncs.
type Reducer struct {
	log   *slog.Logger
	count func(kind string)

	keys  map[events.Keyspace]map[string]*held
	dirty bool

	firstSeen map[WorkerKey]time.Time
	// Conflicts and exclusions already logged, so each is logged once while
	// it lasts.
	loggedConflicts  map[string]struct{}
	loggedExclusions map[WorkerKey]struct{}
	loggedReleases   map[WorkerKey]struct{}
	capacityLogged   map[events.Keyspace]bool

	view *View
}

var hashSeed = maphash.MakeSeed()

// NewReducer returns an empty reducer. log and count may be nil.
func NewReducer(log *slog.Logger, count func(kind string)) *Reducer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if count == nil {
		count = func(string) {}
	}
	r := &Reducer{log: log, count: count}
	r.reset()
	r.firstSeen = map[WorkerKey]time.Time{}
	r.loggedConflicts = map[string]struct{}{}
	r.loggedExclusions = map[WorkerKey]struct{}{}
	r.loggedReleases = map[WorkerKey]struct{}{}
	r.capacityLogged = map[events.Keyspace]bool{}
	r.view = &View{}
	return r
}

func (r *Reducer) reset() {
	r.keys = map[events.Keyspace]map[string]*held{
		events.Instances:     {},
		events.Models:        {},
		events.EventChannels: {},
	}
	r.dirty = true
}

// Apply folds one event. Unknown event types are ignored.
func (r *Reducer) Apply(ev events.Event) {
	switch e := ev.(type) {
	case events.DiscoveryPut:
		r.count("put")
		r.put(e.Namespace, e.KV, e.At)
	case events.DiscoveryDelete:
		r.count("delete")
		if m := r.keys[e.Keyspace]; m != nil {
			if _, ok := m[e.Key]; ok {
				delete(m, e.Key)
				r.dirty = true
			}
		}
	case events.DiscoveryResync:
		r.count("resync")
		r.resync(e)
	case events.DiscoveryPrune:
		r.count("prune")
		keep := map[string]bool{}
		for _, ns := range e.Keep {
			keep[ns] = true
		}
		r.dropWhere(func(h *held) bool { return !keep[h.namespace] })
	case events.DiscoveryReset:
		r.count("reset")
		r.reset()
	}
}

func (r *Reducer) dropWhere(drop func(*held) bool) {
	for _, m := range r.keys {
		for k, h := range m {
			if drop(h) {
				delete(m, k)
				r.dirty = true
			}
		}
	}
}

// resync replaces everything held for one namespace. Records whose value is
// unchanged keep their last_updated time.
func (r *Reducer) resync(e events.DiscoveryResync) {
	old := map[events.Keyspace]map[string]*held{}
	for ks, m := range r.keys {
		old[ks] = map[string]*held{}
		for k, h := range m {
			if h.namespace == e.Namespace {
				old[ks][k] = h
				delete(m, k)
			}
		}
	}
	r.dirty = true
	// Key order decides which new keys fit under the ceiling, so the
	// outcome does not depend on the order a store returned them in.
	recs := slices.Clone(e.Records)
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Keyspace != recs[j].Keyspace {
			return recs[i].Keyspace < recs[j].Keyspace
		}
		return recs[i].Key < recs[j].Key
	})
	for _, kv := range recs {
		if prev := old[kv.Keyspace][kv.Key]; prev != nil {
			r.keys[kv.Keyspace][kv.Key] = prev // counts as existing for the ceiling
		}
	}
	for _, kv := range recs {
		r.put(e.Namespace, kv, e.At)
	}
}

func (r *Reducer) put(ns string, kv events.KV, at time.Time) {
	m := r.keys[kv.Keyspace]
	if m == nil {
		return
	}
	prev, exists := m[kv.Key]
	if !exists && len(m) >= MaxRecordsPerKeyspace {
		r.count("over_capacity")
		if !r.capacityLogged[kv.Keyspace] {
			r.capacityLogged[kv.Keyspace] = true
			r.log.Warn("discovery keyspace at capacity; refusing new keys",
				"keyspace", kv.Keyspace.String(), "limit", MaxRecordsPerKeyspace, "key", kv.Key)
		}
		return
	}
	h := maphash.Bytes(hashSeed, kv.Value)
	if exists && prev.hash == h && prev.size == len(kv.Value) && prev.namespace == ns {
		return // idempotent: same value, nothing to redo
	}
	rec, err := parseRecord(ns, kv.Value)
	if err != nil {
		kind := "malformed"
		if err == errOversized {
			kind = "oversized"
		}
		r.count(kind)
		r.log.Warn("skipping discovery record", "reason", kind, "keyspace", kv.Keyspace.String(),
			"key", kv.Key, "bytes", len(kv.Value), "error", err)
		// The store no longer holds the previous value: forget it too.
		if exists {
			delete(m, kv.Key)
			r.dirty = true
		}
		return
	}
	m[kv.Key] = &held{namespace: ns, hash: h, size: len(kv.Value), rec: rec, updatedAt: at}
	r.dirty = true
	if len(m) < MaxRecordsPerKeyspace {
		r.capacityLogged[kv.Keyspace] = false
	}
}

// Len reports how many keys are held in a keyspace.
func (r *Reducer) Len(ks events.Keyspace) int { return len(r.keys[ks]) }

// View materializes the fleet from the held records. It is cheap when
// nothing changed since the last call: the same *View is returned.
func (r *Reducer) View() *View {
	if !r.dirty {
		return r.view
	}
	r.dirty = false
	r.view = r.materialize()
	return r.view
}

// View is the fleet as discovery sees it.
type View struct {
	// Workers, sorted by namespace then instance id.
	Workers []*Worker
	// Publishers, sorted by namespace, topic, then publisher id.
	Publishers []*Publisher
}

func (r *Reducer) materialize() *View {
	conflicts := map[string]struct{}{}

	// 1. Generate endpoints, grouped by worker identity.
	endpoints := map[WorkerKey][]string{}
	for key, h := range r.keys[events.Instances] {
		if ep := h.rec.endpoint; ep != nil {
			wk := WorkerKey{h.namespace, ep.instanceID}
			endpoints[wk] = append(endpoints[wk], key)
		}
	}
	// 2. Base cards, grouped by join key. Legacy cards (no component and no
	// endpoint) join on the instance alone.
	cards := map[cardKey][]string{}
	for key, h := range r.keys[events.Models] {
		c := h.rec.card
		if c == nil || c.lora {
			continue
		}
		ck := cardKey{h.namespace, c.component, c.endpoint, c.instanceID}
		cards[ck] = append(cards[ck], key)
	}
	refusedCards := map[cardKey]bool{}
	for ck, keys := range cards {
		if len(keys) > 1 {
			refusedCards[ck] = true
			r.conflict(conflicts, "card", fmt.Sprintf("%s/%s/%s/%x", ck.namespace, ck.component, ck.endpoint, ck.instanceID), keys)
		}
	}

	workers := make([]*Worker, 0, len(endpoints))
	excluded := map[WorkerKey]struct{}{}
	for wk, keys := range endpoints {
		if len(keys) > 1 {
			r.conflict(conflicts, "generate instance", fmt.Sprintf("%s/%x", wk.Namespace, wk.InstanceID), keys)
			continue
		}
		h := r.keys[events.Instances][keys[0]]
		ep := h.rec.endpoint
		w := &Worker{
			Namespace: wk.Namespace, InstanceID: wk.InstanceID,
			Component: ep.component, Endpoint: ep.endpoint,
			Runtime:     RuntimeConfig{DPSize: 1},
			LastUpdated: h.updatedAt,
		}
		card, cardHeld := r.joinCard(cards, refusedCards, wk, ep)
		role := componentRole(ep.component)
		if card != nil {
			w.HasCard = true
			w.Card = card.raw
			if cardHeld.updatedAt.After(w.LastUpdated) {
				w.LastUpdated = cardHeld.updatedAt
			}
			if t := card.card; t != nil {
				w.Model, w.BlockSize, w.Runtime = t.Model, t.BlockSize, t.Runtime
				claim := t.WorkerType
				switch {
				case role != RoleUnknown && claim != RoleUnknown && claim != role:
					excluded[wk] = struct{}{}
					if _, seen := r.loggedExclusions[wk]; !seen {
						r.count("excluded")
						r.log.Warn("excluding worker: component and card disagree on its role",
							"namespace", wk.Namespace, "instance_id", fmt.Sprintf("%x", wk.InstanceID),
							"component_role", role.String(), "card_role", claim.String())
					}
					continue
				case role == RoleUnknown:
					role = claim
				}
				if t.Release != "" {
					if _, seen := r.loggedReleases[wk]; !seen {
						r.loggedReleases[wk] = struct{}{}
						r.log.Debug("worker release", "namespace", wk.Namespace,
							"instance_id", fmt.Sprintf("%x", wk.InstanceID), "release", t.Release)
					}
				}
			}
		}
		w.Role = role
		if fs, ok := r.firstSeen[wk]; ok {
			w.FirstSeen = fs
		} else {
			// New worker: first seen when its generate record arrived.
			w.FirstSeen = h.updatedAt
		}
		workers = append(workers, w)
	}
	sort.Slice(workers, func(i, j int) bool {
		a, b := workers[i], workers[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.InstanceID < b.InstanceID
	})

	// Remember first_seen for present workers only, so memory follows the fleet.
	firstSeen := make(map[WorkerKey]time.Time, len(workers))
	for _, w := range workers {
		firstSeen[w.Key()] = w.FirstSeen
	}
	r.firstSeen = firstSeen
	r.loggedExclusions = excluded
	for wk := range r.loggedReleases {
		if _, ok := firstSeen[wk]; !ok {
			delete(r.loggedReleases, wk)
		}
	}

	publishers := r.publishers(conflicts)
	r.loggedConflicts = conflicts
	return &View{Workers: workers, Publishers: publishers}
}

// joinCard finds the worker's base card: the scoped card for its component
// and endpoint first, else a legacy card for the instance. A refused
// (duplicated) card leaves the worker without one.
func (r *Reducer) joinCard(cards map[cardKey][]string, refused map[cardKey]bool, wk WorkerKey, ep *endpointRecord) (*cardRecord, *held) {
	for _, ck := range []cardKey{
		{wk.Namespace, ep.component, ep.endpoint, wk.InstanceID},
		{wk.Namespace, "", "", wk.InstanceID},
	} {
		keys, ok := cards[ck]
		if !ok {
			continue
		}
		if refused[ck] {
			return nil, nil
		}
		h := r.keys[events.Models][keys[0]]
		return h.rec.card, h
	}
	return nil, nil
}

func (r *Reducer) publishers(conflicts map[string]struct{}) []*Publisher {
	byID := map[publisherKey][]string{}
	for key, h := range r.keys[events.EventChannels] {
		if p := h.rec.channel; p != nil {
			pk := publisherKey{h.namespace, p.PublisherID}
			byID[pk] = append(byID[pk], key)
		}
	}
	out := make([]*Publisher, 0, len(byID))
	for pk, keys := range byID {
		if len(keys) > 1 {
			r.conflict(conflicts, "publisher", fmt.Sprintf("%s/%x", pk.namespace, pk.id), keys)
			continue
		}
		out = append(out, r.keys[events.EventChannels][keys[0]].rec.channel)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		return a.PublisherID < b.PublisherID
	})
	return out
}

// conflict records a refused identity and logs it the first time this exact
// key set conflicts.
func (r *Reducer) conflict(seen map[string]struct{}, kind, identity string, keys []string) {
	sort.Strings(keys)
	sig := kind + "\x00" + identity + "\x00" + strings.Join(keys, "\x00")
	seen[sig] = struct{}{}
	if _, logged := r.loggedConflicts[sig]; logged {
		return
	}
	r.count("duplicate")
	shown := keys
	if len(shown) > 4 {
		shown = shown[:4]
	}
	r.log.Warn("refusing records that claim one identity", "record", kind, "identity", identity,
		"conflicts", len(keys), "keys", shown)
}
