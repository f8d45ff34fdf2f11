package k8ssource

import (
	"log/slog"
	"slices"
	"time"

	"switchyard/router/events"
)

// Held-resource bounds of the metadata source.
const (
	// MaxMetadataObjects caps the DynamoWorkerMetadata resources held, and
	// the EndpointSlices read by one list.
	MaxMetadataObjects = 16384
	// MaxMetadataBytes caps the record bytes held across all resources.
	MaxMetadataBytes = 256 << 20
)

// metaEntry is one held DynamoWorkerMetadata resource.
type metaEntry struct {
	name, uid string
	// records are the last valid records of this uid.
	records map[string]metaRecord
	bytes   int
	// refused: a container-mode or instance-id-mismatched resource, which
	// contributes nothing.
	refused bool
	// Once-per-uid notes, so a resource is counted once however often it
	// is updated or relisted.
	refusedNoted, mismatchNoted, malformedNoted bool
}

// contributor is one resource's value for a key.
type contributor struct {
	name string
	rec  metaRecord
}

// metaFleet joins the held resources with EndpointSlice readiness and
// publishes the records of the ready ones. Keys two resources share (event
// channels) are reference-counted: the key leaves only with its last
// contributor. Used by one goroutine at a time.
type metaFleet struct {
	namespaces []string
	hash       func(string) uint64
	maxObjects int
	maxBytes   int
	log        *slog.Logger
	count      func(string)

	entries map[string]*metaEntry
	bytes   int
	// sliceReady holds each EndpointSlice's ready target names; readyRefs
	// counts the slices marking each name ready.
	sliceReady map[string][]string
	readyRefs  map[string]int
	// contributors lists, per key, the ready resources carrying it, the
	// latest last; the latest one's value is published.
	contributors map[string][]contributor
	overNoted    bool
}

func newMetaFleet(namespaces []string, log *slog.Logger, count func(string)) *metaFleet {
	f := &metaFleet{namespaces: namespaces, hash: HashPodName, maxObjects: MaxMetadataObjects, maxBytes: MaxMetadataBytes, log: log, count: count}
	f.clear()
	return f
}

func (f *metaFleet) clear() {
	f.entries, f.bytes = map[string]*metaEntry{}, 0
	f.sliceReady, f.readyRefs = map[string][]string{}, map[string]int{}
	f.contributors = map[string][]contributor{}
}

// metaObject is what the fleet reads from a DynamoWorkerMetadata object.
type metaObject struct {
	name, uid string
	// ownerPod is the name of the owning Pod, "" when none is recorded.
	ownerPod string
	content  map[string]any
}

// readySlice is what the fleet reads from an EndpointSlice.
type readySlice struct {
	name  string
	ready []string
}

// contribution is what an entry currently publishes.
func (f *metaFleet) contribution(e *metaEntry) map[string]metaRecord {
	if e == nil || e.refused || f.readyRefs[e.name] == 0 {
		return nil
	}
	return e.records
}

// describe builds the entry for an object, given the entry it replaces.
func (f *metaFleet) describe(o metaObject, prev *metaEntry) *metaEntry {
	e := &metaEntry{name: o.name, uid: o.uid}
	if prev != nil && prev.uid == o.uid {
		e.refusedNoted, e.mismatchNoted, e.malformedNoted = prev.refusedNoted, prev.mismatchNoted, prev.malformedNoted
	}
	if o.ownerPod != "" && o.ownerPod != o.name {
		e.refused = true
		if !e.refusedNoted {
			e.refusedNoted = true
			f.count(KindRefused)
			f.log.Warn("refusing a DynamoWorkerMetadata in container discovery mode; only pod mode is supported",
				"resource", o.name, "pod", o.ownerPod)
		}
		return e
	}
	recs, oversized, err := decodeMetadata(o.content, f.hash(o.name), f.namespaces)
	for range oversized {
		f.count(KindOversized)
	}
	switch {
	case err == nil:
		e.records, e.bytes = recs, recordBytes(recs)
		if limit := f.maxBytes - f.bytes + bytesOf(f.entries[o.name]); e.bytes > limit {
			err = errTooLarge
		} else {
			return e
		}
	case isMismatch(err):
		e.refused = true
		if !e.mismatchNoted {
			e.mismatchNoted = true
			f.count(KindMismatch)
			f.log.Warn("refusing a DynamoWorkerMetadata whose records do not carry its instance id",
				"resource", o.name, "instance_id", f.hash(o.name), "error", err)
		}
		return e
	}
	// A malformed update keeps the last valid records of the same uid.
	if prev != nil && prev.uid == o.uid {
		e.records, e.bytes, e.refused = prev.records, prev.bytes, prev.refused
	} else {
		e.records, e.bytes = nil, 0
	}
	if !e.malformedNoted {
		e.malformedNoted = true
		f.count(KindMalformed)
		f.log.Warn("ignoring a malformed DynamoWorkerMetadata; keeping its last valid records",
			"resource", o.name, "uid", o.uid, "error", err)
	}
	return e
}

func bytesOf(e *metaEntry) int {
	if e == nil {
		return 0
	}
	return e.bytes
}

func recordBytes(recs map[string]metaRecord) int {
	n := 0
	for k, r := range recs {
		n += len(k) + len(r.Value)
	}
	return n
}

