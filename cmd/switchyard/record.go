package main

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"switchyard/recorder"
	"switchyard/router/config"
	"switchyard/router/server"
)

// newPickerSeed draws the seed of the router's picker sampling; a
// recording stores it so that a replay samples the same.
func newPickerSeed() uint64 { return rand.Uint64() | 1 }

// startRecording opens a live recording of a router running cfg with a
// picker seeded with seed: the run carries the configuration with its
// secrets masked, the picker the router selects with and the seed. A nil
// writer and no error when path is empty.
func startRecording(path string, cfg *config.Config, seed uint64, log *slog.Logger) (*recorder.Writer, error) {
	if path == "" {
		return nil, nil
	}
	masked, err := cfg.Masked().YAML()
	if err != nil {
		return nil, fmt.Errorf("--record: %w", err)
	}
	w, err := recorder.Create(path, recorder.Run{Kind: "live", Config: string(masked), Version: version,
		Picker: server.PickerName(cfg), Seed: seed, Start: time.Now()}, recorder.Options{Logger: log.With("component", "recorder")})
	if err != nil {
		return nil, fmt.Errorf("--record: %w", err)
	}
	log.Info("recording the routing core", "file", path, "run", w.RunID())
	return w, nil
}

// stopRecording drains and closes a recording (nil: nothing) and logs
// what it holds. Call it after the router is closed.
func stopRecording(w *recorder.Writer, log *slog.Logger) {
	if w == nil {
		return
	}
	st, err := w.Close()
	var written, dropped uint64
	for _, n := range st.Written {
		written += n
	}
	for _, n := range st.Dropped {
		dropped += n
	}
	if err != nil {
		log.Error("recording closed with errors", "run", w.RunID(), "written", written, "dropped", dropped, "error", err)
		return
	}
	if dropped > 0 {
		log.Warn("recording closed; records were dropped, so it cannot be replayed", "run", w.RunID(),
			"written", written, "dropped", dropped)
		return
	}
	log.Info("recording closed", "run", w.RunID(), "written", written, "dropped", 0)
}
