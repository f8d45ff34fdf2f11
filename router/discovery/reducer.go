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
	"restart", "compacted", "watch_ended", "connect_failed", "seed_truncated", "refused", "mismatch",
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
	// Host is the request-plane host the Endpoint record names (an IP
	// address or DNS name, "" when none): where hosts that address workers
	// directly send them requests. Internal: never exported by the admin
	// API or metrics.
	Host string
	// Port is the port the Endpoint record names with Host, 0 for none.
	// Dynamo's records name the request plane's port, not the frontend
	// sidecar's, so only the endpoint picker's standalone mode (whose
	// records come from an InferencePool) addresses it.
	Port      uint16
	BlockSize uint32
	Runtime   RuntimeConfig
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

func (k WorkerKey) less(o WorkerKey) bool {
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	return k.InstanceID < o.InstanceID
}

// cardKey is what a base card joins on; a legacy card has empty component
// and endpoint.
type cardKey struct {
	namespace, component, endpoint string
	instanceID                     uint64
}

type publisherKey struct {
	namespace string
	id        uint64
}

// keySet holds the etcd keys claiming one identity; more than one is a
// conflict.
type keySet map[string]struct{}

// held is one etcd key's current record.
type held struct {
	namespace string
	hash      uint64 // of the raw value, so a resync of an unchanged value is free
	size      int
	rec       parsed
	updatedAt time.Time
}

// View is the fleet as discovery sees it.
type View struct {
	// Workers, sorted by namespace then instance id.
	Workers []*Worker
	// Publishers, sorted by namespace, topic, then publisher id.
	Publishers []*Publisher
}

// Reducer folds discovery events into a fleet view. It is a pure function
// of its event stream: no clock reads, no goroutines, no I/O besides logging
// through the injected logger. One Reducer lives as long as its watcher, so
// first_seen survives resyncs.
//
// Records are held by etcd key and indexed by the identity read from their
// value. Each event marks the identities it touched; View recomputes only
// those, so one change in a large fleet costs little.
type Reducer struct {
	log   *slog.Logger
	count func(kind string)

	keys map[events.Keyspace]map[string]*held

	// Identity indexes over held records.
	generate   map[WorkerKey]keySet
	cards      map[cardKey]keySet
	publishers map[publisherKey]keySet

	// Identities touched since the last View.
	dirtyWorkers    map[WorkerKey]struct{}
	dirtyCards      map[cardKey]struct{}
	dirtyPublishers map[publisherKey]struct{}

	workers map[WorkerKey]*Worker
	// published mirrors the view's publishers by identity, so a channel
	// change splices the sorted list instead of rebuilding it.
	published map[publisherKey]*Publisher
	firstSeen map[WorkerKey]time.Time
	view      *View

	// What has been logged, so each conflict, exclusion and release is
	// logged once while it lasts.
	loggedGenerate   map[WorkerKey]string
	loggedCards      map[cardKey]string
	loggedPublishers map[publisherKey]string
	loggedExclusions map[WorkerKey]struct{}
	loggedReleases   map[WorkerKey]struct{}
	capacityLogged   map[events.Keyspace]bool
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
	r := &Reducer{
		log: log, count: count,
		keys: map[events.Keyspace]map[string]*held{
			events.Instances: {}, events.Models: {}, events.EventChannels: {},
		},
		generate:         map[WorkerKey]keySet{},
		cards:            map[cardKey]keySet{},
		publishers:       map[publisherKey]keySet{},
		dirtyWorkers:     map[WorkerKey]struct{}{},
		dirtyCards:       map[cardKey]struct{}{},
		dirtyPublishers:  map[publisherKey]struct{}{},
		workers:          map[WorkerKey]*Worker{},
		published:        map[publisherKey]*Publisher{},
		firstSeen:        map[WorkerKey]time.Time{},
		view:             &View{},
		loggedGenerate:   map[WorkerKey]string{},
		loggedCards:      map[cardKey]string{},
		loggedPublishers: map[publisherKey]string{},
		loggedExclusions: map[WorkerKey]struct{}{},
		loggedReleases:   map[WorkerKey]struct{}{},
		capacityLogged:   map[events.Keyspace]bool{},
	}
	return r
}

// Apply folds one event. Unknown event types are ignored.
func (r *Reducer) Apply(ev events.Event) {
	switch e := ev.(type) {
	case events.DiscoveryPut:
		r.count("put")
		r.put(e.Namespace, e.DiscoveryRecord, e.At)
	case events.DiscoveryDelete:
		r.count("delete")
		r.remove(e.Keyspace, e.Key)
	case events.DiscoveryResync:
		// Sources count completed resyncs themselves (once per pass, not
		// once per namespace).
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
		r.dropWhere(func(*held) bool { return true })
		// Nothing is held: a worker put again is new, as in a fresh
		// reducer, even before the next View drops the old one.
		clear(r.firstSeen)
	}
}

