package main

import (
	"bytes"
	"io"
	"net"
	"runtime/trace"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNetworkWakeupsAreCounted traces goroutines exchanging bytes over
// loopback: each read that waited for data shows up as a runnable wait
// after a network wait.
func TestNetworkWakeupsAreCounted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()

	var buf bytes.Buffer
	require.NoError(t, trace.Start(&buf))
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	one := make([]byte, 1)
	for range 200 {
		_, err = c.Write(one)
		require.NoError(t, err)
		_, err = io.ReadFull(c, one)
		require.NoError(t, err)
	}
	require.NoError(t, c.Close())
	trace.Stop()

	w, err := read(&buf)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(w.runnable["waited: network"]), 100, "most of the 400 reads waited for their byte")
	require.NotEmpty(t, w.running)

	var out strings.Builder
	w.print(&out)
	require.Contains(t, out.String(), "runnable → running (all)")
	require.Contains(t, out.String(), "  after waited: network")
}

func TestNotATrace(t *testing.T) {
	_, err := read(strings.NewReader("not a trace"))
	require.Error(t, err)
}
