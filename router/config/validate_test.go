package config

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestValidateServerAdminBackends(t *testing.T) {
	runRules(t, []ruleCase{
		{"bind any interface", func(c *Config) { c.Server.BindAddress = ":8080" }, wantOK, "", ""},
		{"bind ipv6", func(c *Config) { c.Server.BindAddress = "[::1]:8080" }, wantOK, "", ""},
		{"bind without port", func(c *Config) { c.Server.BindAddress = "localhost" }, wantErr, "server.bind_address", "host:port"},
		{"bind bad port", func(c *Config) { c.Server.BindAddress = "localhost:99999" }, wantErr, "server.bind_address", "port"},
		{"bind empty", func(c *Config) { c.Server.BindAddress = "" }, wantErr, "server.bind_address", "empty"},

		{"admin token set", nil, wantOK, "admin.token", ""},
		{"admin token empty", func(c *Config) { c.Admin.Token = "" }, wantWarn, "admin.token", "admin API disabled"},
		{"admin token whitespace", func(c *Config) { c.Admin.Token = "   " }, wantErr, "admin.token", "whitespace"},
		{"admin token inner space", func(c *Config) { c.Admin.Token = "a b" }, wantErr, "admin.token", "whitespace"},
		{"admin token short", func(c *Config) { c.Admin.Token = "change-me" }, wantWarn, "admin.token", "shorter than 16"},
		{"admin token sixteen", func(c *Config) { c.Admin.Token = strings.Repeat("t", 16) }, wantOK, "admin.token", "shorter"},

		{"backend name empty", func(c *Config) { c.Backends[0].Name = "" }, wantErr, "backends[0].name", "empty"},
		{"backend name spaces", func(c *Config) { c.Backends[0].Name = "a b" }, wantErr, "backends[0].name", "whitespace"},
		{"backend name duplicate", func(c *Config) { c.Backends = append(c.Backends, c.Backends[0]) }, wantErr, "backends[1].name", "duplicate"},
		{"backend type", func(c *Config) { c.Backends[0].Type = "grpc" }, wantErr, "backends[0].type", "openai"},
		{"backend url https with base path", func(c *Config) { c.Backends[0].URL = "https://f.example:443/v1" }, wantOK, "", ""},
		{"backend url empty", func(c *Config) { c.Backends[0].URL = "" }, wantErr, "backends[0].url", "empty"},
		{"backend url scheme", func(c *Config) { c.Backends[0].URL = "ftp://f:21" }, wantErr, "backends[0].url", "http"},
		{"backend url no host", func(c *Config) { c.Backends[0].URL = "http://" }, wantErr, "backends[0].url", "host"},
		{"backend url query", func(c *Config) { c.Backends[0].URL = "http://f:1/?a=b" }, wantErr, "backends[0].url", "query"},
		{"backend url password", func(c *Config) { c.Backends[0].URL = "http://u:p@f:1" }, wantErr, "backends[0].url", "credentials"},
		{"backend url user", func(c *Config) { c.Backends[0].URL = "https://u@f:1/v1" }, wantErr, "backends[0].url", "credentials"},
		{"backend url garbage", func(c *Config) { c.Backends[0].URL = "http://f:port" }, wantErr, "backends[0].url", "valid URL"},
		{"backend role prefill", func(c *Config) { c.Backends[0].Role = RolePrefill }, wantOK, "", ""},
		{"backend role", func(c *Config) { c.Backends[0].Role = "both" }, wantErr, "backends[0].role", "unified"},
		{"backend responses_api native", func(c *Config) { c.Backends[0].ResponsesAPI = ResponsesNative }, wantOK, "", ""},
		{"backend responses_api", func(c *Config) { c.Backends[0].ResponsesAPI = "yes" }, wantErr, "backends[0].responses_api", "native"},
		{"backend global prompts", func(c *Config) { c.Backends[0].GlobalPrompts = repeat("Be brief #.", MaxGlobalPrompts) }, wantOK, "", ""},
		{"backend global prompts too many", func(c *Config) { c.Backends[0].GlobalPrompts = repeat("p#", MaxGlobalPrompts+1) }, wantErr, "backends[0].global_prompts", "at most 16"},
		{"backend global prompt empty", func(c *Config) { c.Backends[0].GlobalPrompts = []string{"ok", " \n"} }, wantErr, "backends[0].global_prompts[1]", "empty"},
		{"backend global prompt largest", func(c *Config) { c.Backends[0].GlobalPrompts = []string{strings.Repeat("a", MaxGlobalPromptBytes)} }, wantOK, "", ""},
		{"backend global prompt too long", func(c *Config) { c.Backends[0].GlobalPrompts = []string{strings.Repeat("a", MaxGlobalPromptBytes+1)} }, wantErr, "backends[0].global_prompts[0]", "at most 65536 bytes"},
		{"backend global prompt not utf-8", func(c *Config) { c.Backends[0].GlobalPrompts = []string{"a\xff"} }, wantErr, "backends[0].global_prompts[0]", "UTF-8"},
		{"backend single leading system", func(c *Config) { c.Backends[0].RequiresSingleLeadingSystem = true }, wantOK, "", ""},
		{"backend model empty", func(c *Config) { c.Backends[0].Models = []string{"m", " "} }, wantErr, "backends[0].models[1]", "empty"},
		{"source", func(c *Config) { c.Dynamo.Discovery.Source = "consul" }, wantErr, "dynamo.discovery.source", "etcd, kubernetes, kubernetes_pods or inference_pool"},
	})
}

func TestValidateEtcdEndpoints(t *testing.T) {
	const eps = "dynamo.discovery.etcd.endpoints"
	set := func(v ...string) func(*Config) { return func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = v } }
	runRules(t, []ruleCase{
		{"http url", set("http://10.0.0.1:2379"), wantOK, "", ""},
		{"bare host:port", set("10.0.0.1:2379", "etcd-1:2379"), wantOK, "", ""},
		{"bare ipv6", set("[::1]:2379"), wantOK, "", ""},
		{"url ipv6", set("http://[fd00::1]:2379"), wantOK, "", ""},
		{"sixteen", set(repeat("e#:2379", 16)...), wantOK, "", ""},
		{"seventeen", set(repeat("e#:2379", 17)...), wantErr, eps, "at most 16"},
		{"empty when enabled", set(), wantErr, eps, "required"},
		{"empty when disabled", func(c *Config) { c.Dynamo.Enabled = false; c.Dynamo.Discovery.Etcd.Endpoints = nil }, wantOK, "", ""},
		{"empty under kubernetes source", func(c *Config) { podsBase(c); c.Dynamo.Discovery.Etcd.Endpoints = nil }, wantOK, "", ""},
		{"empty entry", set(""), wantErr, eps + "[0]", "empty"},
		{"whitespace", set("etcd :2379"), wantErr, eps + "[0]", "whitespace"},
		{"unbracketed ipv6", set("::1:2379"), wantErr, eps + "[0]", "brackets"},
		{"no port", set("http://etcd"), wantErr, eps + "[0]", "port"},
		{"bare no port", set("etcd"), wantErr, eps + "[0]", "port"},
		{"port zero", set("etcd:0"), wantErr, eps + "[0]", "1 to 65535"},
		{"port too big", set("etcd:70000"), wantErr, eps + "[0]", "1 to 65535"},
		{"scheme", set("unix://etcd:2379"), wantErr, eps + "[0]", "http:// or https://"},
		{"user and password", set("http://root:hunter2@etcd:2379"), wantErr, eps + "[0]", "credentials"},
		{"user only", set("http://root@etcd:2379"), wantErr, eps + "[0]", "credentials"},
		{"bare with user", set("root@etcd:2379"), wantErr, eps + "[0]", "credentials"},
		{"query", set("http://etcd:2379?x=1"), wantErr, eps + "[0]", "query"},
		{"empty query", set("http://etcd:2379?"), wantErr, eps + "[0]", "query"},
		{"fragment", set("http://etcd:2379#a"), wantErr, eps + "[0]", "fragment"},
		{"empty fragment", set("http://etcd:2379#"), wantErr, eps + "[0]", "fragment"},
		{"path", set("http://etcd:2379/v3"), wantErr, eps + "[0]", "path"},
		{"root path", set("http://etcd:2379/"), wantErr, eps + "[0]", "path"},
		{"mixed schemes", set("http://a:1", "https://b:1"), wantErr, eps, "mix"},
		{"bare counts as http", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"a:1", "https://b:1"}
			c.Dynamo.Discovery.Etcd.TLS = &EtcdTLS{}
		}, wantErr, eps, "mix"},
	})
}

