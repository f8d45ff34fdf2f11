// Package kvsource follows kv_cache_index sources: SSE streams of one
// backend's KV-cache events that an in-cluster switchyard kv-listener
// serves through the router's event-bus listener. It holds the format of
// those streams (the SSE framing and the JSON event), shared with the
// listener, and the router-side consumer, which resumes each backend from
// the last event id it applied and feeds the events into the core as
// kv-events messages, so they are indexed, recorded and replayed exactly
// like events received from the workers themselves.
package kvsource
