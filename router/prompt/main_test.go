package prompt

import (
	"testing"

	"go.uber.org/goleak"
)

// Render workers must all end with their service's Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
