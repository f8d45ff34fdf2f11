package traces

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRootIsTheProjectRoot(t *testing.T) {
	root := Root()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module switchyard\n") {
		t.Fatalf("Root() = %s: go.mod %q, %v", root, mod, err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "traces")); err != nil {
		t.Fatalf("Root() = %s does not hold this package: %v", root, err)
	}
}

func TestDirFollowsTheSetting(t *testing.T) {
	t.Setenv(EnvDir, "")
	if got, want := Dir(), filepath.Join(Root(), "..", "shared", "data", "traces"); got != want {
		t.Fatalf("default Dir() = %s, want %s", got, want)
	}
	abs := t.TempDir()
	t.Setenv(EnvDir, abs)
	if got := Dir(); got != abs {
		t.Fatalf("Dir() = %s, want %s", got, abs)
	}
	t.Setenv(EnvDir, "data/traces")
	if got, want := Dir(), filepath.Join(Root(), "data", "traces"); got != want {
		t.Fatalf("a relative setting is taken from the project root: Dir() = %s, want %s", got, want)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	if err := os.WriteFile(filepath.Join(dir, "small.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Find("small.jsonl"); err != nil || got != filepath.Join(dir, "small.jsonl") {
		t.Fatalf("Find = %q, %v", got, err)
	}
	_, err := Find(Mooncake)
	if err == nil {
		t.Fatal("a missing trace was found")
	}
	for _, want := range []string{filepath.Join(dir, Mooncake), "kvcache-ai/Mooncake", "FAST25-release/traces/conversation_trace.jsonl",
		EnvDir, DefaultDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Find("adir"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("a directory was accepted as a trace: %v", err)
	}
}

// TestRequireHelper is run by TestRequire in a child process; on its own it
// does nothing.
func TestRequireHelper(t *testing.T) {
	if os.Getenv("TRACES_REQUIRE_HELPER") == "" {
		return
	}
	Require(t, Mooncake)
	t.Log("ran past Require")
}

// Require skips without CI and fails with CI, with the same message; the
// test runs it in a child process to observe both.
func TestRequire(t *testing.T) {
	dir := t.TempDir()
	run := func(ci string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRequireHelper$", "-test.v")
		cmd.Env = append(withoutCI(os.Environ()), "TRACES_REQUIRE_HELPER=1", EnvDir+"="+dir)
		if ci != "" {
			cmd.Env = append(cmd.Env, "CI="+ci)
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "--- SKIP: TestRequireHelper") || strings.Contains(out, "ran past Require") {
		t.Fatalf("without CI the test should skip: %v\n%s", err, out)
	}
	if !strings.Contains(out, "kvcache-ai/Mooncake") || !strings.Contains(out, EnvDir) {
		t.Errorf("the skip does not say where to get the trace:\n%s", out)
	}
	out, err = run("true")
	if err == nil || !strings.Contains(out, "--- FAIL: TestRequireHelper") || !strings.Contains(out, "kvcache-ai/Mooncake") {
		t.Fatalf("with CI set the test should fail with the message: %v\n%s", err, out)
	}

	if err := os.WriteFile(filepath.Join(dir, Mooncake), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = run("true")
	if err != nil || !strings.Contains(out, "ran past Require") {
		t.Fatalf("a present trace should let the test run: %v\n%s", err, out)
	}
}

func withoutCI(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "CI=") && !strings.HasPrefix(kv, EnvDir+"=") {
			out = append(out, kv)
		}
	}
	return out
}