func TestEndpointMessagesDoNotLeakCredentials(t *testing.T) {
	c := validBase()
	c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://root:hunter2@etcd:2379"}
	errs, warns := c.Validate()
	for _, i := range append(errs, warns...) {
		assert.NotContains(t, i.Message, "hunter2")
	}
}

func TestValidateEtcdTLSAuthEmbedded(t *testing.T) {
	const p = "dynamo.discovery.etcd"
	https := func(c *Config) {
		c.Dynamo.Discovery.Etcd.Endpoints = []string{"https://10.0.0.5:2379"}
		c.Dynamo.Discovery.Etcd.TLS = &EtcdTLS{CACert: "/ca.pem"}
	}
	runRules(t, []ruleCase{
		{"https with tls", https, wantOK, "", ""},
		{"https without tls block", func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{"https://10.0.0.5:2379"} }, wantOK, "", ""},
		{"http with tls", func(c *Config) { c.Dynamo.Discovery.Etcd.TLS = &EtcdTLS{} }, wantErr, p + ".tls", "http://"},
		{"client pair", func(c *Config) {
			https(c)
			c.Dynamo.Discovery.Etcd.TLS.ClientCert, c.Dynamo.Discovery.Etcd.TLS.ClientKey = "/c.pem", "/k.pem"
		}, wantOK, "", ""},
		{"client cert alone", func(c *Config) { https(c); c.Dynamo.Discovery.Etcd.TLS.ClientCert = "/c.pem" }, wantErr, p + ".tls", "together"},
		{"client key alone", func(c *Config) { https(c); c.Dynamo.Discovery.Etcd.TLS.ClientKey = "/k.pem" }, wantErr, p + ".tls", "together"},
		{"auth over https", func(c *Config) { https(c); c.Dynamo.Discovery.Etcd.Auth = &EtcdAuth{Username: "u", Password: "p"} }, wantOK, p + ".auth", "plaintext"},
		{"auth over http", func(c *Config) { c.Dynamo.Discovery.Etcd.Auth = &EtcdAuth{Username: "u", Password: "p"} }, wantWarn, p + ".auth", "plaintext"},
		{"auth without username", func(c *Config) { https(c); c.Dynamo.Discovery.Etcd.Auth = &EtcdAuth{Password: "p"} }, wantErr, p + ".auth.username", "empty"},

		{"embedded", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Endpoints = nil
			c.Dynamo.Discovery.Etcd.Embedded.Enabled = true
		}, wantOK, "", ""},
		{"embedded with endpoints", func(c *Config) { c.Dynamo.Discovery.Etcd.Embedded.Enabled = true }, wantErr, p + ".endpoints", "embedded"},
		{"embedded listen without host", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Endpoints = nil
			c.Dynamo.Discovery.Etcd.Embedded = EmbeddedEtcd{Enabled: true, Listen: ":2379"}
		}, wantErr, p + ".embedded.listen", "host"},
		{"embedded with tls", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Endpoints = nil
			c.Dynamo.Discovery.Etcd.Embedded.Enabled = true
			c.Dynamo.Discovery.Etcd.TLS = &EtcdTLS{}
		}, wantErr, p + ".tls", "http://"},
		{"embedded collides with server", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Endpoints = nil
			c.Dynamo.Discovery.Etcd.Embedded = EmbeddedEtcd{Enabled: true, Listen: "localhost:8080"}
		}, wantErr, p + ".embedded.listen", "server.bind_address"},
		{"embedded collides with event bus", func(c *Config) {
			busOn(c)
			c.Dynamo.Discovery.Etcd.Endpoints = nil
			c.Dynamo.Discovery.Etcd.Embedded = EmbeddedEtcd{Enabled: true, Listen: "127.0.0.1:7443"}
		}, wantErr, p + ".embedded.listen", "event_bus.listen"},
	})
}

func TestValidateEtcdNamespacesAndBackoff(t *testing.T) {
	const p = "dynamo.discovery.etcd"
	runRules(t, []ruleCase{
		{"namespace", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "dyn-prod.a_b" }, wantOK, "", ""},
		{"namespace empty", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "" }, wantErr, p + ".namespace", "empty"},
		{"namespace slash", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "a/b" }, wantErr, p + ".namespace", "'/'"},
		{"namespace space", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "a b" }, wantErr, p + ".namespace", "whitespace"},
		{"namespace control", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespace = "a\x01" }, wantErr, p + ".namespace", "control"},
		{"namespaces", twoNamespaces, wantOK, "", ""},
		{"namespaces sixteen", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Namespaces = repeat("n#", 16)
			c.Dynamo.Shim = Shim{}
		}, wantOK, "", ""},
		{"namespaces seventeen", func(c *Config) {
			c.Dynamo.Discovery.Etcd.Namespaces = repeat("n#", 17)
			c.Dynamo.Shim = Shim{}
		}, wantErr, p + ".namespaces", "at most 16"},
		{"namespaces duplicate", func(c *Config) { twoNamespaces(c); c.Dynamo.Discovery.Etcd.Namespaces[1] = "prod" }, wantErr, p + ".namespaces[1]", "duplicate"},
		{"namespaces bad entry", func(c *Config) { twoNamespaces(c); c.Dynamo.Discovery.Etcd.Namespaces[0] = "a/b" }, wantErr, p + ".namespaces[0]", "'/'"},
		{"namespaces with non-default namespace", func(c *Config) { twoNamespaces(c); c.Dynamo.Discovery.Etcd.Namespace = "other" }, wantErr, p + ".namespaces", "non-default"},
		{"single namespaces entry with backends", func(c *Config) { c.Dynamo.Discovery.Etcd.Namespaces = []string{"prod"} }, wantOK, "", ""},

		{"backoff equal", func(c *Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = Backoff{dur(time.Second), dur(time.Second)}
		}, wantOK, "", ""},
		{"backoff max below initial", func(c *Config) {
			c.Dynamo.Discovery.Etcd.WatchReconnectBackoff = Backoff{dur(time.Minute), dur(time.Second)}
		}, wantErr, p + ".watch_reconnect_backoff.max", ">= initial"},
		{"backoff initial zero", func(c *Config) { c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Initial = 0 }, wantErr, p + ".watch_reconnect_backoff.initial", "greater than 0"},
		{"backoff max zero", func(c *Config) { c.Dynamo.Discovery.Etcd.WatchReconnectBackoff.Max = 0 }, wantErr, p + ".watch_reconnect_backoff.max", "greater than 0"},
	})
}

