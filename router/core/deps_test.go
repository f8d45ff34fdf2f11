package core

import (
	"testing"

	"switchyard/internal/depcheck"
)

// Every host drives the same core, so the core links none of the I/O or
// adapters (sockets, HTTP, SQLite, etcd, the config file) that drive it:
// an import here would tie the simulator and replay to the live router.
func TestImportsNoAdapters(t *testing.T) {
	depcheck.Forbid(t, "switchyard/router/core/...", append(depcheck.IO,
		"switchyard/router/eventplane/...",
		"switchyard/router/gateway/...",
		"switchyard/router/server/...",
		"switchyard/router/discoverysource/...",
		"switchyard/router/config/...",
		"switchyard/recorder/...",
	)...)
}
