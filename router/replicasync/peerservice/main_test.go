package peerservice

import (
	"os"
	"testing"

	"switchyard/internal/kubetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	kubetest.Stop()
	os.Exit(code)
}