func (r *Reducer) dropWhere(drop func(*held) bool) {
	for ks, m := range r.keys {
		for k, h := range m {
			if drop(h) {
				r.remove(ks, k)
			}
		}
	}
}

// resync makes one namespace hold exactly the given records. Unchanged
// values cost a hash; removed keys are deleted first, so that which new keys
// fit under the ceiling depends on key order, not on the store's order.
func (r *Reducer) resync(e events.DiscoveryResync) {
	incoming := make(map[events.Keyspace]map[string]struct{}, 3)
	for _, kv := range e.Records {
		if incoming[kv.Keyspace] == nil {
			incoming[kv.Keyspace] = map[string]struct{}{}
		}
		incoming[kv.Keyspace][kv.Key] = struct{}{}
	}
	for ks, m := range r.keys {
		for k, h := range m {
			if _, ok := incoming[ks][k]; !ok && h.namespace == e.Namespace {
				r.remove(ks, k)
			}
		}
	}
	recs := e.Records
	if r.mayOverflow(recs) {
		recs = slices.Clone(recs)
		sort.Slice(recs, func(i, j int) bool {
			if recs[i].Keyspace != recs[j].Keyspace {
				return recs[i].Keyspace < recs[j].Keyspace
			}
			return recs[i].Key < recs[j].Key
		})
	}
	for _, kv := range recs {
		r.put(e.Namespace, kv, e.At)
	}
}

func (r *Reducer) mayOverflow(recs []events.DiscoveryRecord) bool {
	fresh := map[events.Keyspace]int{}
	for _, kv := range recs {
		if _, ok := r.keys[kv.Keyspace][kv.Key]; !ok {
			fresh[kv.Keyspace]++
		}
	}
	for ks, n := range fresh {
		if len(r.keys[ks])+n > MaxRecordsPerKeyspace {
			return true
		}
	}
	return false
}

func (r *Reducer) put(ns string, kv events.DiscoveryRecord, at time.Time) {
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
	rec, err := parseRecord(ns, kv.Keyspace, kv.Value)
	if err != nil {
		kind := "malformed"
		if err == errOversized {
			kind = "oversized"
		}
		r.count(kind)
		r.log.Warn("skipping discovery record", "reason", kind, "keyspace", kv.Keyspace.String(),
			"key", kv.Key, "bytes", len(kv.Value), "error", err)
		// The store no longer holds the previous value: forget it too.
		r.remove(kv.Keyspace, kv.Key)
		return
	}
	if exists {
		r.unindex(kv.Key, prev)
	}
	nh := &held{namespace: ns, hash: h, size: len(kv.Value), rec: rec, updatedAt: at}
	m[kv.Key] = nh
	r.index(kv.Key, nh)
	if len(m) < MaxRecordsPerKeyspace {
		r.capacityLogged[kv.Keyspace] = false
	}
}

func (r *Reducer) remove(ks events.Keyspace, key string) {
	if h, ok := r.keys[ks][key]; ok {
		delete(r.keys[ks], key)
		r.unindex(key, h)
	}
}

// index adds a held record to the identity indexes and marks what it touches.
func (r *Reducer) index(key string, h *held) { r.walkIdentities(key, h, true) }

func (r *Reducer) unindex(key string, h *held) { r.walkIdentities(key, h, false) }

func (r *Reducer) walkIdentities(key string, h *held, add bool) {
	switch {
	case h.rec.endpoint != nil:
		wk := WorkerKey{h.namespace, h.rec.endpoint.instanceID}
		setMember(r.generate, wk, key, add)
		r.dirtyWorkers[wk] = struct{}{}
	case h.rec.card != nil && !h.rec.card.lora:
		c := h.rec.card
		ck := cardKey{h.namespace, c.component, c.endpoint, c.instanceID}
		setMember(r.cards, ck, key, add)
		r.dirtyCards[ck] = struct{}{}
		r.dirtyWorkers[WorkerKey{h.namespace, c.instanceID}] = struct{}{}
	case h.rec.channel != nil:
		pk := publisherKey{h.namespace, h.rec.channel.PublisherID}
		setMember(r.publishers, pk, key, add)
		r.dirtyPublishers[pk] = struct{}{}
	}
}

func setMember[K comparable](idx map[K]keySet, id K, key string, add bool) {
	s := idx[id]
	if add {
		if s == nil {
			s = keySet{}
			idx[id] = s
		}
		s[key] = struct{}{}
		return
	}
	delete(s, key)
	if len(s) == 0 {
		delete(idx, id)
	}
}

// Len reports how many keys are held in a keyspace.
func (r *Reducer) Len(ks events.Keyspace) int { return len(r.keys[ks]) }