func TestValidateKubernetes(t *testing.T) {
	const p = "dynamo.discovery.kubernetes"
	pods := func(f func(c *Config)) func(*Config) {
		return func(c *Config) {
			podsBase(c)
			if f != nil {
				f(c)
			}
		}
	}
	kube := func(f func(k *KubernetesDiscovery)) func(*Config) {
		return pods(func(c *Config) { f(&c.Dynamo.Discovery.Kubernetes) })
	}
	models := func(m ...ComponentModel) func(*Config) {
		return kube(func(k *KubernetesDiscovery) { k.Model = ""; k.Models = m })
	}
	// Several graphs need shim pools; these cases are about discovery, so
	// they drop the shim.
	multi := func(m ...ComponentModel) func(*Config) {
		return pods(func(c *Config) {
			c.Dynamo.Shim = Shim{}
			k := &c.Dynamo.Discovery.Kubernetes
			k.DynamoNamespace, k.DynamoNamespaces = "", []string{"a", "b"}
			k.Model, k.Models = "", m
		})
	}
	metadata := func(f func(k *KubernetesDiscovery)) func(*Config) {
		return pods(func(c *Config) {
			c.Dynamo.Discovery.Source = SourceKubernetes
			c.Dynamo.Discovery.Kubernetes.Model = ""
			f(&c.Dynamo.Discovery.Kubernetes)
		})
	}
	many := make([]ComponentModel, 257)
	for i := range many {
		many[i] = ComponentModel{Component: repeat("c#", i+1)[i], Model: "m"}
	}
	runRules(t, []ruleCase{
		{"pods", pods(nil), wantOK, "", ""},
		{"pods warns about missing signals", pods(nil), wantWarn, "dynamo.discovery.source", "round-robin"},
		{"namespace upper case", kube(func(k *KubernetesDiscovery) { k.Namespace = "Dynamo" }), wantErr, p + ".namespace", "DNS-1123"},
		{"namespace empty", kube(func(k *KubernetesDiscovery) { k.Namespace = "" }), wantErr, p + ".namespace", "empty"},
		{"namespace too long", kube(func(k *KubernetesDiscovery) { k.Namespace = strings.Repeat("a", 64) }), wantErr, p + ".namespace", "DNS-1123"},
		{"dynamo_namespace missing", kube(func(k *KubernetesDiscovery) { k.DynamoNamespace = "" }), wantErr, p + ".dynamo_namespace", "empty"},
		{"dynamo_namespace label value", kube(func(k *KubernetesDiscovery) { k.DynamoNamespace = "Dyn_A.1" }), wantOK, "", ""},
		{"dynamo_namespace not a label value", kube(func(k *KubernetesDiscovery) { k.DynamoNamespace = "dyn a!" }), wantErr, p + ".dynamo_namespace", "label value"},
		{"dynamo_namespace and list", kube(func(k *KubernetesDiscovery) { k.DynamoNamespaces = []string{"b"} }), wantErr, p + ".dynamo_namespaces", "dynamo_namespace"},
		{"dynamo_namespaces too many", kube(func(k *KubernetesDiscovery) { k.DynamoNamespace, k.DynamoNamespaces = "", repeat("n#", 17) }), wantErr, p + ".dynamo_namespaces", "at most 16"},
		{"dynamo_namespaces duplicate", kube(func(k *KubernetesDiscovery) { k.DynamoNamespace, k.DynamoNamespaces = "", []string{"a", "a"} }), wantErr, p + ".dynamo_namespaces[1]", "duplicate"},
		{"backoff", kube(func(k *KubernetesDiscovery) { k.WatchReconnectBackoff.Max = dur(time.Millisecond) }), wantErr, p + ".watch_reconnect_backoff.max", ">= initial"},

		{"model and models", kube(func(k *KubernetesDiscovery) { k.Models = []ComponentModel{{Component: "c", Model: "m"}} }), wantErr, p + ".models", "exactly one"},
		{"neither model nor models", kube(func(k *KubernetesDiscovery) { k.Model = "" }), wantErr, p + ".model", "required"},
		{"model with whitespace", kube(func(k *KubernetesDiscovery) { k.Model = "solar pro" }), wantErr, p + ".model", "whitespace"},
		{"models", models(ComponentModel{Component: "VllmWorker-a", Model: "m1"}, ComponentModel{Component: "VllmWorker-b", Model: "m2"}), wantOK, "", ""},
		{"models too many", models(many...), wantErr, p + ".models", "at most 256"},
		{"models component empty", models(ComponentModel{Model: "m"}), wantErr, p + ".models[0].component", "empty"},
		{"models model empty", models(ComponentModel{Component: "c"}), wantErr, p + ".models[0].model", "empty"},
		{"models model whitespace", models(ComponentModel{Component: "c", Model: "a b"}), wantErr, p + ".models[0].model", "whitespace"},
		{"models duplicate component", models(ComponentModel{Component: "c", Model: "a"}, ComponentModel{Component: "c", Model: "b"}), wantErr, p + ".models[1].component", "duplicate"},
		{"models matching namespace", models(ComponentModel{Component: "c", Model: "a", DynamoNamespace: "dyn-a"}), wantOK, "", ""},
		{"models other namespace", models(ComponentModel{Component: "c", Model: "a", DynamoNamespace: "dyn-b"}), wantErr, p + ".models[0].dynamo_namespace", "differs"},
		{"multi models with namespaces", multi(ComponentModel{Component: "c", Model: "x", DynamoNamespace: "a"}, ComponentModel{Component: "c", Model: "y", DynamoNamespace: "b"}), wantOK, "", ""},
		{"dynamo_namespaces with one model", pods(func(c *Config) {
			c.Dynamo.Shim = Shim{}
			c.Dynamo.Discovery.Kubernetes.DynamoNamespace, c.Dynamo.Discovery.Kubernetes.DynamoNamespaces = "", []string{"a", "b"}
		}), wantOK, "", ""},
		{"multi models need namespace", multi(ComponentModel{Component: "c", Model: "x"}), wantErr, p + ".models[0].dynamo_namespace", "required"},
		{"multi models unknown namespace", multi(ComponentModel{Component: "c", Model: "x", DynamoNamespace: "z"}), wantErr, p + ".models[0].dynamo_namespace", "not listed"},
		{"multi models duplicate", multi(ComponentModel{Component: "c", Model: "x", DynamoNamespace: "a"}, ComponentModel{Component: "c", Model: "y", DynamoNamespace: "a"}), wantErr, p + ".models[1].component", "duplicate"},

		{"metadata source without model", metadata(func(k *KubernetesDiscovery) { k.Model = "" }), wantOK, p + ".model", "ignored"},
		{"metadata source with model", metadata(func(k *KubernetesDiscovery) { k.Model = "m" }), wantWarn, p + ".model", "ignored"},
		{"metadata source with models", metadata(func(k *KubernetesDiscovery) { k.Models = []ComponentModel{{Component: "c", Model: "m"}} }), wantWarn, p + ".models", "ignored"},
		{"kubernetes block unused under etcd", func(c *Config) { c.Dynamo.Discovery.Kubernetes.Namespace = "Not Valid" }, wantOK, "", ""},
	})
}

