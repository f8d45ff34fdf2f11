package frontend

import (
	"testing"

	"go.uber.org/goleak"
)

// Every request must end its worker calls and every stream must close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
