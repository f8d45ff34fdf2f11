package groundtruth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
)

// Ceilings of requests.jsonl, checked before anything is kept.
const (
	maxRequestsFile = 256 << 20 // bytes
	maxRequestLine  = 4 << 20   // bytes of one line
	maxRequests     = 1 << 20
	maxInputTokens  = 1 << 22 // of one request
	maxTotalTokens  = 1 << 27 // prompt tokens of the whole trace
	maxArrivalS     = 1e7
	maxIDLen        = 256
)

// Request is one line of requests.jsonl.
type Request struct {
	ID           string  `json:"id"`
	ArrivalS     float64 `json:"arrival_s"`
	InputTokens  int     `json:"input_tokens"`
	OutputTokens int     `json:"output_tokens"`
	// PrefixBlockIDs (D) name the prompt's full blocks: equal ids mean
	// equal content and equal prefix.
	PrefixBlockIDs []uint64 `json:"prefix_block_ids"`
	// SharedPrefixGroup (E) names a prefix of SharedPrefixTokens tokens
	// common to every prompt of the group.
	SharedPrefixGroup  *int             `json:"shared_prefix_group"`
	SharedPrefixTokens int              `json:"shared_prefix_tokens"`
	Measured           *RequestMeasured `json:"measured"`
}

// RequestMeasured is a request's measured timing; nil where held out.
type RequestMeasured struct {
	TTFTMs *float64 `json:"ttft_ms"`
	E2EMs  *float64 `json:"e2e_ms"`
}

// LoadRequests reads a requests.jsonl whose prefix_block_ids were cut in
// blocks of blockSize tokens.
func LoadRequests(path string, blockSize int) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	reqs, err := ParseRequests(io.LimitReader(f, maxRequestsFile+1), blockSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return reqs, nil
}

// ParseRequests decodes and checks requests.jsonl lines: ids unique and
// non-empty, arrivals finite and non-negative (in any order), token counts
// in range, prefix blocks no more than the prompt holds. Blank lines are
// skipped.
func ParseRequests(r io.Reader, blockSize int) ([]Request, error) {
	if blockSize < 1 || blockSize > maxBlockSize {
		return nil, fmt.Errorf("%w: block size %d is outside 1..%d", ErrInvalid, blockSize, maxBlockSize)
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRequestLine)
	var (
		reqs   []Request
		seen   = map[string]bool{}
		tokens int
		read   int
	)
	for line := 1; sc.Scan(); line++ {
		read += len(sc.Bytes()) + 1
		if read > maxRequestsFile {
			return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, maxRequestsFile)
		}
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		if len(reqs) == maxRequests {
			return nil, fmt.Errorf("%w: line %d: more than %d requests", ErrInvalid, line, maxRequests)
		}
		req, err := parseRequest(text, blockSize)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrInvalid, line, err)
		}
		if seen[req.ID] {
			return nil, fmt.Errorf("%w: line %d: id %q repeats", ErrInvalid, line, req.ID)
		}
		if tokens += req.InputTokens; tokens > maxTotalTokens {
			return nil, fmt.Errorf("%w: line %d: more than %d prompt tokens in all", ErrInvalid, line, maxTotalTokens)
		}
		seen[req.ID] = true
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%w: no requests", ErrInvalid)
	}
	return reqs, nil
}

func parseRequest(text []byte, blockSize int) (Request, error) {
	var req Request
	if err := json.Unmarshal(text, &req); err != nil {
		return req, fmt.Errorf("%s", describeJSONError(err))
	}
	switch {
	case req.ID == "" || len(req.ID) > maxIDLen:
		return req, fmt.Errorf("id: %q must be 1..%d bytes", req.ID, maxIDLen)
	case math.IsNaN(req.ArrivalS) || req.ArrivalS < 0 || req.ArrivalS > maxArrivalS:
		return req, fmt.Errorf("arrival_s: %v is outside 0..%v", req.ArrivalS, maxArrivalS)
	case req.InputTokens < 1 || req.InputTokens > maxInputTokens:
		return req, fmt.Errorf("input_tokens: %d is outside 1..%d", req.InputTokens, maxInputTokens)
	case req.OutputTokens < 1 || req.OutputTokens > maxLen:
		return req, fmt.Errorf("output_tokens: %d is outside 1..%d", req.OutputTokens, maxLen)
	case len(req.PrefixBlockIDs) > req.InputTokens/blockSize:
		return req, fmt.Errorf("prefix_block_ids: %d blocks of %d tokens do not fit in %d input tokens",
			len(req.PrefixBlockIDs), blockSize, req.InputTokens)
	case req.SharedPrefixTokens < 0 || req.SharedPrefixTokens > req.InputTokens:
		return req, fmt.Errorf("shared_prefix_tokens: %d is outside 0..input_tokens (%d)", req.SharedPrefixTokens, req.InputTokens)
	case req.SharedPrefixGroup != nil && *req.SharedPrefixGroup < 0:
		return req, fmt.Errorf("shared_prefix_group: %d is negative", *req.SharedPrefixGroup)
	}
	if m := req.Measured; m != nil {
		if bad(m.TTFTMs) {
			return req, fmt.Errorf("measured.ttft_ms: %v is not a non-negative number", *m.TTFTMs)
		}
		if bad(m.E2EMs) {
			return req, fmt.Errorf("measured.e2e_ms: %v is not a non-negative number", *m.E2EMs)
		}
	}
	return req, nil
}

func bad(v *float64) bool { return v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0) }