// View materializes the fleet. Only identities touched since the last call
// are recomputed; with nothing touched the same *View is returned.
func (r *Reducer) View() *View {
	if len(r.dirtyWorkers) == 0 && len(r.dirtyCards) == 0 && len(r.dirtyPublishers) == 0 {
		return r.view
	}
	for ck := range r.dirtyCards {
		checkConflict(r, r.loggedCards, ck, r.cards[ck], "card", func() string {
			return fmt.Sprintf("%s/%s/%s/%x", ck.namespace, ck.component, ck.endpoint, ck.instanceID)
		})
	}
	clear(r.dirtyCards)

	next := &View{Workers: r.view.Workers, Publishers: r.view.Publishers}
	if len(r.dirtyWorkers) > 0 {
		next.Workers = r.updateWorkers()
	}
	if len(r.dirtyPublishers) > 0 {
		next.Publishers = r.updatePublishers()
	}
	r.view = next
	return next
}

// updateWorkers recomputes the dirty workers and splices them into a copy of
// the sorted worker list (published views are never mutated).
func (r *Reducer) updateWorkers() []*Worker {
	dirty := make([]WorkerKey, 0, len(r.dirtyWorkers))
	for wk := range r.dirtyWorkers {
		dirty = append(dirty, wk)
	}
	clear(r.dirtyWorkers)
	sort.Slice(dirty, func(i, j int) bool { return dirty[i].less(dirty[j]) })

	out := make([]*Worker, 0, len(r.view.Workers)+len(dirty))
	old := r.view.Workers
	i := 0
	for _, wk := range dirty {
		for i < len(old) && old[i].Key().less(wk) {
			out = append(out, old[i])
			i++
		}
		if i < len(old) && old[i].Key() == wk {
			i++ // replaced (or removed) below
		}
		w := r.buildWorker(wk)
		if w == nil {
			delete(r.workers, wk)
			delete(r.firstSeen, wk)
			delete(r.loggedReleases, wk)
			continue
		}
		if prev := r.workers[wk]; prev != nil && sameWorker(prev, w) {
			w = prev // keep pointer identity so unchanged workers compare fast
		}
		r.workers[wk] = w
		out = append(out, w)
	}
	return append(out, old[i:]...)
}

// buildWorker materializes one identity, or returns nil when it has no
// single generate record or is excluded.
func (r *Reducer) buildWorker(wk WorkerKey) *Worker {
	keys := r.generate[wk]
	checkConflict(r, r.loggedGenerate, wk, keys, "generate instance", func() string {
		return fmt.Sprintf("%s/%x", wk.Namespace, wk.InstanceID)
	})
	if len(keys) != 1 {
		delete(r.loggedExclusions, wk)
		return nil
	}
	var h *held
	for k := range keys {
		h = r.keys[events.Instances][k]
	}
	ep := h.rec.endpoint
	w := &Worker{
		Namespace: wk.Namespace, InstanceID: wk.InstanceID,
		Component: ep.component, Endpoint: ep.endpoint, Host: ep.host, Port: ep.port,
		Runtime:     RuntimeConfig{DPSize: 1},
		LastUpdated: h.updatedAt,
	}
	role := componentRole(ep.component)
	if card, ch := r.joinCard(wk, ep); card != nil {
		w.HasCard, w.Card = true, card.raw
		if ch.updatedAt.After(w.LastUpdated) {
			w.LastUpdated = ch.updatedAt
		}
		if t := card.card; t != nil {
			w.Model, w.BlockSize, w.Runtime = t.Model, t.BlockSize, t.Runtime
			if claim := t.WorkerType; claim != RoleUnknown {
				if role != RoleUnknown && claim != role {
					r.exclude(wk, role, claim)
					return nil
				}
				role = claim
			}
			r.logRelease(wk, t.Release)
		}
	}
	delete(r.loggedExclusions, wk)
	w.Role = role
	if fs, ok := r.firstSeen[wk]; ok {
		w.FirstSeen = fs
	} else {
		// New worker: first seen when its generate record arrived.
		w.FirstSeen = h.updatedAt
		r.firstSeen[wk] = w.FirstSeen
	}
	return w
}

// joinCard finds the worker's base card: the scoped card for its component
// and endpoint first, else a legacy card for the instance. A refused
// (duplicated) card leaves the worker without one.
func (r *Reducer) joinCard(wk WorkerKey, ep *endpointRecord) (*cardRecord, *held) {
	for _, ck := range [2]cardKey{
		{wk.Namespace, ep.component, ep.endpoint, wk.InstanceID},
		{wk.Namespace, "", "", wk.InstanceID},
	} {
		keys := r.cards[ck]
		switch len(keys) {
		case 0:
			continue
		case 1:
			for k := range keys {
				h := r.keys[events.Models][k]
				return h.rec.card, h
			}
		}
		return nil, nil
	}
	return nil, nil
}