// upsertObject folds an added or modified resource.
func (f *metaFleet) upsertObject(o metaObject, at time.Time) []events.Event {
	prev := f.entries[o.name]
	if prev == nil && len(f.entries) >= f.maxObjects {
		if !f.overNoted {
			f.overNoted = true
			f.count(KindMalformed)
			f.log.Warn("kubernetes metadata discovery at capacity; refusing new resources", "limit", f.maxObjects, "resource", o.name)
		}
		return nil
	}
	e := f.describe(o, prev)
	f.entries[o.name] = e
	f.bytes += e.bytes - bytesOf(prev)
	return f.move(at, o.name, f.contribution(prev), f.contribution(e))
}

// removeObject forgets a deleted resource.
func (f *metaFleet) removeObject(name string, at time.Time) []events.Event {
	prev := f.entries[name]
	if prev == nil {
		return nil
	}
	delete(f.entries, name)
	f.bytes -= prev.bytes
	if len(f.entries) < f.maxObjects {
		f.overNoted = false
	}
	return f.move(at, name, f.contribution(prev), nil)
}

// upsertSlice folds an added or modified EndpointSlice, toggling only the
// resources whose readiness it changes.
func (f *metaFleet) upsertSlice(s readySlice, at time.Time) []events.Event {
	old := f.sliceReady[s.name]
	f.sliceReady[s.name] = s.ready
	return f.retally(at, old, s.ready)
}

// removeSlice forgets a deleted EndpointSlice.
func (f *metaFleet) removeSlice(name string, at time.Time) []events.Event {
	old, ok := f.sliceReady[name]
	if !ok {
		return nil
	}
	delete(f.sliceReady, name)
	return f.retally(at, old, nil)
}

func (f *metaFleet) retally(at time.Time, oldReady, newReady []string) []events.Event {
	var out []events.Event
	for _, n := range oldReady {
		if !slices.Contains(newReady, n) {
			e := f.entries[n]
			before := f.contribution(e)
			f.readyRefs[n]--
			if f.readyRefs[n] <= 0 {
				delete(f.readyRefs, n)
			}
			out = append(out, f.move(at, n, before, f.contribution(e))...)
		}
	}
	for _, n := range newReady {
		if !slices.Contains(oldReady, n) {
			e := f.entries[n]
			before := f.contribution(e)
			f.readyRefs[n]++
			out = append(out, f.move(at, n, before, f.contribution(e))...)
		}
	}
	return out
}

// move replaces one resource's contribution and returns the puts and
// deletes that carry the change of each touched key to the core: the
// deletes, then the puts, each in key order, so the batch never depends on
// map iteration.
func (f *metaFleet) move(at time.Time, name string, old, new map[string]metaRecord) []events.Event {
	var out []events.Event
	for _, key := range sortedKeys(old) {
		if _, kept := new[key]; kept {
			continue
		}
		before := f.published(key)
		f.contributors[key] = slices.DeleteFunc(f.contributors[key], func(c contributor) bool { return c.name == name })
		if len(f.contributors[key]) == 0 {
			delete(f.contributors, key)
		}
		out = appendChange(out, at, before, f.published(key))
	}
	for _, key := range sortedKeys(new) {
		rec := new[key]
		if o, ok := old[key]; ok && string(o.Value) == string(rec.Value) {
			continue
		}
		before := f.published(key)
		cs := slices.DeleteFunc(f.contributors[key], func(c contributor) bool { return c.name == name })
		f.contributors[key] = append(cs, contributor{name: name, rec: rec})
		out = appendChange(out, at, before, f.published(key))
	}
	return out
}

func sortedKeys(m map[string]metaRecord) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// published is the record the core holds for key, nil for none. It is a
// copy: the contributor slice is edited in place.
func (f *metaFleet) published(key string) *metaRecord {
	cs := f.contributors[key]
	if len(cs) == 0 {
		return nil
	}
	r := cs[len(cs)-1].rec
	return &r
}

func appendChange(out []events.Event, at time.Time, before, after *metaRecord) []events.Event {
	switch {
	case after == nil && before != nil:
		return append(out, events.DiscoveryDelete{At: at, Namespace: before.namespace, Keyspace: before.Keyspace, Key: before.Key})
	case after != nil && (before == nil || string(before.Value) != string(after.Value)):
		return append(out, events.DiscoveryPut{At: at, Namespace: after.namespace, DiscoveryRecord: after.DiscoveryRecord})
	}
	return out
}

// relist replaces everything held with fresh lists and returns one
// DiscoveryResync per Dynamo namespace, like an etcd resync.
func (f *metaFleet) relist(objects []metaObject, ready []readySlice, at time.Time, revision int64) []events.Event {
	prev := f.entries
	f.clear()
	for _, s := range ready {
		f.sliceReady[s.name] = s.ready
		for _, n := range s.ready {
			f.readyRefs[n]++
		}
	}
	for _, o := range objects {
		if len(f.entries) >= f.maxObjects {
			break
		}
		e := f.describe(o, prev[o.name])
		f.entries[o.name] = e
		f.bytes += e.bytes
		for key, rec := range f.contribution(e) {
			f.contributors[key] = append(f.contributors[key], contributor{name: o.name, rec: rec})
		}
	}
	byNS := map[string][]events.DiscoveryRecord{}
	for key := range f.contributors {
		r := f.published(key)
		byNS[r.namespace] = append(byNS[r.namespace], r.DiscoveryRecord)
	}
	batch := make([]events.Event, 0, len(f.namespaces))
	for _, ns := range f.namespaces {
		recs := byNS[ns]
		slices.SortFunc(recs, func(a, b events.DiscoveryRecord) int { return compareStrings(a.Key, b.Key) })
		batch = append(batch, events.DiscoveryResync{At: at, Namespace: ns, Records: recs, Revision: revision})
	}
	return batch
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
