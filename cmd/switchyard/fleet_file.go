package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"switchyard/fakefleet/engine/perf"
	"switchyard/router/config"
)

// fleetFile is the fleet command's configuration. It is read with the
// router configuration's decoder (config.ParseInto): strict keys, problems
// at their field paths, ${VAR} references.
type fleetFile struct {
	// Discovery says where the workers are published for the router to
	// discover: etcd (the default), or a Kubernetes API server in the
	// shape one of the router's Kubernetes sources reads.
	Discovery struct {
		Source     string `yaml:"source"`
		Kubernetes struct {
			// Namespace is the Kubernetes namespace the objects go to.
			Namespace string `yaml:"namespace"`
			// Kubeconfig is a kubeconfig file; empty means in-cluster
			// credentials, else KUBECONFIG or ~/.kube/config.
			Kubeconfig string `yaml:"kubeconfig"`
		} `yaml:"kubernetes"`
	} `yaml:"discovery"`
	Etcd struct {
		Endpoints []string `yaml:"endpoints"`
	} `yaml:"etcd"`
	// Frontend is where the direct-mode frontend emulation (and the fault
	// API under /fleet/) listens.
	Frontend  string `yaml:"frontend"`
	Namespace string `yaml:"namespace"`
	Model     string `yaml:"model"`
	Workers   struct {
		Prefill    int `yaml:"prefill"`
		Decode     int `yaml:"decode"`
		Aggregated int `yaml:"aggregated"`
	} `yaml:"workers"`
	Card struct {
		BlockSize           int `yaml:"block_size"`
		TotalKVBlocks       int `yaml:"total_kv_blocks"`
		MaxNumBatchedTokens int `yaml:"max_num_batched_tokens"`
		MaxNumSeqs          int `yaml:"max_num_seqs"`
		ContextLength       int `yaml:"context_length"`
		DPSize              int `yaml:"data_parallel_size"`
	} `yaml:"card"`
	SpeedupRatio float64 `yaml:"speedup_ratio"`
	LeaseTTL     int64   `yaml:"lease_ttl_seconds"`
	// PublishSchedulerFields adds active_decode_blocks and
	// active_prefill_tokens to the published ActiveLoad (dynamo.vllm 1.4.2
	// sends only kv_used_blocks).
	PublishSchedulerFields bool `yaml:"publish_scheduler_fields"`
	// SimpleWorkers runs fakefleet/worker instead of the engine model (no
	// KV events, no prefix cache).
	SimpleWorkers bool `yaml:"simple_workers"`
	// Tokenizer is a tokenizer.json every worker's card names and the
	// frontend emulation tokenizes prompts with, or builtinTokenizerPrefix
	// and a fixture's name for the project's test tokenizer. Relative
	// paths start from the fleet file's folder.
	Tokenizer string `yaml:"tokenizer"`
	// TokenizerConfig is the tokenizer's tokenizer_config.json, with the
	// chat template the router renders chat requests with.
	TokenizerConfig string `yaml:"tokenizer_config"`
	// Profile is an engine profile (docs/engine-model.md#profiles) every
	// worker runs on instead of the mocker's timing; card values set here
	// win over the profile's. Relative paths start from the fleet file's
	// folder.
	Profile string `yaml:"profile"`

	// dir is the fleet file's folder.
	dir string
}

// fleetFileKeys are the top-level keys only a fleet file has; config
// validate tells the two kinds of file apart by them.
var fleetFileKeys = []string{"discovery", "etcd", "frontend", "namespace", "model", "workers", "card",
	"speedup_ratio", "lease_ttl_seconds", "publish_scheduler_fields", "simple_workers", "tokenizer", "tokenizer_config", "profile"}

// maxFleetWorkers bounds one fleet: each worker holds publisher sockets
// and an etcd lease, so a count past it is surely a typo.
const maxFleetWorkers = 256

// loadFleetFile reads and decodes a fleet file. Decoding problems come
// back as a *config.ParseError.
func loadFleetFile(path string) (*fleetFile, error) {
	data, err := config.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ff := fleetFile{dir: filepath.Dir(path)}
	if err := config.ParseInto(data, &ff, os.LookupEnv); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &ff, nil
}