func (r *Reducer) exclude(wk WorkerKey, component, card Role) {
	if _, seen := r.loggedExclusions[wk]; seen {
		return
	}
	r.loggedExclusions[wk] = struct{}{}
	r.count("excluded")
	r.log.Warn("excluding worker: component and card disagree on its role",
		"namespace", wk.Namespace, "instance_id", fmt.Sprintf("%x", wk.InstanceID),
		"component_role", component.String(), "card_role", card.String())
}

func (r *Reducer) logRelease(wk WorkerKey, release string) {
	if release == "" {
		return
	}
	if _, seen := r.loggedReleases[wk]; seen {
		return
	}
	r.loggedReleases[wk] = struct{}{}
	r.log.Debug("worker release", "namespace", wk.Namespace,
		"instance_id", fmt.Sprintf("%x", wk.InstanceID), "release", release)
}

// updatePublishers recomputes the dirty publisher identities and splices
// them into a copy of the sorted publisher list (published views are never
// mutated), as updateWorkers does for workers.
func (r *Reducer) updatePublishers() []*Publisher {
	var gone, added []*Publisher
	for pk := range r.dirtyPublishers {
		p := r.buildPublisher(pk)
		prev := r.published[pk]
		if p == prev {
			continue
		}
		if prev != nil {
			gone = append(gone, prev)
			delete(r.published, pk)
		}
		if p != nil {
			added = append(added, p)
			r.published[pk] = p
		}
	}
	clear(r.dirtyPublishers)
	if len(gone) == 0 && len(added) == 0 {
		return r.view.Publishers
	}
	sort.Slice(gone, func(i, j int) bool { return publisherLess(gone[i], gone[j]) })
	sort.Slice(added, func(i, j int) bool { return publisherLess(added[i], added[j]) })
	return splicePublishers(r.view.Publishers, gone, added)
}

// splicePublishers copies the sorted list old without gone and with added
// (both sorted), finding each change by binary search so that the
// unchanged runs are copied rather than compared. Every gone publisher is
// in old, and no two identities share a sort key.
func splicePublishers(old, gone, added []*Publisher) []*Publisher {
	out := make([]*Publisher, 0, len(old)-len(gone)+len(added))
	next := 0 // old[next:] is still to copy
	at := func(p *Publisher) int {
		return next + sort.Search(len(old)-next, func(i int) bool { return !publisherLess(old[next+i], p) })
	}
	g, a := 0, 0
	for g < len(gone) || a < len(added) {
		if g < len(gone) && (a == len(added) || publisherLess(gone[g], added[a])) {
			i := at(gone[g])
			out = append(out, old[next:i]...)
			next = i + 1 // old[i] is gone[g]
			g++
			continue
		}
		// An identity replaced in place: its new value goes before the old,
		// which the next step drops.
		i := at(added[a])
		out = append(append(out, old[next:i]...), added[a])
		next = i
		a++
	}
	return append(out, old[next:]...)
}

// buildPublisher is the publisher of one identity, or nil when no single
// record claims it.
func (r *Reducer) buildPublisher(pk publisherKey) *Publisher {
	keys := r.publishers[pk]
	checkConflict(r, r.loggedPublishers, pk, keys, "publisher", func() string {
		return fmt.Sprintf("%s/%x", pk.namespace, pk.id)
	})
	if len(keys) != 1 {
		return nil
	}
	for k := range keys {
		return r.keys[events.EventChannels][k].rec.channel
	}
	return nil
}

// publisherLess orders publishers by namespace, topic, then publisher id;
// an identity (namespace, publisher id) has one place.
func publisherLess(a, b *Publisher) bool {
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	if a.Topic != b.Topic {
		return a.Topic < b.Topic
	}
	return a.PublisherID < b.PublisherID
}

// checkConflict logs and counts an identity claimed by several keys, once
// per distinct key set, and forgets it once resolved.
func checkConflict[K comparable](r *Reducer, logged map[K]string, id K, keys keySet, kind string, describe func() string) {
	if len(keys) <= 1 {
		delete(logged, id)
		return
	}
	list := make([]string, 0, len(keys))
	for k := range keys {
		list = append(list, k)
	}
	sort.Strings(list)
	sig := strings.Join(list, "\x00")
	if logged[id] == sig {
		return
	}
	logged[id] = sig
	r.count("duplicate")
	shown := list
	if len(shown) > 4 {
		shown = shown[:4]
	}
	r.log.Warn("refusing records that claim one identity", "record", kind, "identity", describe(),
		"conflicts", len(list), "keys", shown)
}
