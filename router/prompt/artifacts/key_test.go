package artifacts

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/router/discovery"
)

func worker(id uint64, model string, card []byte) *discovery.Worker {
	return &discovery.Worker{Namespace: "dynamo", InstanceID: id, Model: model, HasCard: card != nil, Card: card}
}

func TestFleetAgreesOnOneKey(t *testing.T) {
	tok := CheckedFile{Path: "http://w1:9090/tokenizer.json", Checksum: sumA, Size: 10, HasSize: true}
	tmpl := CheckedFile{Path: "http://w1:9090/tokenizer_config.json", Checksum: sumB, Size: 5, HasSize: true}
	// A second worker serves the same bytes from its own address.
	tok2, tmpl2 := tok, tmpl
	tok2.Path, tmpl2.Path = "http://w2:9090/tokenizer.json", "http://w2:9090/tokenizer_config.json"

	got := ModelAgreement([]*discovery.Worker{worker(1, "m", cardJSON(tok, tmpl)), worker(2, "m", cardJSON(tok2, tmpl2))}, "m")
	require.NoError(t, got.Err)
	assert.Equal(t, 2, got.Workers)
	assert.Equal(t, ArtifactKey{Tokenizer: SlotKey{KindHFTokenizerJSON, sumA}, PromptFormatter: SlotKey{KindHFTokenizerConfigJSON, sumB}}, got.Key)
	assert.Equal(t, tok, got.Artifacts.Tokenizer.File, "paths come from the first worker")
}

func TestFleetDisagreement(t *testing.T) {
	tok := CheckedFile{Path: "/m/tokenizer.json", Checksum: sumA}
	tmpl := CheckedFile{Path: "/m/tokenizer_config.json", Checksum: sumB}
	upgraded := tok
	upgraded.Checksum = Sum([]byte("new tokenizer"))
	workers := []*discovery.Worker{
		worker(1, "m", cardJSON(tok, tmpl)),
		worker(2, "m", cardJSON(upgraded, tmpl)), // mid rolling upgrade
		worker(3, "other", cardJSON(tok, tmpl)),
	}
	fleet := FleetArtifacts(workers)
	assert.ErrorIs(t, fleet["m"].Err, ErrDisagree)
	assert.Contains(t, fleet["m"].Err.Error(), string(upgraded.Checksum))
	assert.Equal(t, 2, fleet["m"].Workers)
	assert.NoError(t, fleet["other"].Err, "another model is not affected")
}

func TestFleetKindIsPartOfTheKey(t *testing.T) {
	// Same checksum, but one worker reads it as a template file and the
	// other as a tokenizer_config.json: they do not render alike.
	jinja := []byte(`{"prompt_formatter":{"hf_chat_template":{"is_custom":false,"file":{"path":"/t","checksum":"` + sumB + `"}}},"tokenizer":{"hf_tokenizer_json":{"path":"/k","checksum":"` + sumA + `"}}}`)
	config := []byte(`{"prompt_formatter":{"hf_tokenizer_config_json":{"path":"/t","checksum":"` + sumB + `"}},"tokenizer":{"hf_tokenizer_json":{"path":"/k","checksum":"` + sumA + `"}}}`)
	got := ModelAgreement([]*discovery.Worker{worker(1, "m", jinja), worker(2, "m", config)}, "m")
	assert.ErrorIs(t, got.Err, ErrDisagree)
}

func TestFleetWithoutUsableKey(t *testing.T) {
	tok := CheckedFile{Path: "/m/tokenizer.json", Checksum: sumA}
	tmpl := CheckedFile{Path: "/m/tokenizer_config.json", Checksum: sumB}
	good := cardJSON(tok, tmpl)

	got := ModelAgreement([]*discovery.Worker{worker(1, "m", good), worker(2, "m", nil)}, "m")
	assert.ErrorIs(t, got.Err, ErrNoCard, "a worker whose card is unknown could tokenize differently")

	tik := []byte(`{"tokenizer":{"tik_token_model":{"path":"/t","checksum":"` + sumA + `"}}}`)
	got = ModelAgreement([]*discovery.Worker{worker(1, "m", good), worker(2, "m", tik)}, "m")
	assert.Equal(t, ResultUnsupported, ResultOf(got.Err))

	got = ModelAgreement([]*discovery.Worker{worker(1, "m", []byte(`{"display_name":"m"}`))}, "m")
	assert.ErrorIs(t, got.Err, ErrNoTokenizer)

	got = ModelAgreement([]*discovery.Worker{worker(1, "m", good)}, "absent")
	assert.ErrorIs(t, got.Err, ErrNoWorkers)
}
