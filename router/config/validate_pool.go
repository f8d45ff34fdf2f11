package config

import "reflect"

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
