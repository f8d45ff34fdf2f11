package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Defaults for TraceConfig's zero values.
const (
	DefaultMaxLineBytes   = 1 << 20 // the real Mooncake trace's longest line is about 2 KiB
	DefaultMaxInputTokens = 1 << 21
)

// TraceConfig controls Mooncake JSONL replay.
type TraceConfig struct {
	// Speedup divides every timestamp: 2 replays the trace twice as fast. 0 means 1.
	Speedup float64
	// MaxLineBytes refuses longer lines (an error naming the line). 0 means DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxInputTokens refuses lines whose input_length would allocate more. 0 means
	// DefaultMaxInputTokens. The cap is checked before the prompt is synthesized.
	MaxInputTokens int
	// DeferTokens leaves each Request's Tokens nil and describes its
	// prompt in Request.Prompt instead, for a receiver that mostly needs
	// only the prompt's length and block hashes.
	DeferTokens bool
}

func (c TraceConfig) withDefaults() (TraceConfig, error) {
	var errs []error
	switch {
	case c.Speedup == 0:
		c.Speedup = 1
	case !(c.Speedup > 0) || math.IsInf(c.Speedup, 0):
		errs = append(errs, fmt.Errorf("Speedup must be a finite number > 0, got %v", c.Speedup))
	}
	switch {
	case c.MaxLineBytes == 0:
		c.MaxLineBytes = DefaultMaxLineBytes
	case c.MaxLineBytes < 0:
		errs = append(errs, fmt.Errorf("MaxLineBytes must be >= 0, got %d", c.MaxLineBytes))
	}
	switch {
	case c.MaxInputTokens == 0:
		c.MaxInputTokens = DefaultMaxInputTokens
	case c.MaxInputTokens < 0:
		errs = append(errs, fmt.Errorf("MaxInputTokens must be >= 0, got %d", c.MaxInputTokens))
	}
	return c, configError("trace", errs...)
}

// traceLine is one JSONL record. Pointers distinguish a missing field from a zero one.
type traceLine struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// Trace replays a Mooncake trace as a Source. Lines are read and prompts synthesized one request
// at a time, so memory stays proportional to one line however long the trace is. Like
// bufio.Scanner, Next reports only whether a request was produced; Err says why it stopped.
type Trace struct {
	cfg   TraceConfig
	sc    *bufio.Scanner
	line  int
	last  int64 // previous timestamp, to enforce the Source ordering contract
	err   error
	stats statsCounter
}

// NewTrace prepares replay of r. Nothing is read until the first Next.
func NewTrace(r io.Reader, cfg TraceConfig) (*Trace, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(r)
	// +1 so a line of exactly MaxLineBytes plus its newline still fits the scanner's buffer.
	sc.Buffer(make([]byte, 0, min(64<<10, cfg.MaxLineBytes+1)), cfg.MaxLineBytes+1)
	return &Trace{cfg: cfg, sc: sc, stats: newStatsCounter()}, nil
}

// Next returns the next request, or false at the end of input or on the first error.
func (t *Trace) Next() (Request, bool) {
	rec, ok := t.read()
	if !ok {
		return Request{}, false
	}
	req := Request{
		ID:        uint64(t.stats.Requests),
		Arrival:   t.arrival(*rec.Timestamp),
		MaxTokens: *rec.OutputLength,
	}
	if t.cfg.DeferTokens {
		req.Prompt = &TracePrompt{HashIDs: rec.HashIDs, Len: *rec.InputLength}
	} else {
		req.Tokens = synthesize(rec.HashIDs, *rec.InputLength)
	}
	return req, true
}

// Err returns the error that stopped the trace, nil after a clean end of input.
func (t *Trace) Err() error { return t.err }

// Stats returns the statistics of the requests returned so far.
func (t *Trace) Stats() TraceStats { return t.stats.snapshot() }

// read parses and validates the next non-blank line and folds it into the statistics.
func (t *Trace) read() (traceLine, bool) {
	if t.err != nil {
		return traceLine{}, false
	}
	for t.sc.Scan() {
		t.line++
		if len(t.sc.Bytes()) > t.cfg.MaxLineBytes {
			t.err = fmt.Errorf("trace line %d: longer than %d bytes", t.line, t.cfg.MaxLineBytes)
			return traceLine{}, false
		}
		raw := bytes.TrimSpace(t.sc.Bytes())
		if len(raw) == 0 {
			continue // blank lines (often a trailing one) carry no request
		}
		rec, err := t.parse(raw)
		if err != nil {
			t.err = fmt.Errorf("trace line %d: %w", t.line, err)
			return traceLine{}, false
		}
		t.last = *rec.Timestamp
		t.stats.add(rec)
		return rec, true
	}
	if err := t.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes", t.cfg.MaxLineBytes)
		}
		t.err = fmt.Errorf("trace line %d: %w", t.line+1, err)
	}
	return traceLine{}, false
}

func (t *Trace) parse(raw []byte) (traceLine, error) {
	var rec traceLine
	if !parseTraceLine(raw, &rec) {
		rec = traceLine{}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return rec, fmt.Errorf("malformed JSON: %w", err)
		}
	}
	switch {
	case rec.Timestamp == nil:
		return rec, errors.New("missing timestamp")
	case rec.InputLength == nil:
		return rec, errors.New("missing input_length")
	case rec.OutputLength == nil:
		return rec, errors.New("missing output_length")
	case rec.HashIDs == nil:
		return rec, errors.New("missing hash_ids")
	case *rec.Timestamp < 0:
		return rec, fmt.Errorf("timestamp must be >= 0, got %d", *rec.Timestamp)
	case *rec.Timestamp < t.last:
		return rec, fmt.Errorf("timestamp %d is before the previous line's %d; replay needs arrival order",
			*rec.Timestamp, t.last)
	case *rec.Timestamp > math.MaxInt64/int64(time.Millisecond):
		return rec, fmt.Errorf("timestamp %d ms does not fit a time.Duration", *rec.Timestamp)
	case *rec.InputLength < 0 || *rec.InputLength > t.cfg.MaxInputTokens:
		return rec, fmt.Errorf("input_length must be in [0, %d], got %d", t.cfg.MaxInputTokens, *rec.InputLength)
	case *rec.OutputLength < 0:
		return rec, fmt.Errorf("output_length must be >= 0, got %d", *rec.OutputLength)
	}
	return rec, nil
}

func (t *Trace) arrival(ms int64) time.Duration {
	if t.cfg.Speedup == 1 {
		return time.Duration(ms) * time.Millisecond // exact in the common case
	}
	return time.Duration(float64(ms) * float64(time.Millisecond) / t.cfg.Speedup)
}

// synthesize builds the prompt for a trace line: the 512-token block of each hash id in order,
// truncated to n, or padded to n with tokens derived from the last hash id and the position.
func synthesize(ids []uint64, n int) []uint32 {
	toks := make([]uint32, 0, n)
	for _, h := range ids {
		if len(toks) == n {
			break
		}
		toks = appendBlock(toks, h, min(TraceBlockTokens, n-len(toks)))
	}
	last := ^uint64(0) // stands in for "no hash ids", which no real id can equal in practice
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	for pos := len(toks); pos < n; pos++ {
		toks = append(toks, padToken(last, pos))
	}
	return toks
}
