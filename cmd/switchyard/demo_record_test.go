package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"switchyard/internal/syncbuf"
)

// demo --record: the built binary records its router while requests go
// through it, closes the recording after the router on SIGINT, and the
// replay command reproduces every selection from the file.
func TestDemoRecordThenReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildBinary(t)
	addr := freeAddr(t)
	db := filepath.Join(t.TempDir(), "demo.db")
	cmd := exec.Command(bin, "demo", "--addr", addr, "--record", db, "--speedup", "200", "--log-format", "json")
	out, logs := &syncbuf.Buffer{}, &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = out, logs
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	var token string
	waitFor(t, 60*time.Second, "the demo to start", func() bool {
		m := regexp.MustCompile(`admin token\s+([0-9a-f]+)`).FindStringSubmatch(out.String())
		if m != nil {
			token = m[1]
		}
		return token != ""
	})
	admin := adminClient{base: "http://" + addr, token: token}
	waitFor(t, 60*time.Second, "the demo fleet's four workers", func() bool {
		_, body := admin.workers(t)
		if workerCount(body) != 4 {
			return false
		}
		for _, w := range body["workers"].([]any) {
			if w.(map[string]any)["model"] != demoModel {
				return false
			}
		}
		return true
	})

	const requests = 6
	for i := range requests {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":5,"stream":%t,"messages":[{"role":"user","content":"hello %d"}]}`, demoModel, i%2 == 1, i)
		resp, err := http.Post(admin.base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(b))
	}

	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case <-exited:
		require.NoError(t, exitErr, "logs:\n%s", logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("demo did not stop on SIGINT; logs:\n%s", logs)
	}
	assert.Contains(t, logs.String(), `"msg":"recording closed"`)
	assert.Contains(t, logs.String(), `"dropped":0`)

	replayOut, err := run(t, "replay", db)
	require.NoError(t, err, replayOut)
	assert.Contains(t, replayOut, fmt.Sprintf("reproduced %d (100.00%%)", requests))
	assert.Contains(t, replayOut, "every selection reproduced")
}
