package depcheck

import "testing"

// recordingTB keeps the errors Forbid reports instead of failing.
type recordingTB struct {
	testing.TB
	errors int
}

func (r *recordingTB) Errorf(string, ...any) { r.errors++ }

func TestForbidFindsALinkedPackage(t *testing.T) {
	// This package links os/exec itself, so forbidding it must report it.
	rec := &recordingTB{TB: t}
	Forbid(rec, "switchyard/internal/depcheck", "os/exec")
	if rec.errors != 1 {
		t.Fatalf("forbidding os/exec reported %d errors, want 1", rec.errors)
	}
	rec = &recordingTB{TB: t}
	Forbid(rec, "switchyard/internal/depcheck", "net/http", "switchyard/router/...")
	if rec.errors != 0 {
		t.Fatalf("forbidding packages it does not link reported %d errors", rec.errors)
	}
}

func TestNamedMatchesPackagesAndTrees(t *testing.T) {
	forbidden := []string{"switchyard/router/server/...", "net"}
	for dep, want := range map[string]bool{
		"switchyard/router/server":     true,
		"switchyard/router/server/sub": true,
		"switchyard/router/serverless": false,
		"net":                          true,
		"net/netip":                    false,
	} {
		if got := named(dep, forbidden); got != want {
			t.Errorf("named(%q) = %v, want %v", dep, got, want)
		}
	}
}