func TestValidateLoad(t *testing.T) {
	const p = "dynamo.load"
	runRules(t, []ruleCase{
		{"staleness floor", func(c *Config) { c.Dynamo.Load.MaxStaleness = dur(100 * time.Millisecond) }, wantOK, "", ""},
		{"staleness ceiling", func(c *Config) { c.Dynamo.Load.MaxStaleness = dur(5 * time.Minute) }, wantOK, "", ""},
		{"staleness too short", func(c *Config) { c.Dynamo.Load.MaxStaleness = dur(99 * time.Millisecond) }, wantErr, p + ".max_staleness", "between 100ms and 5m"},
		{"staleness too long", func(c *Config) { c.Dynamo.Load.MaxStaleness = dur(5*time.Minute + time.Second) }, wantErr, p + ".max_staleness", "between"},
		{"transport broker", func(c *Config) { busOn(c); c.Dynamo.Load.Transport = TransportBroker }, wantOK, "", ""},
		{"transport unknown", func(c *Config) { c.Dynamo.Load.Transport = "zmq" }, wantErr, p + ".transport", "direct or broker"},
		{"broker without event bus", func(c *Config) { c.Dynamo.Load.Transport = TransportBroker }, wantWarn, p + ".transport", "event_bus"},
		{"cidrs v4 and v6", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/8", "fd00::/8"} }, wantOK, "", ""},
		{"cidrs sixty-four", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = cidrs(64) }, wantOK, "", ""},
		{"cidrs sixty-five", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = cidrs(65) }, wantErr, p + ".direct_allow_cidrs", "at most 64"},
		{"cidr invalid", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/33"} }, wantErr, p + ".direct_allow_cidrs[0]", "CIDR"},
		{"cidr bare address", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.1"} }, wantErr, p + ".direct_allow_cidrs[0]", "CIDR"},
		{"cidr duplicate", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = []string{"10.0.0.0/8", "10.0.0.0/8"} }, wantErr, p + ".direct_allow_cidrs[1]", "duplicate"},
		{"cidrs unset", func(c *Config) { c.Dynamo.Load.DirectAllowCIDRs = nil }, wantWarn, p + ".direct_allow_cidrs", "Pod CIDRs"},
		{"cidrs unset under broker", func(c *Config) {
			busOn(c)
			c.Dynamo.Load.Transport, c.Dynamo.Load.DirectAllowCIDRs = TransportBroker, nil
		}, wantOK, p + ".direct_allow_cidrs", "Pod CIDRs"},
		{"cidrs unset while disabled", func(c *Config) { c.Dynamo.Enabled, c.Dynamo.Load.DirectAllowCIDRs = false, nil }, wantOK, p + ".direct_allow_cidrs", "Pod CIDRs"},
	})
}

func cidrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "10." + strconv.Itoa(i) + ".0.0/16"
	}
	return out
}

func TestValidateExternalEtcdInDirectMode(t *testing.T) {
	const ep = "dynamo.discovery.etcd.endpoints[0]"
	set := func(host string) func(*Config) {
		return func(c *Config) { c.Dynamo.Discovery.Etcd.Endpoints = []string{host} }
	}
	runRules(t, []ruleCase{
		{"private ip", set("10.1.2.3:2379"), wantOK, ep, "external"},
		{"loopback", set("127.0.0.1:2379"), wantOK, ep, "external"},
		{"service name", set("etcd:2379"), wantOK, ep, "external"},
		{"svc name", set("etcd-0.etcd.dynamo.svc:2379"), wantOK, ep, "external"},
		{"cluster.local", set("etcd.dynamo.svc.cluster.local:2379"), wantOK, ep, "external"},
		{"ipv6 ula", set("[fd00::1]:2379"), wantOK, ep, "external"},
		{"public ip", set("8.8.8.8:2379"), wantWarn, ep, "appears external"},
		{"public name", set("etcd.example.com:2379"), wantWarn, ep, "appears external"},
		{"public under broker", func(c *Config) {
			busOn(c)
			c.Dynamo.Load.Transport = TransportBroker
			c.Dynamo.Discovery.Etcd.Endpoints = []string{"etcd.example.com:2379"}
		}, wantOK, ep, "external"},
	})
}

func TestValidateShim(t *testing.T) {
	const p = "dynamo.shim"
	add := func(b Backend) func(*Config) {
		return func(c *Config) {
			c.Backends = append(c.Backends, b)
			c.Dynamo.Shim.Backends = append(c.Dynamo.Shim.Backends, b.Name)
		}
	}
	mm := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[strings.Repeat("k", i+1)] = "v"
		}
		return m
	}
	names := func(n int) func(*Config) {
		return func(c *Config) {
			c.Dynamo.Shim.Backends = nil
			for i := range n {
				name := "f" + strconv.Itoa(i)
				c.Backends = append(c.Backends, backend(name, "http://f:1"))
				c.Dynamo.Shim.Backends = append(c.Dynamo.Shim.Backends, name)
			}
		}
	}
	runRules(t, []ruleCase{
		{"sixty-four replicas", names(64), wantOK, "", ""},
		{"sixty-five replicas", names(65), wantErr, p + ".backends", "at most 64"},
		{"unknown backend", func(c *Config) { c.Dynamo.Shim.Backends = []string{"nope"} }, wantErr, p + ".backends[0]", "backends[].name"},
		{"empty name", func(c *Config) { c.Dynamo.Shim.Backends = []string{""} }, wantErr, p + ".backends[0]", "empty"},
		{"duplicate", func(c *Config) { c.Dynamo.Shim.Backends = []string{"frontend", "frontend"} }, wantErr, p + ".backends[1]", "duplicate"},
		{"internal replica", add(with(backend("i", "http://i:1"), func(b *Backend) { b.Internal = true })), wantWarn, p + ".backends[1]", "internal: true"},
		{"disabled replica", add(with(backend("d", "http://d:1"), func(b *Backend) { b.Enabled = ptr(false) })), wantWarn, p + ".backends[1]", "enabled: false"},
		{"listed while dynamo disabled", func(c *Config) { c.Dynamo.Enabled = false }, wantWarn, p, "dynamo.enabled is false"},
		{"listed while disaggregation disabled", func(c *Config) { c.DisaggregatedServing.Enabled = false }, wantWarn, p, "disaggregated_serving.enabled is false"},
		{"listed while both enabled", nil, wantOK, p, "is false"},
		{"dynamo without shim", func(c *Config) { c.Dynamo.Shim.Backends = nil }, wantWarn, p, "no shim backend is listed"},
		{"dynamo with shim", nil, wantOK, p, "no shim backend"},
		{"no shim while dynamo disabled", func(c *Config) { c.Dynamo.Enabled, c.Dynamo.Shim.Backends = false, nil }, wantOK, p, "no shim backend"},
		{"every replica disabled", func(c *Config) { c.Backends[0].Enabled = ptr(false) }, wantWarn, p + ".backends", "cannot be served"},
		{"a pool with every replica disabled", func(c *Config) { twoNamespaces(c); c.Backends[1].Enabled = ptr(false) }, wantWarn, p + ".pools[1].backends", `namespace "canary" cannot be served`},
		{"backends and pools", func(c *Config) {
			c.Dynamo.Shim.Pools = []ShimPool{{Namespace: "dynamo", Backends: []string{"frontend"}}}
		}, wantErr, p, "not both"},
		{"single namespace pool", func(c *Config) {
			c.Dynamo.Shim = Shim{Pools: []ShimPool{{Namespace: "dynamo", Backends: []string{"frontend"}}}}
		}, wantOK, "", ""},

		{"pools per namespace", twoNamespaces, wantOK, "", ""},
		{"several namespaces with backends", func(c *Config) {
			twoNamespaces(c)
			c.Dynamo.Shim.Pools, c.Dynamo.Shim.Backends = nil, []string{"frontend"}
		}, wantErr, p + ".backends", "shim.pools"},
		{"pool for unknown namespace", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[0].Namespace = "staging" }, wantErr, p + ".pools[0].namespace", "not a configured"},
		{"pool namespace empty", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[0].Namespace = "" }, wantErr, p + ".pools[0].namespace", "empty"},
		{"two pools for one namespace", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[1].Namespace = "prod" }, wantErr, p + ".pools[1].namespace", "already has a pool"},
		{"namespace without pool", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools = c.Dynamo.Shim.Pools[:1] }, wantErr, p + ".pools", `"canary" has no pool`},
		{"backend in two pools", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[1].Backends = []string{"frontend"} }, wantErr, p + ".pools[1].backends[0]", "already belongs"},
		{"pool without backends", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[1].Backends = nil }, wantErr, p + ".pools[1].backends", "at least one"},
		{"pool unknown backend", func(c *Config) { twoNamespaces(c); c.Dynamo.Shim.Pools[1].Backends = []string{"x"} }, wantErr, p + ".pools[1].backends[0]", "backends[].name"},
		{"pool internal backend", func(c *Config) { twoNamespaces(c); c.Backends[1].Internal = true }, wantWarn, p + ".pools[1].backends[0]", "internal"},

		{"model map", func(c *Config) { c.Dynamo.Shim.ModelMap = map[string]string{"qwen3": "Qwen/Qwen3-32B"} }, wantOK, "", ""},
		{"model map limit", func(c *Config) { c.Dynamo.Shim.ModelMap = mm(1024) }, wantOK, "", ""},
		{"model map too big", func(c *Config) { c.Dynamo.Shim.ModelMap = mm(1025) }, wantErr, p + ".model_map", "at most 1024"},
		{"model map empty key", func(c *Config) { c.Dynamo.Shim.ModelMap = map[string]string{"": "m"} }, wantErr, p + `.model_map[""]`, "key"},
		{"model map empty value", func(c *Config) { c.Dynamo.Shim.ModelMap = map[string]string{"a": ""} }, wantErr, p + `.model_map["a"]`, "value"},
	})
}