// validate checks a decoded fleet file; zero card values and an empty
// namespace mean the fleet's defaults.
func (ff *fleetFile) validate() (errs, warns []config.Issue) {
	fail := func(path, format string, args ...any) {
		errs = append(errs, config.Issue{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	switch ff.Discovery.Source {
	case "", config.SourceEtcd:
		if len(ff.Etcd.Endpoints) == 0 {
			fail("etcd.endpoints", "at least one etcd endpoint is required (the etcd the router watches)")
		}
	case config.SourceKubernetes, config.SourceKubernetesPods:
		if ns := ff.Discovery.Kubernetes.Namespace; ns != "" && len(validation.IsDNS1123Label(ns)) > 0 {
			fail("discovery.kubernetes.namespace", "must be a Kubernetes namespace name (a DNS label), got %q", ns)
		}
	default:
		fail("discovery.source", "must be etcd, kubernetes or kubernetes_pods, got %q", ff.Discovery.Source)
	}
	for i, ep := range ff.Etcd.Endpoints {
		if strings.TrimSpace(ep) == "" {
			fail(fmt.Sprintf("etcd.endpoints[%d]", i), "must not be empty")
		}
	}
	if ff.Frontend == "" {
		fail("frontend", "required: host:port the direct-mode frontend emulation listens on")
	} else if _, _, err := net.SplitHostPort(ff.Frontend); err != nil {
		fail("frontend", "must be host:port")
	}
	if strings.TrimSpace(ff.Model) == "" {
		fail("model", "required: the model every worker serves")
	}
	if strings.ContainsAny(ff.Namespace, "/ \t\r\n") {
		fail("namespace", "must not contain '/' or whitespace")
	}
	w := ff.Workers
	counts := []struct {
		name string
		n    int
	}{{"prefill", w.Prefill}, {"decode", w.Decode}, {"aggregated", w.Aggregated}}
	total := 0
	for _, c := range counts {
		if c.n < 0 || c.n > maxFleetWorkers {
			fail("workers."+c.name, "must be between 0 and %d, got %d", maxFleetWorkers, c.n)
			total = -1
		} else if total >= 0 {
			total += c.n
		}
	}
	switch {
	case total > maxFleetWorkers:
		fail("workers", "at most %d workers in all, got %d", maxFleetWorkers, total)
	case total == 0:
		fail("workers", "no workers: set prefill and decode, or aggregated")
	}
	if w.Prefill > 0 && w.Decode == 0 && w.Aggregated == 0 {
		warns = append(warns, config.Issue{Path: "workers.decode", Message: "0 with prefill workers: prefill workers only serve through a decode worker"})
	}
	card := ff.Card
	for _, c := range []struct {
		name string
		n    int
	}{{"block_size", card.BlockSize}, {"total_kv_blocks", card.TotalKVBlocks}, {"max_num_batched_tokens", card.MaxNumBatchedTokens},
		{"max_num_seqs", card.MaxNumSeqs}, {"context_length", card.ContextLength}, {"data_parallel_size", card.DPSize}} {
		if c.n < 0 {
			fail("card."+c.name, "must not be negative (0 takes the default), got %d", c.n)
		}
	}
	if ff.SpeedupRatio < 0 {
		fail("speedup_ratio", "must not be negative (0 takes the default, 1)")
	}
	if ff.LeaseTTL < 0 {
		fail("lease_ttl_seconds", "must not be negative (0 takes the default)")
	}
	errs = append(errs, ff.validateTokenizer()...)
	if _, err := ff.profile(); err != nil {
		fail("profile", "%v", err)
	}
	return errs, warns
}

// profile loads the engine profile the fleet file names (nil for none),
// and checks the workers can run it: only engine workers, and the
// profile's KV capacity sizes the cards.
func (ff *fleetFile) profile() (*perf.Profile, error) {
	if ff.Profile == "" {
		return nil, nil
	}
	if ff.SimpleWorkers {
		return nil, errors.New("simple_workers do not run on a profile: drop one of them")
	}
	p, err := perf.LoadProfile(ff.artifactPath(ff.Profile))
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// looksLikeFleetFile reports whether a file's top-level keys are a fleet
// file's: at least one of them, and none of the router's.
func looksLikeFleetFile(keys []string) bool {
	fleet := false
	for _, k := range keys {
		if slices.Contains(config.TopLevelFields(), k) {
			return false
		}
		fleet = fleet || slices.Contains(fleetFileKeys, k)
	}
	return fleet
}
