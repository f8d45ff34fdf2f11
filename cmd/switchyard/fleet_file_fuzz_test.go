package main

import (
	"os"
	"testing"

	"switchyard/router/config"
)

// FuzzFleetFile feeds arbitrary bytes through what config validate and
// the fleet command do with a fleet file: kind detection, decoding and
// validation. None of it may panic, and a file that validates has what
// the fleet needs to start.
func FuzzFleetFile(f *testing.F) {
	if data, err := os.ReadFile("../../deploy/config/fleet.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("model: m\nworkers: {prefill: 9223372036854775807, decode: 1}\n"))
	f.Add([]byte("etcd: {endpoints: [\"\"]}\nfrontend: \":0\"\nmodel: ${M:-m}\nworkers: {aggregated: 1}\n"))
	f.Add([]byte("etcd: {endpoints: [e]}\nfrontend: \":0\"\nmodel: m\nworkers: {aggregated: 1}\ntokenizer: builtin:switchyard-bpe-4k\n"))
	f.Add([]byte("etcd: {endpoints: [e]}\nfrontend: \":0\"\nmodel: m\nworkers: {aggregated: 1}\ntokenizer: fleet_file.go\ntokenizer_config: .\n"))
	f.Add([]byte("etcd: {endpoints: [e]}\nfrontend: \":0\"\nmodel: m\nworkers: {aggregated: 1}\nprofile: ../../profiles/llama-3.1-8b-h100-tp1.json\n"))
	f.Add([]byte("etcd: {endpoints: [e]}\nfrontend: \":0\"\nmodel: m\nworkers: {aggregated: 1}\nprofile: fleet_file.go\nsimple_workers: true\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, _ := config.TopLevelKeys(data)
		_ = looksLikeFleetFile(keys)
		var ff fleetFile
		if err := config.ParseInto(data, &ff, nil); err != nil {
			return
		}
		errs, _ := ff.validate()
		if len(errs) > 0 {
			return
		}
		w := ff.Workers
		if total := w.Prefill + w.Decode + w.Aggregated; total < 1 || total > maxFleetWorkers {
			t.Fatalf("a valid fleet file asks for %d workers", total)
		}
		if len(ff.Etcd.Endpoints) == 0 || ff.Model == "" || ff.Frontend == "" {
			t.Fatal("a valid fleet file lacks a required field")
		}
	})
}