func TestValidateKV(t *testing.T) {
	const p = "dynamo.kv"
	runRules(t, []ruleCase{
		{"defaults", func(c *Config) { c.Dynamo.KV.Enabled = true; c.Dynamo.KV.PinnedArtifacts = []string{pin} }, wantOK, "", ""},
		{"credit zero", func(c *Config) { c.Dynamo.KV.OverlapScoreCredit = 0 }, wantOK, "", ""},
		{"credit above one", func(c *Config) { c.Dynamo.KV.OverlapScoreCredit = 1.1 }, wantErr, p + ".overlap_score_credit", "between 0.0 and 1.0"},
		{"credit negative", func(c *Config) { c.Dynamo.KV.OverlapScoreCredit = -0.1 }, wantErr, p + ".overlap_score_credit", "between"},
		{"scale negative", func(c *Config) { c.Dynamo.KV.PrefillLoadScale = -1 }, wantErr, p + ".prefill_load_scale", ">= 0"},
		{"temperature", func(c *Config) { c.Dynamo.KV.RouterTemperature = 0.5 }, wantOK, "", ""},
		{"temperature negative", func(c *Config) { c.Dynamo.KV.RouterTemperature = -1 }, wantErr, p + ".router_temperature", ">= 0"},
		{"pin malformed", func(c *Config) { c.Dynamo.KV.PinnedArtifacts = []string{"blake3:abc"} }, wantErr, p + ".pinned_artifacts[0]", "64 lowercase hex"},
		{"pin upper case", func(c *Config) { c.Dynamo.KV.PinnedArtifacts = []string{strings.ToUpper(pin)} }, wantErr, p + ".pinned_artifacts[0]", "blake3:"},
		{"pin duplicate", func(c *Config) { c.Dynamo.KV.PinnedArtifacts = []string{pin, pin} }, wantErr, p + ".pinned_artifacts[1]", "duplicate"},
		{"enabled without pins", func(c *Config) { c.Dynamo.KV.Enabled = true }, wantWarn, p + ".pinned_artifacts", "empty"},
		{"pins at the limit", func(c *Config) { c.Dynamo.KV.PinnedArtifacts = pins(MaxPinnedArtifacts) }, wantOK, "", ""},
		{"too many pins", func(c *Config) { c.Dynamo.KV.PinnedArtifacts = pins(MaxPinnedArtifacts + 1) }, wantErr, p + ".pinned_artifacts", "at most 256"},
		{"cache dir absolute", func(c *Config) { c.Dynamo.KV.ArtifactCacheDir = "/var/cache/switchyard" }, wantOK, "", ""},
		{"cache dir relative", func(c *Config) { c.Dynamo.KV.ArtifactCacheDir = "cache/artifacts" }, wantErr, p + ".artifact_cache_dir", "absolute"},
		{"cache dir control", func(c *Config) { c.Dynamo.KV.ArtifactCacheDir = "/var/cache/\x00" }, wantErr, p + ".artifact_cache_dir", "control"},
		{"busy threshold", func(c *Config) { c.Dynamo.KV.ConditionalDisaggregation.DecodeBusyThreshold = ptr(0.8) }, wantOK, "", ""},
		{"busy threshold above one", func(c *Config) { c.Dynamo.KV.ConditionalDisaggregation.DecodeBusyThreshold = ptr(1.5) }, wantErr, p + ".conditional_disaggregation.decode_busy_threshold", "between 0.0 and 1.0"},
		{"busy threshold negative", func(c *Config) { c.Dynamo.KV.ConditionalDisaggregation.DecodeBusyThreshold = ptr(-0.5) }, wantErr, p + ".conditional_disaggregation.decode_busy_threshold", "between"},
		{"conditional disaggregation off", nil, wantOK, p + ".conditional_disaggregation.enabled", "503"},
		{"conditional disaggregation on", func(c *Config) { c.Dynamo.KV.ConditionalDisaggregation.Enabled = true }, wantWarn, p + ".conditional_disaggregation.enabled", "503"},
	})
}

