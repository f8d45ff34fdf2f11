package config

import (
	"fmt"
	"strconv"
	"strings"
)

// EPPVariable is one DYN_* variable the endpoint picker reads, and the
// configuration field it sets.
type EPPVariable struct {
	Name, Path string
	set        func(c *Config, v string) error
}

// EPPVariables are Dynamo's endpoint-picker variables, in the order its
// documentation lists them. Each sets one field of the configuration.
var EPPVariables = []EPPVariable{
	{"DYN_EPP_MODE", "epp.mode", func(c *Config, v string) error { c.EPP.Mode = v; return nil }},
	{"DYN_MODEL_NAME", "epp.model_name", func(c *Config, v string) error { c.EPP.ModelName = v; return nil }},
	{"DYN_KV_CACHE_BLOCK_SIZE", "epp.kv_cache_block_size", intVar(func(c *Config) *int { return &c.EPP.KVCacheBlockSize })},
	{"DYN_USE_KV_EVENTS", "dynamo.kv.use_kv_events", boolVar(func(c *Config) *bool { return &c.Dynamo.KV.UseKVEvents })},
	{"DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT", "dynamo.kv.overlap_score_credit", floatVar(func(c *Config) *float64 { return &c.Dynamo.KV.OverlapScoreCredit })},
	{"DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY", "dynamo.kv.overlap_score_credit_decay", floatVar(func(c *Config) *float64 { return &c.Dynamo.KV.OverlapScoreCreditDecay })},
	{"DYN_ROUTER_PREFILL_LOAD_SCALE", "dynamo.kv.prefill_load_scale", floatVar(func(c *Config) *float64 { return &c.Dynamo.KV.PrefillLoadScale })},
	{"DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT", "dynamo.kv.decode_active_request_weight", floatVar(func(c *Config) *float64 { return &c.Dynamo.KV.DecodeActiveRequestWeight })},
	{"DYN_ROUTER_TEMPERATURE", "dynamo.kv.router_temperature", floatVar(func(c *Config) *float64 { return &c.Dynamo.KV.RouterTemperature })},
	{"DYN_ROUTER_REPLICA_SYNC", "epp.replica_sync", boolVar(func(c *Config) *bool { return &c.EPP.ReplicaSync })},
	{"DYN_ROUTER_TRACK_ACTIVE_BLOCKS", "dynamo.kv.track_active_blocks", boolVar(func(c *Config) *bool { return &c.Dynamo.KV.TrackActiveBlocks })},
	{"DYN_ROUTER_TRACK_OUTPUT_BLOCKS", "dynamo.kv.track_output_blocks", boolVar(func(c *Config) *bool { return &c.Dynamo.KV.TrackOutputBlocks })},
	{"DYN_ROUTER_TRACK_PREFILL_TOKENS", "dynamo.kv.track_prefill_tokens", boolVar(func(c *Config) *bool { return &c.Dynamo.KV.TrackPrefillTokens })},
	{"DYN_EPP_PEER_SERVICE", "epp.peer_service", func(c *Config, v string) error { c.EPP.PeerService = v; return nil }},
	// Standalone mode's pool, by Switchyard's names for what GAIE's own
	// endpoint picker takes as --pool-name and --pool-namespace.
	{"DYN_EPP_POOL_NAME", "dynamo.discovery.inference_pool.name", func(c *Config, v string) error { c.Dynamo.Discovery.InferencePool.Name = v; return nil }},
	{"DYN_EPP_POOL_NAMESPACE", "dynamo.discovery.inference_pool.namespace", func(c *Config, v string) error {
		c.Dynamo.Discovery.InferencePool.Namespace = v
		return nil
	}},
	// Standalone mode's prompt rendering and bound KV-event listener: no
	// card names the tokenizer there, so the operator does.
	{"DYN_EPP_TOKENIZER", "dynamo.discovery.inference_pool.tokenizer.path", poolVar(func(ip *InferencePoolDiscovery) *string { return &ip.Tokenizer.Path })},
	{"DYN_EPP_TOKENIZER_CHECKSUM", "dynamo.discovery.inference_pool.tokenizer.checksum", poolVar(func(ip *InferencePoolDiscovery) *string { return &ip.Tokenizer.Checksum })},
	{"DYN_EPP_CHAT_TEMPLATE", "dynamo.discovery.inference_pool.chat_template.path", poolVar(func(ip *InferencePoolDiscovery) *string { return &ip.ChatTemplate.Path })},
	{"DYN_EPP_CHAT_TEMPLATE_CHECKSUM", "dynamo.discovery.inference_pool.chat_template.checksum", poolVar(func(ip *InferencePoolDiscovery) *string { return &ip.ChatTemplate.Checksum })},
	{"DYN_EPP_KV_EVENTS_LISTEN", "dynamo.discovery.inference_pool.kv_events_listen", poolVar(func(ip *InferencePoolDiscovery) *string { return &ip.KVEventsListen })},
}

// ApplyEPPVariables sets the fields of the DYN_* variables lookup finds
// (over the file's values) and returns which variable set which field
// path, so problems can be reported by the variable's name. A value that
// does not parse is an error naming the variable.
func ApplyEPPVariables(c *Config, lookup func(string) (string, bool)) (map[string]string, error) {
	from := map[string]string{}
	for _, v := range EPPVariables {
		raw, ok := lookup(v.Name)
		if !ok {
			continue
		}
		if err := v.set(c, strings.TrimSpace(raw)); err != nil {
			return nil, fmt.Errorf("%s=%q: %w", v.Name, raw, err)
		}
		from[v.Path] = v.Name
	}
	return from, nil
}

func intVar(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("must be an integer")
		}
		*field(c) = n
		return nil
	}
}

func floatVar(field func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f != f || f > 1e300 || f < -1e300 {
			return fmt.Errorf("must be a finite number")
		}
		*field(c) = f
		return nil
	}
}

// boolVar reads true/false (and 1/0, as Dynamo's variables accept).
func boolVar(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "true", "1":
			*field(c) = true
		case "false", "0":
			*field(c) = false
		default:
			return fmt.Errorf("must be true or false")
		}
		return nil
	}
}

// poolVar sets a string field of the standalone pool's settings.
func poolVar(field func(*InferencePoolDiscovery) *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		*field(&c.Dynamo.Discovery.InferencePool) = v
		return nil
	}
}
