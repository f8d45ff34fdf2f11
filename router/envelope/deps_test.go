package envelope

import (
	"testing"

	"switchyard/internal/depcheck"
)

// A pure codec never pulls in sockets, HTTP or processes, nor the
// subscription layer that owns the sockets: the core and the simulator
// import it, so anything it linked would leak into them.
func TestImportsNoSockets(t *testing.T) {
	depcheck.Forbid(t, "switchyard/router/envelope/...", append(depcheck.IO, "switchyard/router/eventplane/...")...)
}