func TestValidateEventBus(t *testing.T) {
	const p = "dynamo.event_bus"
	on := func(f func(b *EventBus)) func(*Config) {
		return func(c *Config) {
			busOn(c)
			f(&c.Dynamo.EventBus)
		}
	}
	listener := BusClient{ID: "kv-listener-a", Role: BusRoleKVListener, TokenHash: hashB, Backends: []string{"vllm-1"}}
	runRules(t, []ruleCase{
		{"enabled", on(func(*EventBus) {}), wantOK, "", ""},
		{"listen empty", on(func(b *EventBus) { b.Listen = "" }), wantErr, p + ".listen", "empty"},
		{"listen malformed", on(func(b *EventBus) { b.Listen = "7443" }), wantErr, p + ".listen", "host:port"},
		{"listen collides with server", on(func(b *EventBus) { b.Listen = "127.0.0.1:8080" }), wantErr, p + ".listen", "server.bind_address"},
		{"wildcard collides with server", on(func(b *EventBus) { b.Listen = "0.0.0.0:8080" }), wantErr, p + ".listen", "server.bind_address"},
		{"localhost collides with loopback", func(c *Config) {
			busOn(c)
			c.Dynamo.EventBus.Listen = "localhost:9000"
			c.Server.BindAddress = "127.0.0.1:9000"
		}, wantErr, p + ".listen", "server.bind_address"},
		{"different hosts same port", func(c *Config) { busOn(c); c.Dynamo.EventBus.Listen = "10.0.0.1:8080" }, wantOK, "", ""},
		{"disabled may share", func(c *Config) { c.Dynamo.EventBus.Listen = "127.0.0.1:8080" }, wantOK, "", ""},
		{"cert missing", on(func(b *EventBus) { b.TLS.Cert = "" }), wantErr, p + ".tls.cert", "required"},
		{"key missing", on(func(b *EventBus) { b.TLS.Key = "" }), wantErr, p + ".tls.key", "required"},
		{"no brokers", on(func(b *EventBus) { b.Brokers = nil }), wantWarn, p + ".brokers", "refused"},

		{"broker id empty", on(func(b *EventBus) { b.Brokers[0].ID = "" }), wantErr, p + ".brokers[0].id", "empty"},
		{"broker id upper case", on(func(b *EventBus) { b.Brokers[0].ID = "Broker-A" }), wantErr, p + ".brokers[0].id", "lowercase DNS name"},
		{"broker id wildcard", on(func(b *EventBus) { b.Brokers[0].ID = "*.dynamo" }), wantErr, p + ".brokers[0].id", "wildcards"},
		{"broker id duplicate", on(func(b *EventBus) {
			b.Brokers = append(b.Brokers, BusClient{ID: "broker-a.dynamo", Role: BusRoleBroker, TokenHash: hashB, Namespaces: []string{"x"}})
		}), wantErr, p + ".brokers[1].id", "duplicate"},
		{"token hash malformed", on(func(b *EventBus) { b.Brokers[0].TokenHash = "sha256:ABC" }), wantErr, p + ".brokers[0].token_hash", "64 lowercase hex"},
		{"plain token", on(func(b *EventBus) { b.Brokers[0].TokenHash = "my-token" }), wantErr, p + ".brokers[0].token_hash", "never the token"},
		{"token hash upper case", on(func(b *EventBus) { b.Brokers[0].TokenHash = strings.ToUpper(hashA) }), wantErr, p + ".brokers[0].token_hash", "sha256:"},
		{"no credential", on(func(b *EventBus) { b.Brokers[0].TokenHash = "" }), wantErr, p + ".brokers[0].token_hash", "client_ca"},
		{"certificate credential", on(func(b *EventBus) { b.Brokers[0].TokenHash = ""; b.TLS.ClientCA = "/ca.crt" }), wantOK, "", ""},
		{"shared token", on(func(b *EventBus) { l := listener; l.TokenHash = hashA; b.Brokers = append(b.Brokers, l) }), wantErr, p + ".brokers[1].token_hash", "same token"},
		{"role unknown", on(func(b *EventBus) { b.Brokers[0].Role = "relay" }), wantErr, p + ".brokers[0].role", "broker or kv_listener"},
		{"broker with backends", on(func(b *EventBus) { b.Brokers[0].Backends = []string{"vllm-1"} }), wantErr, p + ".brokers[0].backends", "only kv_listener"},
		{"broker any namespace", on(func(b *EventBus) { b.Brokers[0].Namespaces = nil }), wantWarn, p + ".brokers[0].namespaces", "any Dynamo namespace"},
		{"broker bad namespace", on(func(b *EventBus) { b.Brokers[0].Namespaces = []string{"a/b"} }), wantErr, p + ".brokers[0].namespaces[0]", "'/'"},
		{"broker duplicate namespace", on(func(b *EventBus) { b.Brokers[0].Namespaces = []string{"a", "a"} }), wantErr, p + ".brokers[0].namespaces[1]", "duplicate"},
		{"kv listener", on(func(b *EventBus) { b.Brokers = append(b.Brokers, listener) }), wantOK, "", ""},
		{"kv listener with namespaces", on(func(b *EventBus) { l := listener; l.Namespaces = []string{"dynamo"}; b.Brokers = append(b.Brokers, l) }), wantErr, p + ".brokers[1].namespaces", "not namespaces"},
		{"kv listener without backends", on(func(b *EventBus) { l := listener; l.Backends = nil; b.Brokers = append(b.Brokers, l) }), wantErr, p + ".brokers[1].backends", "at least one"},
		{"kv listener empty backend", on(func(b *EventBus) { l := listener; l.Backends = []string{""}; b.Brokers = append(b.Brokers, l) }), wantErr, p + ".brokers[1].backends[0]", "empty"},
		{"entries checked while disabled", func(c *Config) { c.Dynamo.EventBus.Brokers = []BusClient{{ID: "a", Role: "x", TokenHash: hashA}} }, wantErr, p + ".brokers[0].role", "broker"},

		{"max sessions zero", on(func(b *EventBus) { b.MaxSessions = 0 }), wantErr, p + ".max_sessions", "at least 1"},
		{"max streams zero", on(func(b *EventBus) { b.MaxStreamsPerSession = 0 }), wantErr, p + ".max_streams_per_session", "at least 1"},
		{"buffer at floor", on(func(b *EventBus) { b.MaxStreamsPerSession, b.MaxSessionBufferBytes = 16, 16*64<<10 }), wantOK, "", ""},
		{"buffer below floor", on(func(b *EventBus) { b.MaxStreamsPerSession, b.MaxSessionBufferBytes = 16, 16*64<<10-1 }), wantErr, p + ".max_session_buffer_bytes", "max_streams_per_session * 64 KiB"},
		{"default streams need 64MiB", on(func(b *EventBus) { b.MaxSessionBufferBytes = 32 << 20 }), wantErr, p + ".max_session_buffer_bytes", "67108864"},
		{"buffer above http2 window", on(func(b *EventBus) { b.MaxSessionBufferBytes = math.MaxInt32 + 1 }), wantErr, p + ".max_session_buffer_bytes", "HTTP/2"},
		{"heartbeat zero", on(func(b *EventBus) { b.HeartbeatInterval = 0 }), wantErr, p + ".heartbeat_interval", "greater than 0"},
		{"idle not above heartbeat", on(func(b *EventBus) { b.IdleTimeout = b.HeartbeatInterval }), wantErr, p + ".idle_timeout", "longer than heartbeat_interval"},
	})
}

func TestValidateInactiveFeatures(t *testing.T) {
	runRules(t, []ruleCase{
		{"direct load transport is active", nil, wantOK, "dynamo.load.transport", "not active yet"},
		{"broker load transport is active", func(c *Config) { busOn(c); c.Dynamo.Load.Transport = TransportBroker }, wantOK, "dynamo.load.transport", "not active yet"},
		{"broker while disabled", func(c *Config) { busOn(c); c.Dynamo.Load.Transport = TransportBroker; c.Dynamo.Enabled = false }, wantOK, "dynamo.load.transport", "not active yet"},
		{"shim is active", nil, wantOK, "dynamo.shim", "not active yet"},
		{"backends are active", nil, wantOK, "backends", "not active yet"},
		{"kv is active", func(c *Config) { c.Dynamo.KV.Enabled = true }, wantOK, "dynamo.kv.enabled", "not active yet"},
		{"token data is active", func(c *Config) { c.Dynamo.KV.Enabled, c.Dynamo.KV.SendTokenData = true, true }, wantOK, "dynamo.kv.send_token_data", "not active yet"},
		{"event bus is active", busOn, wantOK, "dynamo.event_bus.enabled", "not active yet"},
		{"kubernetes_pods is active", podsBase, wantOK, "dynamo.discovery.source", "not active yet"},
		{"kubernetes is active", func(c *Config) {
			podsBase(c)
			c.Dynamo.Discovery.Source = SourceKubernetes
			c.Dynamo.Discovery.Kubernetes.Model = ""
		}, wantOK, "dynamo.discovery.source", "not active yet"},
		{"etcd", nil, wantOK, "dynamo.discovery.source", "not active yet"},
	})
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validBase()
	c.Server.BindAddress = "nope"
	c.Dynamo.Discovery.Etcd.Endpoints = []string{"http://u:p@a:1", "b:1/x"}
	c.Dynamo.Load.MaxStaleness = 0
	errs, _ := c.Validate()
	paths := make([]string, len(errs))
	for i, e := range errs {
		paths[i] = e.Path
	}
	assert.Equal(t, []string{
		"server.bind_address",
		"dynamo.discovery.etcd.endpoints[0]",
		"dynamo.discovery.etcd.endpoints[1]",
		"dynamo.load.max_staleness",
	}, paths)
}

