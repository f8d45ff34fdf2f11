package config

import (
	"path/filepath"
	"reflect"
	"strings"
	"unicode"
)

// inferencePool checks source inference_pool: the pool it names, and the
// endpoint picker in standalone mode that supplies its model and block
// size.
func (k *checker) inferencePool(c *Config) {
	if !c.Dynamo.Enabled {
		return
	}
	const p = "dynamo.discovery.inference_pool"
	ip := c.Dynamo.Discovery.InferencePool
	if ip.Name == "" {
		k.err(p+".name", "must name the InferencePool whose Pods are the workers")
	}
	if ip.Namespace == "" {
		k.err(p+".namespace", "must name the Kubernetes namespace of the pool")
	}
	if ip.KVEventsPort < 1 || ip.KVEventsPort > 65535 {
		k.err(p+".kv_events_port", "must be a port between 1 and 65535, got %d", ip.KVEventsPort)
	}
	if ip.KVReplayPort < 0 || ip.KVReplayPort > 65535 {
		k.err(p+".kv_replay_port", "must be 0 (no replay) or a port between 1 and 65535, got %d", ip.KVReplayPort)
	}
	if ip.KVEventsListen != "" {
		k.errIf(p+".kv_events_listen", checkHostPort(ip.KVEventsListen, true))
	}
	k.poolArtifact(p+".tokenizer", ip.Tokenizer)
	k.poolArtifact(p+".chat_template", ip.ChatTemplate)
	if ip.ChatTemplate.Set() && !ip.Tokenizer.Set() {
		k.err(p+".chat_template", "needs a tokenizer: a rendered chat is hashed as the tokenizer encodes it")
	}
	switch ip.ChatTemplate.TemplateKind() {
	case KindTokenizerConfig, KindChatTemplate, KindChatTemplateJSON:
	default:
		k.err(p+".chat_template.kind", "must be %s, %s or %s, got %q", KindTokenizerConfig, KindChatTemplate, KindChatTemplateJSON, ip.ChatTemplate.Kind)
	}
	if ip.Tokenizer.Kind != "" && ip.Tokenizer.Kind != KindTokenizerJSON {
		k.err(p+".tokenizer.kind", "must be %s (a tokenizer.json) or empty, got %q", KindTokenizerJSON, ip.Tokenizer.Kind)
	}
	if !c.EPP.Enabled || c.EPP.Mode != EPPModeStandalone {
		k.err("dynamo.discovery.source", "inference_pool is the endpoint picker's standalone mode: set epp.enabled and epp.mode: standalone")
	}
}

// standalone checks the endpoint picker's standalone mode: workers come
// from an InferencePool, which carries no model card, so the model and
// the block size must be given.
func (k *checker) standalone(c *Config) {
	if c.Dynamo.Discovery.Source != SourceInferencePool {
		k.err("dynamo.discovery.source", "must be inference_pool in the endpoint picker's standalone mode, got %q", c.Dynamo.Discovery.Source)
	}
	if c.EPP.ModelName == "" {
		k.err("epp.model_name", "is required in standalone mode: the pool's Pods carry no model card")
	}
	if c.EPP.KVCacheBlockSize == 0 {
		k.err("epp.kv_cache_block_size", "is required in standalone mode: the pool's Pods carry no model card")
	}
}

// poolChange classifies a change under source inference_pool: any change
// of the pool or of what its records carry (model, block size) re-reads
// it; a new backoff only replaces the watcher.
func poolChange(old, new *Config) DiscoveryReload {
	o, n := old.Dynamo.Discovery, new.Dynamo.Discovery
	if !reflect.DeepEqual(o.InferencePool, n.InferencePool) || old.EPP.ModelName != new.EPP.ModelName ||
		old.EPP.KVCacheBlockSize != new.EPP.KVCacheBlockSize {
		return DiscoveryReload{ReloadReplace, ReasonOther}
	}
	if o.Kubernetes.WatchReconnectBackoff != n.Kubernetes.WatchReconnectBackoff {
		return DiscoveryReload{ReloadReplaceKeepSnapshot, ReasonBackoff}
	}
	return DiscoveryReload{}
}

// maxArtifactPath matches the card parser's bound on a CheckedFile path.
const maxArtifactPath = 4096

// poolArtifact checks one file a standalone pool names: both a path and
// a blake3 checksum, or neither. The path is an absolute local path or a
// URL; which schemes may be fetched is the artifact store's to say.
func (k *checker) poolArtifact(p string, a PoolArtifact) {
	if !a.Set() {
		return
	}
	switch {
	case a.Path == "":
		k.err(p+".path", "is required with a checksum: name the file the checksum pins")
	case len(a.Path) > maxArtifactPath:
		k.err(p+".path", "is %d bytes, limit %d", len(a.Path), maxArtifactPath)
	case strings.ContainsFunc(a.Path, unicode.IsControl):
		k.err(p+".path", "must not contain control characters")
	case !filepath.IsAbs(a.Path) && !strings.Contains(a.Path, "://"):
		k.err(p+".path", "must be an absolute path or a URL (file://, http(s)://, hf://), got %q", a.Path)
	}
	if !blake3Checksum.MatchString(a.Checksum) {
		k.err(p+".checksum", "must be \"blake3:\" followed by 64 lowercase hex digits (b3sum of the file): nothing is loaded unverified")
	}
}
