// Package prompt turns a client's request into the token ids the
// KV-aware picker hashes: the chat template renders the messages, the
// tokenizer encodes the text, both from the artifacts every worker serving
// the model agrees on (a Source). Rendering is fleet-authored code run on
// client-authored data, so it is bounded: a few permits per core, a short
// wait for one, a total deadline, caps on what goes in and comes out. Over
// any bound the request is still served; it is scored without the overlap
// term, and the reason is counted.
package prompt

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"time"

	"switchyard/router/picker"
	"switchyard/router/prompt/template"
)

// Encoder encodes text into token ids (router/tokenizer.Tokenizer).
type Encoder interface {
	AppendEncode(dst []uint32, text string, addSpecial bool) ([]uint32, error)
}

// Renderer renders a chat request's messages (and tools) into the text
// the model sees, the generation prompt appended.
type Renderer interface {
	Render(ctx context.Context, in template.Input) (string, error)
}

// ErrTooLarge marks a render or an encoding past its caps (rendered text,
// token count): the prompt is counted prompt_too_large.
var ErrTooLarge = errors.New("prompt too large")

// Prepared is what one model's prompts are rendered and tokenized with.
type Prepared struct {
	Encoder Encoder
	// Template renders chat requests; nil when the model's artifacts
	// carry none (chat requests are then render_unavailable).
	Template Renderer
	// Key names the artifacts, so a template that overran its deadline
	// is not run again until they change.
	Key string
}

// Source finds the artifacts of a model. When it has none ready it
// answers why, as a KV selection result: tokenizer_unavailable (the
// workers disagree, or loading has not finished) or artifact_unpinned.
type Source interface {
	Prepared(model string) (*Prepared, string)
}

// Limits bound one request's rendering.
type Limits struct {
	// Permits run renders at once (default: 4 per core, at most 32).
	Permits int
	// PermitWait is how long a request waits for a permit (20 ms).
	PermitWait time.Duration
	// Deadline bounds a render and its encoding (2 s).
	Deadline time.Duration
	// MaxBodyBytes, MaxMessages and MaxTools bound what is rendered
	// (4 MiB, 4,096 messages, 512 tools).
	MaxBodyBytes, MaxMessages, MaxTools int
	// MaxRenderedBytes bounds the rendered text (1 MiB); MaxTokens the
	// token ids (1,048,576).
	MaxRenderedBytes, MaxTokens int
}

func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.Permits, min(max(4*runtime.GOMAXPROCS(0), 4), 32))
	def(&l.MaxBodyBytes, 4<<20)
	def(&l.MaxMessages, 4096)
	def(&l.MaxTools, 512)
	def(&l.MaxRenderedBytes, 1<<20)
	def(&l.MaxTokens, 1<<20)
	if l.PermitWait <= 0 {
		l.PermitWait = 20 * time.Millisecond
	}
	if l.Deadline <= 0 {
		l.Deadline = 2 * time.Second
	}
	return l
}

// DefaultLimits are the bounds a zero Limits takes, so that tools show
// what the router would render and refuse what it would refuse.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

// Service renders and tokenizes prompts. It is safe for concurrent use.
type Service struct {
	src     Source
	lim     Limits
	count   func(result string)
	observe func(d time.Duration)

	mu sync.Mutex
	// overran remembers the artifacts whose template ran past its
	// deadline; such a render may still hold its worker.
	overran map[string]bool

	renderers
}

// Hooks observe a service: every request's outcome (a KV selection
// result, or "ok") and the time a finished render took. Either may be nil.
type Hooks struct {
	Result func(result string)
	Render func(d time.Duration)
}

// New returns a service over src.
func New(src Source, lim Limits, h Hooks) *Service {
	lim = lim.withDefaults()
	s := &Service{src: src, lim: lim, count: h.Result, observe: h.Render, overran: map[string]bool{}}
	s.renderers = newRenderers(lim.Permits)
	if s.count == nil {
		s.count = func(string) {}
	}
	if s.observe == nil {
		s.observe = func(time.Duration) {}
	}
	return s
}

// Limits are the service's bounds, defaults filled in.
func (s *Service) Limits() Limits { return s.lim }

// Tokens renders and tokenizes a request body for model: a chat body
// through the model's template, a completions body's prompt string
// directly (special tokens added, as the frontend encodes it), and a
// completions prompt of token ids as given. It returns the ids, or nil
// and why (a picker KV result).
func (s *Service) Tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string) {
	ids, why := s.tokens(ctx, model, chat, body)
	if why == "" {
		s.count("ok")
	} else {
		s.count(why)
	}
	return ids, why
}