// Standalone mode reads its workers from an InferencePool and, with no
// model cards, needs the model and block size given; the pool source
// belongs to it alone.
func TestValidateStandalone(t *testing.T) {
	standalone := func(mut func(c *Config)) []string {
		c := Default()
		c.Dynamo.Enabled, c.EPP.Enabled, c.EPP.Mode = true, true, EPPModeStandalone
		c.Dynamo.Discovery.Source = SourceInferencePool
		c.Dynamo.Discovery.InferencePool.Name = "llama"
		c.EPP.ModelName, c.EPP.KVCacheBlockSize = "meta-llama/Llama-3.1-8B-Instruct", 16
		mut(c)
		errs, _ := c.Validate()
		var out []string
		for _, e := range errs {
			out = append(out, e.String())
		}
		return out
	}
	assert.Empty(t, standalone(func(*Config) {}))
	assert.Equal(t, []string{"dynamo.discovery.inference_pool.name: must name the InferencePool whose Pods are the workers"},
		standalone(func(c *Config) { c.Dynamo.Discovery.InferencePool.Name = "" }))
	assert.Equal(t, []string{"epp.kv_cache_block_size: is required in standalone mode: the pool's Pods carry no model card"},
		standalone(func(c *Config) { c.EPP.KVCacheBlockSize = 0 }))
	assert.Equal(t, []string{"epp.model_name: is required in standalone mode: the pool's Pods carry no model card"},
		standalone(func(c *Config) { c.EPP.ModelName = "" }))
	assert.Contains(t, standalone(func(c *Config) { c.Dynamo.Discovery.Source = SourceEtcd }),
		`dynamo.discovery.source: must be inference_pool in the endpoint picker's standalone mode, got "etcd"`)
	assert.Contains(t, standalone(func(c *Config) { c.EPP.Mode = EPPModeDynamo }),
		"dynamo.discovery.source: inference_pool is the endpoint picker's standalone mode: set epp.enabled and epp.mode: standalone")
	assert.Equal(t, []string{"dynamo.discovery.inference_pool.kv_events_port: must be a port between 1 and 65535, got 0"},
		standalone(func(c *Config) { c.Dynamo.Discovery.InferencePool.KVEventsPort = 0 }))
	assert.Empty(t, standalone(func(c *Config) { c.Dynamo.Discovery.InferencePool.KVReplayPort = 5558 }))
	assert.Equal(t, []string{"dynamo.discovery.inference_pool.kv_replay_port: must be 0 (no replay) or a port between 1 and 65535, got 70000"},
		standalone(func(c *Config) { c.Dynamo.Discovery.InferencePool.KVReplayPort = 70000 }))
	assert.Empty(t, standalone(func(c *Config) { c.EPP.FallbackEndpoints = MaxFallbackEndpoints }))
	assert.Equal(t, []string{"epp.fallback_endpoints: must be between 0 and 8, got 9"},
		standalone(func(c *Config) { c.EPP.FallbackEndpoints = 9 }))
	assert.Contains(t, standalone(func(c *Config) {
		c.EPP.Mode, c.Dynamo.Discovery.Source, c.EPP.FallbackEndpoints = EPPModeDynamo, SourceEtcd, 2
	}), "epp.fallback_endpoints: needs epp.mode standalone: in dynamo mode every endpoint in the list would receive the first pick's worker pins, so a fallback would still reach the first worker")
}

// Standalone mode's tokenizer and chat template name a file and the
// checksum that pins it, together; the bound listener needs a host:port.
func TestValidateStandalonePromptFilesAndListener(t *testing.T) {
	const sum = "blake3:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const p = "dynamo.discovery.inference_pool"
	standalone := func(mut func(ip *InferencePoolDiscovery)) []string {
		c := Default()
		c.Dynamo.Enabled, c.EPP.Enabled, c.EPP.Mode = true, true, EPPModeStandalone
		c.Dynamo.Discovery.Source = SourceInferencePool
		c.Dynamo.Discovery.InferencePool.Name = "llama"
		c.EPP.ModelName, c.EPP.KVCacheBlockSize = "m", 16
		mut(&c.Dynamo.Discovery.InferencePool)
		errs, _ := c.Validate()
		var out []string
		for _, e := range errs {
			out = append(out, e.String())
		}
		return out
	}
	assert.Empty(t, standalone(func(ip *InferencePoolDiscovery) {
		ip.Tokenizer = PoolArtifact{Path: "/models/m/tokenizer.json", Checksum: sum}
		ip.ChatTemplate = PoolArtifact{Path: "hf://org/m/tokenizer_config.json", Checksum: sum}
		ip.KVEventsListen = "0.0.0.0:5557"
	}))
	assert.Equal(t, []string{p + ".tokenizer.checksum: must be \"blake3:\" followed by 64 lowercase hex digits (b3sum of the file): nothing is loaded unverified"},
		standalone(func(ip *InferencePoolDiscovery) { ip.Tokenizer = PoolArtifact{Path: "/models/m/tokenizer.json"} }))
	assert.Equal(t, []string{p + ".tokenizer.path: is required with a checksum: name the file the checksum pins"},
		standalone(func(ip *InferencePoolDiscovery) { ip.Tokenizer = PoolArtifact{Checksum: sum} }))
	assert.Equal(t, []string{p + `.tokenizer.path: must be an absolute path or a URL (file://, http(s)://, hf://), got "tokenizer.json"`},
		standalone(func(ip *InferencePoolDiscovery) { ip.Tokenizer = PoolArtifact{Path: "tokenizer.json", Checksum: sum} }))
	assert.Equal(t, []string{p + ".chat_template: needs a tokenizer: a rendered chat is hashed as the tokenizer encodes it"},
		standalone(func(ip *InferencePoolDiscovery) { ip.ChatTemplate = PoolArtifact{Path: "/m/t.jinja", Checksum: sum} }))
	assert.Equal(t, []string{p + `.chat_template.kind: must be hf_tokenizer_config_json, hf_chat_template or hf_chat_template_json, got "jinja"`},
		standalone(func(ip *InferencePoolDiscovery) {
			ip.Tokenizer = PoolArtifact{Path: "/m/tokenizer.json", Checksum: sum}
			ip.ChatTemplate = PoolArtifact{Path: "/m/t.jinja", Checksum: sum, Kind: "jinja"}
		}))
	assert.Len(t, standalone(func(ip *InferencePoolDiscovery) { ip.KVEventsListen = "5557" }), 1)
	assert.Contains(t, standalone(func(ip *InferencePoolDiscovery) { ip.KVEventsListen = "5557" })[0], p+".kv_events_listen")
}

