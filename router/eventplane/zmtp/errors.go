package zmtp

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// ProtocolError reports a peer that broke the protocol or one of the Limits:
// a bad greeting, a mechanism other than NULL, a bad READY, a socket type
// other than PUB/XPUB, a size over a ceiling, too many frames, a command
// inside a multipart message, an ERROR command, or a handshake or message
// that did not complete in time. The session is over; the caller counts it
// as transport_refused and reconnects with backoff.
type ProtocolError struct {
	Reason string
}

func (e *ProtocolError) Error() string { return "zmtp: protocol error: " + e.Reason }

// IsProtocolError reports whether err is, or wraps, a *ProtocolError.
func IsProtocolError(err error) bool {
	var pe *ProtocolError
	return errors.As(err, &pe)
}

func protoErr(format string, args ...any) error {
	return &ProtocolError{Reason: fmt.Sprintf(format, args...)}
}

// isTimeout reports whether err comes from a read or write deadline.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// errEmptyMessage refuses a send with no frames: ZMTP has no empty
// message, so this is the caller's mistake, not the peer's.
var errEmptyMessage = errors.New("zmtp: a message needs at least one frame")
