package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestUnsupportedBlockSizesAreLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	s := &Server{log: slog.New(slog.NewTextHandler(&buf, nil))}
	s.warnBlockSize("m", 8)
	s.warnBlockSize("m", 8)
	s.warnBlockSize("m", 128)
	s.warnBlockSize("other", 8)
	if n := strings.Count(buf.String(), "cannot hash prompts"); n != 3 {
		t.Fatalf("%d warnings, want one per (model, size):\n%s", n, buf.String())
	}
	for i := range maxBlockSizeWarnings + 10 {
		s.warnBlockSize("flood", 70000+i)
	}
	if got := s.blockSizeWarnings.Load(); got != maxBlockSizeWarnings {
		t.Fatalf("%d pairs remembered, want the cap %d", got, maxBlockSizeWarnings)
	}
}
