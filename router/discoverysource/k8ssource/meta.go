package k8ssource

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// The DynamoWorkerMetadata resource and the EndpointSlices that say which
// of its Pods are ready.
const (
	metaGroup    = "nvidia.com"
	metaVersion  = "v1alpha1"
	metaResource = "dynamoworkermetadatas"
	// sliceSelector is the label selector of the readiness EndpointSlices.
	sliceSelector = labelBackend + "=kubernetes," + labelEnabled + "=true"
)

// Count kinds of the metadata source beyond the Pod source's.
const (
	KindMismatch  = "mismatch"
	KindMalformed = "malformed"
	KindOversized = "oversized"
)

// metaRecord is one record a resource carries, as the etcd reducer reads it.
type metaRecord struct {
	namespace string
	events.DiscoveryRecord
}

// metaMaps names the spec.data maps the source reads, with the keyspace
// each feeds and whether its records must carry the resource's instance id.
var metaMaps = []struct {
	field    string
	keyspace events.Keyspace
	// root is the etcd bucket the map's keys are suffixes of.
	root    string
	idBound bool
}{
	{"endpoints", events.Instances, "v1/instances/", true},
	{"model_cards", events.Models, "v1/mdc/", true},
	{"event_channels", events.EventChannels, "v1/event_channels/", false},
}

// errMalformed marks a spec that is not the expected shape; the resource
// keeps its last valid records.
var errMalformed = errors.New("malformed spec")

// errMismatch marks a record whose instance id is not the resource's.
var errMismatch = errors.New("instance id mismatch")

// decodeMetadata reads a DynamoWorkerMetadata object (as decoded JSON)
// into the records it contributes to the given Dynamo namespaces, keyed by
// etcd key. id is hash_pod_name of the resource name; every endpoint and
// model card must carry it in its map key and its value. Records of other
// namespaces are left out; records larger than the reducer would accept are
// dropped and reported in oversized.
func decodeMetadata(obj map[string]any, id uint64, namespaces []string) (recs map[string]metaRecord, oversized int, err error) {
	spec, ok := obj["spec"].(map[string]any)
	if !ok {
		return nil, 0, fmt.Errorf("%w: spec is not an object", errMalformed)
	}
	data, ok := spec["data"].(map[string]any)
	if !ok {
		return nil, 0, fmt.Errorf("%w: spec.data is not an object", errMalformed)
	}
	recs = map[string]metaRecord{}
	for _, m := range metaMaps {
		raw := data[m.field]
		if raw == nil {
			continue // absent or null: empty
		}
		entries, ok := raw.(map[string]any)
		if !ok {
			return nil, 0, fmt.Errorf("%w: spec.data.%s is not an object", errMalformed, m.field)
		}
		for mapKey, v := range entries {
			if m.keyspace == events.Models {
				v = trimCard(v)
			}
			value, err := json.Marshal(v)
			if err != nil {
				return nil, 0, fmt.Errorf("%w: spec.data.%s[%q]: %v", errMalformed, m.field, mapKey, err)
			}
			if m.idBound {
				if err := checkInstanceID(mapKey, value, id); err != nil {
					return nil, 0, fmt.Errorf("spec.data.%s[%q]: %w", m.field, mapKey, err)
				}
			}
			key := m.root + mapKey
			ns, ok := placeRecord(m.keyspace, key, namespaces)
			if !ok {
				continue
			}
			if len(value) > discovery.MaxRecordBytes {
				oversized++
				continue
			}
			recs[key] = metaRecord{namespace: ns, DiscoveryRecord: events.DiscoveryRecord{Keyspace: m.keyspace, Key: key, Value: value}}
		}
	}
	return recs, oversized, nil
}

// placeRecord finds the configured Dynamo namespace whose watched prefix
// holds key, as the etcd source would; ok is false for other namespaces
// and keys outside the layout.
func placeRecord(ks events.Keyspace, key string, namespaces []string) (string, bool) {
	for _, ns := range namespaces {
		for _, p := range discovery.Prefixes(ns) {
			if p.Keyspace == ks && p.Accepts(key) {
				return ns, true
			}
		}
	}
	return "", false
}

// checkInstanceID requires the hex id ending the map key
// ({ns}/{component}/{endpoint}/{id:x}) and the value's instance_id to be
// the resource's own id.
func checkInstanceID(mapKey string, value []byte, want uint64) error {
	last := mapKey[strings.LastIndexByte(mapKey, '/')+1:]
	if inPath, err := strconv.ParseUint(last, 16, 64); err != nil || inPath != want {
		return fmt.Errorf("%w: key does not end in %x", errMismatch, want)
	}
	var v struct {
		InstanceID json.RawMessage `json:"instance_id"`
	}
	if err := json.Unmarshal(value, &v); err != nil {
		return fmt.Errorf("%w: %v", errMismatch, err)
	}
	got, ok := parseInstanceID(v.InstanceID)
	if !ok || got != want {
		return fmt.Errorf("%w: instance_id %s is not %d", errMismatch, v.InstanceID, want)
	}
	return nil
}

// parseInstanceID reads an instance_id written as a JSON number or a
// hexadecimal string, as the reducer does.
func parseInstanceID(b json.RawMessage) (uint64, bool) {
	s := string(b)
	if strings.HasPrefix(s, `"`) {
		var hex string
		if json.Unmarshal(b, &hex) != nil {
			return 0, false
		}
		hex = strings.TrimPrefix(strings.TrimPrefix(hex, "0x"), "0X")
		v, err := strconv.ParseUint(hex, 16, 64)
		return v, err == nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// errTooLarge refuses a resource whose records would take the held bytes
// past MaxMetadataBytes; it is handled as a malformed spec.
var errTooLarge = errors.New("records exceed the held-bytes bound")

func isMismatch(err error) bool { return errors.Is(err, errMismatch) }

// trimCard replaces a model card over discovery.MaxRetainedCardBytes with
// the members the router reads (discovery.TrimCard), so held resources
// stay compact: the reducer would not retain such a card whole anyway.
func trimCard(record any) any {
	rec, ok := record.(map[string]any)
	if !ok {
		return record
	}
	card, ok := rec["card_json"]
	if !ok {
		return record
	}
	raw, err := json.Marshal(card)
	if err != nil || len(raw) <= discovery.MaxRetainedCardBytes {
		return record
	}
	trimmed, _ := discovery.TrimCard(raw)
	out := make(map[string]any, len(rec))
	for k, v := range rec {
		out[k] = v
	}
	out["card_json"] = json.RawMessage(trimmed)
	return out
}
