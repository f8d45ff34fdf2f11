package artifacts

import (
	"errors"
	"fmt"
)

// Result is what became of one attempt to obtain an artifact: the label of
// switchyard_dynamo_kv_artifacts_total.
type Result string

// The closed set of results.
const (
	// ResultFetched: read from its source (a local file or a URL) and verified.
	ResultFetched Result = "fetched"
	// ResultCached: read from the blob cache and verified.
	ResultCached Result = "cached"
	// ResultUnpinned: its checksum is not in pinned_artifacts; nothing was read.
	ResultUnpinned Result = "unpinned"
	// ResultCorrupt: the bytes did not hash to the checksum (a cache blob
	// that fails is also evicted).
	ResultCorrupt Result = "corrupt"
	// ResultTooLarge: declared or actual size over MaxArtifactBytes.
	ResultTooLarge Result = "too_large"
	// ResultRefused: a malformed slot, a relative path, or a scheme the
	// allow flags do not permit.
	ResultRefused Result = "refused"
	// ResultFailed: the source could not be read (missing file, HTTP error,
	// timeout) or the loaded bytes did not parse.
	ResultFailed Result = "failed"
	// ResultUnsupported: an artifact kind or URL scheme the router does not
	// handle (tik_token_model, ftp://, ...).
	ResultUnsupported Result = "unsupported"
)

// Results lists every result, for pre-registering metric series.
var Results = []Result{
	ResultFetched, ResultCached, ResultUnpinned, ResultCorrupt,
	ResultTooLarge, ResultRefused, ResultFailed, ResultUnsupported,
}

// ErrUnpinned is returned (wrapped) for an artifact whose checksum is not
// pinned.
var ErrUnpinned = errors.New("artifact checksum not in dynamo.kv.pinned_artifacts")

// Error is a refusal or failure with its metric result. Where names the
// slot ("tokenizer", "prompt_formatter", ...) or the artifact's checksum.
type Error struct {
	Result Result
	Where  string
	Reason string
	Err    error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: %s: %s", e.Where, e.Result, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ResultOf is the metric result of err: the Result of an *Error in its
// chain, else failed.
func ResultOf(err error) Result {
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	return ResultFailed
}

func refusal(r Result, where, format string, args ...any) *Error {
	return &Error{Result: r, Where: where, Reason: fmt.Sprintf(format, args...)}
}
