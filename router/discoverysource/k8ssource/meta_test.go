package k8ssource

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/router/discovery"
	"switchyard/router/events"
)

// fixtureSpec is the shape of Dynamo's v1.2 DynamoWorkerMetadata fixture,
// for the worker whose instance id is id.
func fixtureSpec(id uint64) string {
	return fmt.Sprintf(`{"spec":{"data":{
	  "endpoints":{"dynamo/backend/generate/%[1]x":{"type":"Endpoint","namespace":"dynamo","component":"backend","endpoint":"generate","instance_id":%[1]d,"transport":{"nats_tcp":"dynamo.backend.generate"}}},
	  "model_cards":{"dynamo/backend/generate/%[1]x":{"type":"Model","namespace":"dynamo","component":"backend","endpoint":"generate","instance_id":"%[1]x","card_json":{"display_name":"Qwen/Qwen3-0.6B"},"model_suffix":null}},
	  "event_channels":{"dynamo/backend/kv-events/2a":{"type":"EventChannel","namespace":"dynamo","component":"backend","topic":"kv-events","instance_id":42},
	                    "other/backend/kv-events/2a":{"type":"EventChannel","namespace":"other","component":"backend","topic":"kv-events","instance_id":42}},
	  "metrics_endpoints":null}}}`, id)
}

func decodeJSON(t testing.TB, s string) map[string]any {
	var obj map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &obj))
	return obj
}

func TestDecodeMetadataReadsTheFixtureShape(t *testing.T) {
	id := HashPodName("worker-0")
	recs, oversized, err := decodeMetadata(decodeJSON(t, fixtureSpec(id)), id, []string{"dynamo"})
	require.NoError(t, err)
	assert.Zero(t, oversized)
	keys := map[string]events.Keyspace{}
	for k, r := range recs {
		keys[k] = r.Keyspace
		assert.Equal(t, "dynamo", r.namespace)
	}
	assert.Equal(t, map[string]events.Keyspace{
		fmt.Sprintf("v1/instances/dynamo/backend/generate/%x", id): events.Instances,
		fmt.Sprintf("v1/mdc/dynamo/backend/generate/%x", id):       events.Models,
		"v1/event_channels/dynamo/backend/kv-events/2a":            events.EventChannels,
	}, keys, "the other namespace's channel is left out")
}

func TestDecodeMetadataRefusesAnotherInstanceID(t *testing.T) {
	id := HashPodName("worker-0")
	_, _, err := decodeMetadata(decodeJSON(t, fixtureSpec(id+1)), id, []string{"dynamo"})
	assert.True(t, errors.Is(err, errMismatch), "got %v", err)

	// Right key, wrong value.
	spec := strings.Replace(fixtureSpec(id), fmt.Sprintf(`"instance_id":%d`, id), `"instance_id":7`, 1)
	_, _, err = decodeMetadata(decodeJSON(t, spec), id, []string{"dynamo"})
	assert.True(t, errors.Is(err, errMismatch), "got %v", err)
}

func TestDecodeMetadataRefusesMalformedSpecs(t *testing.T) {
	for _, s := range []string{`{}`, `{"spec":"x"}`, `{"spec":{"data":"x"}}`, `{"spec":{"data":[]}}`, `{"spec":{"data":{"endpoints":[1]}}}`} {
		_, _, err := decodeMetadata(decodeJSON(t, s), 1, []string{"dynamo"})
		assert.True(t, errors.Is(err, errMalformed), "%s: got %v", s, err)
	}
	recs, _, err := decodeMetadata(decodeJSON(t, `{"spec":{"data":{"endpoints":null}}}`), 1, []string{"dynamo"})
	require.NoError(t, err, "a null map is empty")
	assert.Empty(t, recs)
}