// A chat template's kind follows its file unless given.
func TestPoolArtifactTemplateKind(t *testing.T) {
	assert.Equal(t, KindChatTemplate, PoolArtifact{Path: "/m/chat_template.JINJA"}.TemplateKind())
	assert.Equal(t, KindTokenizerConfig, PoolArtifact{Path: "/m/tokenizer_config.json"}.TemplateKind())
	assert.Equal(t, KindChatTemplateJSON, PoolArtifact{Path: "/m/t.json", Kind: KindChatTemplateJSON}.TemplateKind())
}

// The pool's own files pin themselves under source inference_pool, once
// each and after the configured pins; elsewhere only the pins count.
func TestArtifactPinsIncludeThePoolsFiles(t *testing.T) {
	const a = "blake3:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	const b = "blake3:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	c := Default()
	c.Dynamo.KV.PinnedArtifacts = []string{a}
	ip := &c.Dynamo.Discovery.InferencePool
	ip.Tokenizer = PoolArtifact{Path: "/m/tokenizer.json", Checksum: b}
	ip.ChatTemplate = PoolArtifact{Path: "/m/tokenizer_config.json", Checksum: a}
	assert.Equal(t, []string{a}, c.ArtifactPins(), "not the pool's source: its files are not read")
	c.Dynamo.Discovery.Source = SourceInferencePool
	assert.Equal(t, []string{a, b}, c.ArtifactPins())
	assert.Equal(t, []string{a}, c.Dynamo.KV.PinnedArtifacts, "the configured list is not changed")
}

func TestValidateEPPReplicaSync(t *testing.T) {
	const p = "epp"
	sync := func(f func(e *EPP)) func(*Config) {
		return func(c *Config) {
			c.EPP.Enabled, c.EPP.ReplicaSync = true, true
			c.EPP.ReplicaPeers = []string{"10.0.0.7:9010"}
			c.Dynamo.KV.TrackActiveBlocks, c.Dynamo.KV.TrackPrefillTokens = true, true
			f(&c.EPP)
		}
	}
	overNATS := func(f func(e *EPP)) func(*Config) {
		return sync(func(e *EPP) {
			e.ReplicaPeers = nil
			e.ReplicaSyncTransport, e.ReplicaSyncNATSURL = ReplicaSyncNATS, "nats://nats.dynamo:4222"
			f(e)
		})
	}
	none := func(*EPP) {}
	runRules(t, []ruleCase{
		{"zmq with static peers", sync(none), wantOK, p + ".replica_peers", ""},
		{"zmq tracking nothing", func(c *Config) {
			sync(none)(c)
			c.Dynamo.KV.TrackActiveBlocks, c.Dynamo.KV.TrackPrefillTokens = false, false
		}, wantWarn, p + ".replica_sync", "no active-sequence tracking"},
		{"zmq tracking prefill tokens only", func(c *Config) { sync(none)(c); c.Dynamo.KV.TrackActiveBlocks = false }, wantOK, p + ".replica_sync", ""},
		{"zmq is the default", func(c *Config) { assert.Equal(t, ReplicaSyncZMQ, c.EPP.ReplicaSyncTransport) }, wantOK, "", ""},
		{"zmq without peers", sync(func(e *EPP) { e.ReplicaPeers = nil }), wantWarn, p + ".replica_peers", "follows nobody"},
		{"zmq bad peer", sync(func(e *EPP) { e.ReplicaPeers = []string{"10.0.0.7"} }), wantErr, p + ".replica_peers[0]", "host:port"},
		{"zmq listener collides", sync(func(e *EPP) { e.ReplicaSyncListen = e.Listen }), wantErr, p + ".replica_sync_listen", "collides"},
		{"zmq with a NATS URL", sync(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://n:4222" }), wantErr, p + ".replica_sync_nats_url", "transport is zmq"},
		{"peer service", sync(func(e *EPP) { e.ReplicaPeers, e.PeerService = nil, "epp-peers" }), wantOK, p + ".replica_peers", ""},
		{"peer service beside static peers", sync(func(e *EPP) { e.PeerService = "epp-peers" }), wantOK, "", ""},
		{"peer service not a name", sync(func(e *EPP) { e.PeerService = "EPP Peers" }), wantErr, p + ".peer_service", "DNS-1123 label"},
		{"peer service on port 0", sync(func(e *EPP) { e.PeerService, e.ReplicaSyncListen = "epp-peers", ":0" }), wantErr, p + ".replica_sync_listen", "fixed port"},
		{"peer service with sync off", func(c *Config) { c.EPP.Enabled, c.EPP.PeerService = true, "epp-peers" }, wantOK, "", ""},
		{"unknown transport", sync(func(e *EPP) { e.ReplicaSyncTransport = "kafka" }), wantErr, p + ".replica_sync_transport", `zmq or nats, got "kafka"`},
		{"nats", overNATS(none), wantOK, "", ""},
		{"nats cluster", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://a:4222, tls://b:4222,nats://[fd00::1]:4222" }), wantOK, "", ""},
		{"nats default port", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://nats" }), wantOK, "", ""},
		{"nats listen unchecked", overNATS(func(e *EPP) { e.ReplicaSyncListen = e.Listen }), wantOK, "", ""},
		{"nats without URL", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = " " }), wantErr, p + ".replica_sync_nats_url", "must name the NATS server"},
		{"nats scheme", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "http://n:4222" }), wantErr, p + ".replica_sync_nats_url", "nats:// or tls://"},
		{"nats no scheme", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "n:4222" }), wantErr, p + ".replica_sync_nats_url", "nats:// or tls://"},
		{"nats credentials", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://u:secret@n:4222" }), wantErr, p + ".replica_sync_nats_url", "credentials"},
		{"nats credentials not echoed", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://u:secret@n:4222" }), wantErr, p + ".replica_sync_nats_url", "u:xxxxx@n"},
		{"nats no host", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://:4222" }), wantErr, p + ".replica_sync_nats_url", "no host"},
		{"nats bad port", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://n:99999" }), wantErr, p + ".replica_sync_nats_url", "port"},
		{"nats path", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://n:4222/x" }), wantErr, p + ".replica_sync_nats_url", "no path"},
		{"nats empty list entry", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = "nats://a:4222,,nats://b:4222" }), wantErr, p + ".replica_sync_nats_url", "not a valid URL"},
		{"nats too many servers", overNATS(func(e *EPP) { e.ReplicaSyncNATSURL = strings.Repeat("nats://n:4222,", 16) + "nats://n:4222" }), wantErr, p + ".replica_sync_nats_url", "at most 16"},
		{"nats with static peers", overNATS(func(e *EPP) { e.ReplicaPeers = []string{"10.0.0.7:9010"} }), wantErr, p + ".replica_peers", "over NATS"},
		{"nats with a peer service", overNATS(func(e *EPP) { e.PeerService = "epp-peers" }), wantErr, p + ".peer_service", "over NATS"},
		{"nats dotted namespace", func(c *Config) { overNATS(none)(c); c.Dynamo.Discovery.Etcd.Namespace = "team.prod" }, wantOK, "", ""},
		{"nats wildcard namespace", func(c *Config) { overNATS(none)(c); c.Dynamo.Discovery.Etcd.Namespace = "team.>" }, wantErr, "dynamo.discovery.etcd.namespace", "wildcard"},
		{"nats empty token namespace", func(c *Config) { overNATS(none)(c); c.Dynamo.Discovery.Etcd.Namespace = "team." }, wantErr, "dynamo.discovery.etcd.namespace", "dot"},
		{"transport unchecked with sync off", func(c *Config) { c.EPP.Enabled, c.EPP.ReplicaSyncTransport = true, "kafka" }, wantOK, "", ""},
	})
}
