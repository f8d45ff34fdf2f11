package frontend

import (
	"context"
	"encoding/json"
)

// Prompter renders and tokenizes a request body as the model's workers
// see it (router/prompt.Service over the fleet's tokenizer and chat
// template): chat is a chat completions body, otherwise a completions
// body. It returns nil when it cannot.
type Prompter interface {
	Tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string)
}

// maxTokenData bounds the ids taken from a body's nvext.token_data.
const maxTokenData = 1 << 20

// UsePrompts makes the frontend tokenize prompts, as dynamo.frontend does
// with the model's tokenizer, so its workers compute, cache and report
// the blocks of the real token ids. Call it before serving.
func (f *Frontend) UsePrompts(p Prompter) { f.prompts = p }

// tokenize gives a chat or completions request its token ids: the
// router's nvext.token_data when the body carries it (dynamo.frontend
// trusts it and skips tokenizing), else the frontend's own rendering. A
// request it cannot tokenize keeps its estimate.
func (f *Frontend) tokenize(ctx context.Context, in *input) {
	if f.prompts == nil || in.api == apiResponses {
		return
	}
	ids := tokenData(in.raw)
	if ids == nil {
		ids, _ = f.prompts.Tokens(ctx, in.model, in.api == apiChat, in.raw)
	}
	if len(ids) > 0 {
		in.tokens, in.promptTokens = ids, len(ids)
	}
}

// tokenData reads nvext.token_data, or nil.
func tokenData(raw []byte) []uint32 {
	var body struct {
		Nvext *struct {
			TokenData []uint32 `json:"token_data"`
		} `json:"nvext"`
	}
	if json.Unmarshal(raw, &body) != nil || body.Nvext == nil || len(body.Nvext.TokenData) > maxTokenData {
		return nil
	}
	return body.Nvext.TokenData
}