// FuzzDecodeMetadata: any object a client decodes from the API server is
// read without panicking, and what it yields is what the etcd source could
// have read.
func FuzzDecodeMetadata(f *testing.F) {
	id := HashPodName("worker-0")
	f.Add([]byte(fixtureSpec(id)))
	f.Add([]byte(`{"spec":{"data":{"event_channels":{"dynamo//kv_metrics/2a":{"instance_id":"2a"}}}}}`))
	f.Add([]byte(`{"spec":{"data":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var obj map[string]any
		if json.Unmarshal(b, &obj) != nil {
			return
		}
		recs, _, err := decodeMetadata(obj, id, []string{"dynamo"})
		if err != nil {
			if recs != nil {
				t.Fatal("records returned with an error")
			}
			return
		}
		for k, r := range recs {
			if k != r.Key || len(r.Value) > discovery.MaxRecordBytes || r.namespace != "dynamo" {
				t.Fatalf("bad record %q: %+v", k, r)
			}
		}
	})
}

func metaObj(t testing.TB, name, uid string) metaObject {
	return metaObject{name: name, uid: uid, content: decodeJSON(t, strings.ReplaceAll(fixtureSpec(HashPodName(name)), `"kv-events/2a"`, `"kv-events/`+name+`"`))}
}

var testTime = time.Unix(1_700_000_000, 0)

// The fleet's bounds: objects beyond maxObjects and records beyond maxBytes
// are refused and counted once as malformed.
func TestMetaFleetBounds(t *testing.T) {
	counts := map[string]int{}
	f := newMetaFleet([]string{"dynamo"}, discardLog(), func(k string) { counts[k]++ })
	f.maxObjects = 2
	f.upsertSlice(readySlice{name: "s", ready: []string{"w-0", "w-1", "w-2", "w-3"}}, testTime)
	require.NotEmpty(t, f.upsertObject(metaObj(t, "w-0", "u0"), testTime))
	require.NotEmpty(t, f.upsertObject(metaObj(t, "w-1", "u1"), testTime))
	assert.Empty(t, f.upsertObject(metaObj(t, "w-2", "u2"), testTime), "over the object bound")
	assert.Empty(t, f.upsertObject(metaObj(t, "w-3", "u3"), testTime))
	assert.Equal(t, 1, counts[KindMalformed], "counted once")

	f.removeObject("w-1", testTime)
	f.maxBytes = f.bytes + 10 // room for w-0's growth only if tiny
	assert.Empty(t, f.upsertObject(metaObj(t, "w-2", "u2"), testTime), "over the byte bound")
	assert.Equal(t, 2, counts[KindMalformed])
	assert.Len(t, f.entries, 2, "held, without records")
	assert.Empty(t, f.contribution(f.entries["w-2"]))
}

// A Pod listed twice in one slice (two addresses) holds one readiness
// reference: dropping the slice makes it not ready.
func TestReadSliceListsEachPodOnce(t *testing.T) {
	yes := true
	pod := &corev1.ObjectReference{Kind: "Pod", Name: "w-0"}
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Endpoints: []discoveryv1.Endpoint{
		{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}, TargetRef: pod},
		{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}, TargetRef: pod},
		{Addresses: []string{"10.0.0.3"}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "unset"}},
	}}
	assert.Equal(t, []string{"w-0"}, readSlice(s).ready)

	f := newMetaFleet([]string{"dynamo"}, discardLog(), func(string) {})
	f.upsertSlice(readSlice(s), testTime)
	require.NotEmpty(t, f.upsertObject(metaObj(t, "w-0", "u0"), testTime))
	require.NotEmpty(t, f.removeSlice("s", testTime))
	assert.Empty(t, f.contribution(f.entries["w-0"]))
}

// A card over the reducer's retained-card bound is trimmed to what the
// router reads as the resource is classified, so the held record stays
// small and the worker keeps its model, capacity and tokenizer; a smaller
// card is held as written.
func TestDecodeMetadataTrimsOversizedCards(t *testing.T) {
	id := HashPodName("worker-0")
	card := `{"display_name":"Qwen/Qwen3-32B","kv_cache_block_size":64,"runtime_config":{"total_kv_blocks":12000},` +
		`"tokenizer":{"hf_tokenizer_json":{"path":"/m/tokenizer.json","checksum":"blake3:00","size":7}},` +
		`"chat_template":"` + strings.Repeat("x", discovery.MaxRetainedCardBytes) + `"}`
	spec := strings.Replace(fixtureSpec(id), `"card_json":{"display_name":"Qwen/Qwen3-0.6B"}`, `"card_json":`+card, 1)
	recs, oversized, err := decodeMetadata(decodeJSON(t, spec), id, []string{"dynamo"})
	require.NoError(t, err)
	assert.Zero(t, oversized)
	rec := recs[fmt.Sprintf("v1/mdc/dynamo/backend/generate/%x", id)]
	require.Less(t, len(rec.Value), 2048, "held trimmed")
	var model struct {
		InstanceID string         `json:"instance_id"`
		Card       map[string]any `json:"card_json"`
	}
	require.NoError(t, json.Unmarshal(rec.Value, &model))
	assert.Equal(t, fmt.Sprintf("%x", id), model.InstanceID, "the record around the card is kept")
	assert.Equal(t, "Qwen/Qwen3-32B", model.Card["display_name"])
	assert.Contains(t, model.Card, "tokenizer")
	assert.NotContains(t, model.Card, "chat_template")

	recs, _, err = decodeMetadata(decodeJSON(t, fixtureSpec(id)), id, []string{"dynamo"})
	require.NoError(t, err)
	assert.Contains(t, string(recs[fmt.Sprintf("v1/mdc/dynamo/backend/generate/%x", id)].Value), `"card_json":{"display_name":"Qwen/Qwen3-0.6B"}`)
}
