package config

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// EffectiveEndpoints is the etcd client's endpoint list: the configured
// endpoints with bare host:port normalized to http://host:port, or, when
// the embedded server is enabled and no endpoint is listed, http://<listen>.
// A file cannot list endpoints beside an enabled embedded server (Validate
// refuses it), so listed endpoints there come from the running process,
// which knows the real address when listen asked for port 0.
func (e EtcdDiscovery) EffectiveEndpoints() []string {
	if e.Embedded.Enabled && len(e.Endpoints) == 0 {
		return []string{"http://" + e.Embedded.Listen}
	}
	out := make([]string, len(e.Endpoints))
	for i, ep := range e.Endpoints {
		out[i] = normalizeEndpoint(ep)
	}
	return out
}

// Namespaces lists the Dynamo namespaces the configured source watches,
// the primary one first.
func (d Discovery) Namespaces() []string {
	if d.Source == SourceInferencePool {
		// A pool's workers are registered in one fixed namespace.
		return []string{DefaultNamespace}
	}
	if d.Source == SourceKubernetes || d.Source == SourceKubernetesPods {
		if len(d.Kubernetes.DynamoNamespaces) > 0 {
			return d.Kubernetes.DynamoNamespaces
		}
		if d.Kubernetes.DynamoNamespace == "" {
			return nil
		}
		return []string{d.Kubernetes.DynamoNamespace}
	}
	if len(d.Etcd.Namespaces) > 0 {
		return d.Etcd.Namespaces
	}
	return []string{d.Etcd.Namespace}
}

func normalizeEndpoint(ep string) string {
	if strings.Contains(ep, "://") {
		return ep
	}
	return "http://" + ep
}

// EffectiveArtifactCacheDir is where fetched artifacts are cached: the
// configured directory, or else switchyard/artifacts under the per-user
// cache directory ($XDG_CACHE_HOME, else ~/.cache on Linux). It fails only
// when neither is set and the environment names no home directory.
func (kv KV) EffectiveArtifactCacheDir() (string, error) {
	if kv.ArtifactCacheDir != "" {
		return kv.ArtifactCacheDir, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("dynamo.kv.artifact_cache_dir is empty and there is no per-user cache directory: %w", err)
	}
	return filepath.Join(base, "switchyard", "artifacts"), nil
}

// ArtifactPins are the checksums whose artifacts the router may load:
// dynamo.kv.pinned_artifacts and, under source inference_pool, those of
// the tokenizer and chat template the pool's settings name. Those name a
// file and its checksum together in the operator's own configuration, so
// they pin themselves; files a worker's card names are loaded only when
// pinned_artifacts lists them.
func (c *Config) ArtifactPins() []string {
	pins := c.Dynamo.KV.PinnedArtifacts
	if c.Dynamo.Discovery.Source != SourceInferencePool {
		return pins
	}
	ip := c.Dynamo.Discovery.InferencePool
	var extra []string
	for _, a := range []PoolArtifact{ip.Tokenizer, ip.ChatTemplate} {
		if a.Checksum != "" && !slices.Contains(pins, a.Checksum) && !slices.Contains(extra, a.Checksum) {
			extra = append(extra, a.Checksum)
		}
	}
	if len(extra) == 0 {
		return pins
	}
	return append(slices.Clone(pins), extra...)
}
