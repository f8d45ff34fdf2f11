package config

import "testing"

func TestValidateKVSources(t *testing.T) {
	const p = "dynamo.kv.sources"
	listener := BusClient{ID: "kv-listener-a", Role: BusRoleKVListener, TokenHash: hashB, Backends: []string{"vllm-1"}}
	src := KVSource{Backend: "vllm-1", Transport: KVSourceTransportEventBus, Namespace: "dynamo"}
	with := func(srcs ...KVSource) func(*Config) {
		return func(c *Config) {
			busOn(c)
			c.Dynamo.EventBus.Brokers = append(c.Dynamo.EventBus.Brokers, listener)
			c.Dynamo.KV.Sources = srcs
		}
	}
	runRules(t, []ruleCase{
		{"granted source", with(src), wantOK, "", ""},
		{"backend missing", with(KVSource{Transport: "event_bus", Namespace: "dynamo"}), wantErr, p + "[0].backend", "required"},
		{"backend with space", with(KVSource{Backend: "a b", Transport: "event_bus", Namespace: "dynamo"}), wantErr, p + "[0].backend", "spaces"},
		{"duplicate backend", with(src, src), wantErr, p + "[1].backend", "duplicate"},
		{"transport unknown", with(KVSource{Backend: "vllm-1", Transport: "sse", Namespace: "dynamo"}), wantErr, p + "[0].transport", "event_bus"},
		{"namespace missing", with(KVSource{Backend: "vllm-1", Transport: "event_bus"}), wantErr, p + "[0].namespace", "required"},
		{"namespace invalid", with(KVSource{Backend: "vllm-1", Transport: "event_bus", Namespace: "a/b"}), wantErr, p + "[0].namespace", "'/'"},
		{"bus disabled", func(c *Config) { c.Dynamo.KV.Sources = []KVSource{src} }, wantWarn, p + "[0].transport", "dynamo.event_bus.enabled is false"},
		{"no grant", func(c *Config) { busOn(c); c.Dynamo.KV.Sources = []KVSource{src} }, wantWarn, p + "[0].backend", "no kv_listener entry"},
		{"grant without source", with(), wantWarn, "dynamo.event_bus.brokers[1].backends[0]", "no matching dynamo.kv.sources"},
	})
}

func TestKVSourceNamespaceDefaultsToTheWatchedOne(t *testing.T) {
	c, err := Parse([]byte("dynamo:\n  kv:\n    sources:\n      - {backend: vllm-1, transport: event_bus}\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Dynamo.KV.Sources[0].Namespace; got != DefaultNamespace {
		t.Fatalf("namespace %q, want %q", got, DefaultNamespace)
	}
}
