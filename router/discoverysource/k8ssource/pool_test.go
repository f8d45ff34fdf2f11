package k8ssource

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"switchyard/router/discovery"
	"switchyard/router/events"
	"switchyard/router/prompt/artifacts"
)

const (
	tokSum  = "blake3:1111111111111111111111111111111111111111111111111111111111111111"
	tmplSum = "blake3:2222222222222222222222222222222222222222222222222222222222222222"
)

func readyPoolPod(name, ip string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: ip}}
	setReady(p, true)
	return p
}

// recordsOf returns the records of a resync by keyspace.
func recordsOf(t *testing.T, evs []events.Event) map[events.Keyspace][]events.DiscoveryRecord {
	t.Helper()
	require.Len(t, evs, 1)
	out := map[events.Keyspace][]events.DiscoveryRecord{}
	for _, r := range evs[0].(events.DiscoveryResync).Records {
		out[r.Keyspace] = append(out[r.Keyspace], r)
	}
	return out
}

// cardOf parses the artifact slots of a Model record's card as the prompt
// service does.
func cardOf(t *testing.T, rec events.DiscoveryRecord) artifacts.CardArtifacts {
	t.Helper()
	var r struct {
		Card json.RawMessage `json:"card_json"`
	}
	require.NoError(t, json.Unmarshal(rec.Value, &r))
	got, err := artifacts.ParseCard(r.Card)
	require.NoError(t, err)
	return got
}

// The tokenizer and chat template the operator names reach every Pod's
// card in the slots a Dynamo worker fills, so the prompt service loads
// them: a tokenizer_config.json as the prompt formatter, a Jinja file as
// the chat template file.
func TestPoolCardCarriesTheOperatorsArtifacts(t *testing.T) {
	for _, tc := range []struct {
		name       string
		template   PoolFile
		wantKind   artifacts.Kind
		inFormater bool
	}{
		{"tokenizer_config.json", PoolFile{"/models/m/tokenizer_config.json", tmplSum, kindTokenizerConfig}, artifacts.KindHFTokenizerConfigJSON, true},
		{"jinja", PoolFile{"/models/m/chat_template.jinja", tmplSum, kindChatTemplate}, artifacts.KindHFChatTemplate, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewPoolFleet(PoolConfig{DynamoNamespace: "dynamo", Model: "m", BlockSize: 16,
				Tokenizer: PoolFile{Path: "hf://org/m/tokenizer.json", Checksum: tokSum}, ChatTemplate: tc.template}, nil, nil)
			evs := f.Relist([]*corev1.Pod{readyPoolPod("p0", "10.0.0.1")}, 8000, time.Unix(1, 0), 1)
			models := recordsOf(t, evs)[events.Models]
			require.Len(t, models, 1)
			card := cardOf(t, models[0])
			require.NotNil(t, card.Tokenizer)
			require.Equal(t, artifacts.KindHFTokenizerJSON, card.Tokenizer.Kind)
			require.Equal(t, "hf://org/m/tokenizer.json", card.Tokenizer.File.Path)
			require.Equal(t, tokSum, string(card.Tokenizer.File.Checksum))
			tmpl := card.ChatTemplateFile
			if tc.inFormater {
				require.Nil(t, card.ChatTemplateFile)
				tmpl = card.PromptFormatter
			}
			require.NotNil(t, tmpl)
			require.Equal(t, tc.wantKind, tmpl.Kind)
			require.Equal(t, tc.template.Path, tmpl.File.Path)
		})
	}
}

// Without artifacts the card names none (prompts are not tokenized), and
// the model and block size are still there.
func TestPoolCardWithoutArtifacts(t *testing.T) {
	f := NewPoolFleet(PoolConfig{DynamoNamespace: "dynamo", Model: "m", BlockSize: 32}, nil, nil)
	models := recordsOf(t, f.Relist([]*corev1.Pod{readyPoolPod("p0", "10.0.0.1")}, 8000, time.Unix(1, 0), 1))[events.Models]
	require.Len(t, models, 1)
	card := cardOf(t, models[0])
	require.Nil(t, card.Tokenizer)
	require.Nil(t, card.PromptFormatter)
	require.Nil(t, card.ChatTemplateFile)
	require.Contains(t, string(models[0].Value), `"kv_cache_block_size":32`)
}

// Publishers that dial the picker's listener are not dialled: the records
// carry no kv-events channel then.
func TestPoolRecordsWithAListenerHaveNoChannel(t *testing.T) {
	pods := []*corev1.Pod{readyPoolPod("p0", "10.0.0.1")}
	dial := recordsOf(t, NewPoolFleet(PoolConfig{DynamoNamespace: "dynamo", Model: "m", BlockSize: 16}, nil, nil).
		Relist(pods, 8000, time.Unix(1, 0), 1))
	require.Len(t, dial[events.EventChannels], 1)
	listen := recordsOf(t, NewPoolFleet(PoolConfig{DynamoNamespace: "dynamo", Model: "m", BlockSize: 16, KVEventsListen: true}, nil, nil).
		Relist(pods, 8000, time.Unix(1, 0), 1))
	require.Empty(t, listen[events.EventChannels])
	require.Len(t, listen[events.Instances], 1)
	require.Len(t, listen[events.Models], 1)
}

// A pool with a replay port advertises each Pod's replay socket beside
// its kv-events channel, at the annotated port when one is given; the
// router's discovery reads it back. Without one, no replay is advertised.
func TestPoolRecordsAdvertiseTheReplaySocket(t *testing.T) {
	annotated := readyPoolPod("p-1", "10.0.0.2")
	annotated.Annotations = map[string]string{AnnotationKVReplayPort: "6001"}
	bad := readyPoolPod("p-2", "10.0.0.3")
	bad.Annotations = map[string]string{AnnotationKVReplayPort: "65536"}
	pods := []*corev1.Pod{readyPoolPod("p-0", "10.0.0.1"), annotated, bad}
	refused := 0
	count := func(kind string) {
		if kind == KindRefused {
			refused++
		}
	}
	replayOf := func(cfg PoolConfig) map[string]string {
		f := NewPoolFleet(cfg, nil, count)
		r := discovery.NewReducer(nil, nil)
		for _, e := range f.Relist(pods, 8000, time.Unix(0, 0), 1) {
			r.Apply(e)
		}
		out := map[string]string{}
		for _, p := range r.View().Publishers {
			out[p.Address] = p.ReplayKind + " " + p.ReplayAddress
		}
		return out
	}
	cfg := PoolConfig{DynamoNamespace: "dynamo", Model: "m", BlockSize: 16, KVReplayPort: 5558}
	require.Equal(t, map[string]string{
		"tcp://10.0.0.1:5557": "Zmq tcp://10.0.0.1:5558",
		"tcp://10.0.0.2:5557": "Zmq tcp://10.0.0.2:6001",
		"tcp://10.0.0.3:5557": "Zmq tcp://10.0.0.3:5558",
	}, replayOf(cfg))
	require.Equal(t, 1, refused, "the annotation that is not a port")
	cfg.KVReplayPort = 0
	require.Equal(t, map[string]string{
		"tcp://10.0.0.1:5557": " ",
		"tcp://10.0.0.2:5557": "Zmq tcp://10.0.0.2:6001",
		"tcp://10.0.0.3:5557": " ",
	}, replayOf(cfg))
}
