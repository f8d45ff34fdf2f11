package prompt

import (
	"bytes"
	"encoding/json"
	"math"
)

// TokenPrompt reads a completions body whose prompt is one list of token
// ids (`"prompt": [1, 2, 3]`, which vLLM and Dynamo's frontend accept
// instead of text and feed to the engine as they are). given reports a
// prompt of that form; ok that it was read: at most maxTokens ids, each a
// non-negative integer below 2^32. A body that cannot be read, a text
// prompt, an empty list and a batch (a list of lists) are not given. The
// ids are counted before they are kept, so a long list is refused before
// it allocates more than maxTokens ids.
func TokenPrompt(body []byte, maxTokens int) (ids []uint32, given, ok bool) {
	var shape struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(body, &shape) != nil {
		return nil, false, false
	}
	raw := bytes.TrimSpace(shape.Prompt)
	if len(raw) < 3 || raw[0] != '[' {
		return nil, false, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // the '['
		return nil, false, false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, false
		}
		n, isNumber := tok.(json.Number)
		if !isNumber {
			return nil, false, false // a batch, or not ids at all
		}
		if len(ids) == maxTokens {
			return nil, true, false
		}
		id, valid := tokenID(n)
		if !valid {
			return nil, false, false
		}
		ids = append(ids, id)
	}
	return ids, len(ids) > 0, len(ids) > 0
}

// tokenID reads a JSON number as a token id: an integer in [0, 2^32).
func tokenID(n json.Number) (uint32, bool) {
	v, err := n.Int64()
	if err != nil || v < 0 || v > math.MaxUint32 {
		return 0, false
	}
	return uint32(v), true
}
