package server

import (
	"slices"
	"strconv"

	"switchyard/router/admin"
	"switchyard/router/clock"
	"switchyard/router/config"
	"switchyard/router/discovery"
	"switchyard/router/kvsource"
)

// kvSourcesOf lists the kv_cache_index sources cfg follows: while the
// router follows kv-events at all.
func kvSourcesOf(cfg *config.Config) []kvsource.Source {
	if !kvActive(cfg) || !cfg.Dynamo.KV.UseKVEvents {
		return nil
	}
	var out []kvsource.Source
	for _, s := range cfg.Dynamo.KV.Sources {
		if s.Transport == config.KVSourceTransportEventBus {
			out = append(out, kvsource.Source{Backend: s.Backend, Namespace: s.Namespace})
		}
	}
	return out
}

// startKVSources follows cfg's kv_cache_index sources through the event
// bus; without the listener they cannot connect (validation warned).
func (s *Server) startKVSources(cfg *config.Config, seed uint64) {
	if s.eventBus == nil {
		return
	}
	met := kvsource.NewMetrics()
	s.metrics.Registry.MustRegister(met.Collectors()...)
	s.kvSources = kvsource.NewFollower(s.eventBus, s.core, clock.Real{}, s.log.With("component", "kv-source"), met, seed)
	s.reloadKVSources(cfg)
}

// reloadKVSources applies a configuration's sources: kept ones keep their
// streams and last ids, removed ones clear their ranks. The direct
// kv-events subscriptions leave the sources' namespaces to them.
func (s *Server) reloadKVSources(cfg *config.Config) {
	srcs := kvSourcesOf(cfg)
	var ns []string
	for _, src := range srcs {
		if !slices.Contains(ns, src.Namespace) {
			ns = append(ns, src.Namespace)
		}
	}
	s.kvSourceNS.Store(&ns)
	if s.kvSources != nil {
		s.kvSources.Apply(srcs)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// withoutSourceNamespaces is snap without the kv-events publishers of
// namespaces a kv_cache_index source serves: those are not dialed.
func (s *Server) withoutSourceNamespaces(snap *discovery.Snapshot) *discovery.Snapshot {
	p := s.kvSourceNS.Load()
	if p == nil || len(*p) == 0 {
		return snap
	}
	ns := *p
	f := *snap
	f.Publishers = nil
	for _, pub := range snap.Publishers {
		if pub.Topic == discovery.TopicKVEvents && slices.Contains(ns, pub.Namespace) {
			continue
		}
		f.Publishers = append(f.Publishers, pub)
	}
	return &f
}

// KVSources is the state of each followed kv_cache_index source.
func (s *Server) KVSources() []kvsource.State {
	if s.kvSources == nil {
		return nil
	}
	return s.kvSources.States()
}

// kvSourcesStatus is the admin listing's kv_sources.
func (s *Server) kvSourcesStatus() []admin.KVSourceJSON {
	var out []admin.KVSourceJSON
	for _, st := range s.KVSources() {
		j := admin.KVSourceJSON{Backend: st.Backend, Namespace: st.Namespace, Connected: st.Connected, Workers: st.Workers}
		if st.HasLastID {
			j.LastEventID = strconv.FormatUint(st.LastEventID, 10)
		}
		out = append(out, j)
	}
	return out
}