func (s *Service) tokens(ctx context.Context, model string, chat bool, body []byte) ([]uint32, string) {
	if !chat && len(body) <= s.lim.MaxBodyBytes {
		// Token ids given by the client are what the engine sees: no
		// tokenizer is needed to hash them.
		if ids, given, ok := TokenPrompt(body, s.lim.MaxTokens); given {
			if !ok {
				return nil, picker.KVPromptTooLarge
			}
			return ids, ""
		}
	}
	p, why := s.src.Prepared(model)
	if p == nil {
		if why == "" {
			why = picker.KVTokenizerUnavailable
		}
		return nil, why
	}
	if len(body) > s.lim.MaxBodyBytes {
		return nil, picker.KVPromptTooLarge
	}
	var job func(context.Context) ([]uint32, error)
	if chat {
		if p.Template == nil || s.hasOverrun(p.Key) {
			return nil, picker.KVRenderUnavailable
		}
		in, why := s.chatInput(body)
		if why != "" {
			return nil, why
		}
		job = func(ctx context.Context) ([]uint32, error) {
			text, err := p.Template.Render(ctx, in)
			if err != nil {
				return nil, err
			}
			if len(text) > s.lim.MaxRenderedBytes {
				return nil, ErrTooLarge
			}
			return s.encode(p.Encoder, text, false)
		}
	} else {
		text, ok := completionPrompt(body)
		if !ok {
			return nil, picker.KVRenderUnavailable
		}
		if len(text) > s.lim.MaxRenderedBytes {
			return nil, picker.KVPromptTooLarge
		}
		job = func(context.Context) ([]uint32, error) { return s.encode(p.Encoder, text, true) }
	}
	return s.run(ctx, p.Key, chat, job)
}

func (s *Service) encode(e Encoder, text string, addSpecial bool) ([]uint32, error) {
	ids, err := e.AppendEncode(nil, text, addSpecial)
	if err == nil && len(ids) > s.lim.MaxTokens {
		err = ErrTooLarge
	}
	return ids, err
}

// chatInput decodes what a chat body renders, refusing one past the
// message and tool caps before anything renders it.
func (s *Service) chatInput(body []byte) (template.Input, string) {
	in, err := template.InputFromChatRequest(body)
	if err != nil {
		return in, picker.KVRenderUnavailable
	}
	messages, err1 := arrayLen(in.Messages)
	tools, err2 := arrayLen(in.Tools)
	if err1 != nil || err2 != nil {
		return in, picker.KVRenderUnavailable
	}
	if messages > s.lim.MaxMessages || tools > s.lim.MaxTools {
		return in, picker.KVPromptTooLarge
	}
	return in, ""
}

var errNotArray = errors.New("not a JSON array")

// arrayLen counts the elements of a JSON array (null or absent: none)
// without decoding them; data is one valid JSON value.
func arrayLen(data []byte) (int, error) {
	if len(data) == 0 || string(data) == "null" {
		return 0, nil
	}
	if data[0] != '[' {
		return 0, errNotArray
	}
	count, depth, inString, empty := 0, 0, false, true
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString:
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			depth++
			if depth == 1 {
				continue
			}
		case c == ']' || c == '}':
			depth--
		case c == ',' && depth == 1:
			count++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			continue
		}
		if depth >= 1 {
			empty = false
		}
	}
	if !empty {
		count++
	}
	return count, nil
}

// completionPrompt is a completions body's prompt when it is one string.
func completionPrompt(body []byte) (string, bool) {
	var shape struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	var text string
	if json.Unmarshal(body, &shape) != nil || json.Unmarshal(shape.Prompt, &text) != nil {
		return "", false
	}
	return text, true
}

type outcome struct {
	ids []uint32
	err error
}

// run takes a render worker (waiting at most PermitWait) and runs job on
// it under the deadline. A job that overruns keeps its worker until it
// returns, so runaway renders occupy at most Permits goroutines, and its
// artifacts are not rendered again until they change.
func (s *Service) run(ctx context.Context, key string, chat bool, job func(context.Context) ([]uint32, error)) ([]uint32, string) {
	w := s.acquire(ctx)
	if w == nil {
		return nil, picker.KVRenderUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, s.lim.Deadline)
	defer cancel()
	w.give(ctx, job)
	select {
	case <-w.done:
		return s.collect(w)
	case <-ctx.Done():
	case <-s.quit:
	}
	if !w.abandon() {
		// The job finished as the wait ended: its outcome stands.
		<-w.done
		return s.collect(w)
	}
	if chat && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		s.markOverrun(key)
	}
	return nil, picker.KVRenderUnavailable
}

// acquire takes an idle worker, or starts one while fewer than Permits
// exist, or waits at most PermitWait for one; nil when none came.
func (s *Service) acquire(ctx context.Context) *worker {
	select {
	case w := <-s.idle:
		return w
	default:
	}
	if w := s.start(); w != nil {
		return w
	}
	wait := time.NewTimer(s.lim.PermitWait)
	defer wait.Stop()
	select {
	case w := <-s.idle:
		return w
	case <-wait.C:
		return nil
	case <-ctx.Done():
		return nil
	case <-s.quit:
		return nil
	}
}

func result(o outcome) ([]uint32, string) {
	switch {
	case o.err == nil:
		return o.ids, ""
	case errors.Is(o.err, ErrTooLarge):
		return nil, picker.KVPromptTooLarge
	default:
		return nil, picker.KVRenderUnavailable
	}
}

func (s *Service) hasOverrun(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overran[key]
}

// markOverrun remembers a template that ran past its deadline (bounded:
// artifacts are pinned by the operator, so their keys are few).
func (s *Service) markOverrun(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.overran) < 1024 {
		s.overran[key] = true
	}
}
