package gateway

import (
	"testing"

	"go.uber.org/goleak"
)

// Probe loops, attempt watchdogs and upstream connections must all be
// released by Close and by each request's end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
