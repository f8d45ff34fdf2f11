// Package registrar registers a fake Dynamo worker in etcd the way a real
// one does: every record is put under the worker's own lease, the lease is
// kept alive, and the worker's instance id is the lease id. Killing the
// worker stops the keep-alive, so its keys vanish when the lease lapses,
// exactly what the router must notice.
//
// This is fleet-side code: it writes to etcd. The router's discovery
// packages never import it.
package registrar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/router/discovery"
)

// DefaultTTL is Dynamo's lease TTL in seconds.
const DefaultTTL = 10

// Worker describes one fake worker's discovery records.
type Worker struct {
	Namespace string
	// Component is prefill, decode or backend (aggregated).
	Component string
	// WorkerType is the card's worker_type: prefill, decode or aggregated.
	WorkerType string
	Model      string
	BlockSize  int
	// Card runtime capacity.
	TotalKVBlocks, MaxNumBatchedTokens, MaxNumSeqs, ContextLength int
	DPSize                                                        int
	// Transport is the request-plane address advertised in the Endpoint record.
	Transport string
	// Channels are the event-plane publishers the worker advertises.
	Channels []Channel
	// Tokenizer and PromptFormatter, when set, fill the card's artifact
	// slots: a tokenizer.json and the tokenizer_config.json holding the
	// chat template, as dynamo.vllm workers advertise them.
	Tokenizer, PromptFormatter *CheckedFile
}

// CheckedFile is a card's reference to one artifact: where it is and its
// blake3 checksum ("blake3:<hex>").
type CheckedFile struct {
	Path     string
	Checksum string
	Size     int64
}

func (f *CheckedFile) wire() map[string]any {
	return map[string]any{"path": f.Path, "checksum": f.Checksum, "size": f.Size}
}

// Channel is one advertised event-plane publisher (kv_metrics, kv-events).
type Channel struct {
	Topic       string
	PublisherID uint64
	// Endpoint is tcp://host:port of the publisher's ZMQ PUB socket.
	Endpoint string
	// Replay is tcp://host:port of its replay socket, "" for none. It is
	// advertised as Switchyard's extension field "replay" beside
	// "transport", in the same shape; Dynamo ignores unknown fields.
	Replay string
}

// Registration is a live worker registration.
type Registration struct {
	client *clientv3.Client
	lease  clientv3.LeaseID
	ttl    int64
	log    *slog.Logger
	cancel context.CancelFunc
	// namespace and component place the worker's keys.
	namespace, component string

	// mu guards recs, the records to put again on re-registration
	// (Readvertise and PutMalformed change them while the keeper may read them).
	mu   sync.Mutex
	recs map[string][]byte
}

// Backoff between re-registration attempts during an etcd outage, and the
// bound on one attempt.
const (
	renewBackoffInitial = 100 * time.Millisecond
	renewBackoffMax     = 2 * time.Second
	renewTimeout        = 5 * time.Second
)

// Register grants a lease with ttl seconds, keeps it alive, and puts the
// worker's Endpoint and Model records under it. log (nil = discard) is
// told when the keep-alive ends and the worker re-registers.
//
// The keep-alive ends when etcd stops answering for longer than the TTL
// or the lease is revoked behind the worker's back. The worker then
// re-registers until it succeeds or is killed: it grants its lease again
// under the same id (etcd accepts a client-chosen id once the old lease
// is gone), resumes the old lease if etcd still holds it, and puts its
// records again. Keeping the id keeps the worker's identity: its load and
// KV events, the frontend emulation and the router's pins all name it.
func Register(ctx context.Context, cli *clientv3.Client, w Worker, ttl int64, log *slog.Logger) (*Registration, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	grant, err := cli.Grant(ctx, ttl)
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	kaCtx, cancel := context.WithCancel(context.Background())
	ka, err := cli.KeepAlive(kaCtx, grant.ID)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("keep lease alive: %w", err)
	}
	r := &Registration{client: cli, lease: grant.ID, ttl: ttl, cancel: cancel, recs: map[string][]byte{},
		namespace: w.Namespace, component: w.Component,
		log: log.With("instance_id", strconv.FormatUint(uint64(grant.ID), 16))}
	go r.keep(kaCtx, ka)
	for key, value := range Records(w, uint64(grant.ID)) {
		if err := r.put(ctx, key, value); err != nil {
			r.Kill()
			return nil, fmt.Errorf("put %s: %w", key, err)
		}
	}
	return r, nil
}

// keep drains keep-alive acknowledgements and re-registers whenever the
// keep-alive ends while the registration is live.
func (r *Registration) keep(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	for {
		for range ka {
		}
		if ctx.Err() != nil || r.client.Ctx().Err() != nil {
			return // killed or deregistered, or the client was closed
		}
		r.log.Warn("fake worker's lease keep-alive ended; re-registering", "ttl_seconds", r.ttl)
		if ka = r.reregister(ctx); ka == nil {
			return
		}
	}
}

// reregister retries renew with a doubling backoff until it succeeds
// (returning the new keep-alive channel) or ctx ends (nil).
func (r *Registration) reregister(ctx context.Context) <-chan *clientv3.LeaseKeepAliveResponse {
	delay := renewBackoffInitial
	for attempt := 1; ; attempt++ {
		ka, how, err := r.renew(ctx)
		if err == nil {
			r.log.Info("fake worker re-registered", "lease", how, "attempts", attempt, "keys", r.keyCount())
			return ka
		}
		if ctx.Err() != nil || r.client.Ctx().Err() != nil {
			return nil
		}
		r.log.Debug("fake worker re-registration failed; retrying", "error", err, "retry_in", delay)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil
		case <-r.client.Ctx().Done():
			return nil
		}
		delay = min(2*delay, renewBackoffMax)
	}
}

// renew makes the lease live again and puts every record under it. how
// says whether the lease was granted anew or etcd still held it.
func (r *Registration) renew(ctx context.Context) (ka <-chan *clientv3.LeaseKeepAliveResponse, how string, err error) {
	actx, cancel := context.WithTimeout(ctx, renewTimeout)
	defer cancel()
	how = "new"
	_, err = clientv3.RetryLeaseClient(r.client).LeaseGrant(actx, &pb.LeaseGrantRequest{TTL: r.ttl, ID: int64(r.lease)})
	switch {
	case errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseExist):
		how = "resumed"
	case err != nil:
		return nil, "", fmt.Errorf("grant lease: %w", err)
	}
	ka, err = r.client.KeepAlive(ctx, r.lease)
	if err != nil {
		return nil, "", fmt.Errorf("keep lease alive: %w", err)
	}
	r.mu.Lock()
	recs := maps.Clone(r.recs)
	r.mu.Unlock()
	for key, value := range recs {
		if _, err := r.client.Put(actx, key, string(value), clientv3.WithLease(r.lease)); err != nil {
			// The keep-alive runs until ctx ends; the next attempt opens another.
			return nil, "", fmt.Errorf("put %s: %w", key, err)
		}
	}
	return ka, how, nil
}

// put writes one record under the lease and remembers it for renewal.
func (r *Registration) put(ctx context.Context, key string, value []byte) error {
	if _, err := r.client.Put(ctx, key, string(value), clientv3.WithLease(r.lease)); err != nil {
		return err
	}
	r.mu.Lock()
	r.recs[key] = value
	r.mu.Unlock()
	return nil
}

func (r *Registration) keyCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// Readvertise rewrites the worker's records under the same lease (for
// example after a publisher restart changed a channel's id and endpoint)
// and removes keys the new records no longer use.
func (r *Registration) Readvertise(ctx context.Context, w Worker) error {
	recs := Records(w, r.InstanceID())
	for key, value := range recs {
		if err := r.put(ctx, key, value); err != nil {
			return err
		}
	}
	r.mu.Lock()
	var gone []string
	for key := range r.recs {
		if _, ok := recs[key]; !ok {
			gone = append(gone, key)
		}
	}
	r.mu.Unlock()
	for _, key := range gone {
		if _, err := r.client.Delete(ctx, key); err != nil {
			return err
		}
		r.mu.Lock()
		delete(r.recs, key)
		r.mu.Unlock()
	}
	return nil
}

// PutMalformed writes a record that is not JSON beside the worker's own,
// under its lease (fault injection: the router must skip it and keep the
// worker).
func (r *Registration) PutMalformed(ctx context.Context) error {
	key := fmt.Sprintf("v1/instances/%s/%s/generate/%x-malformed", r.namespace, r.component, r.InstanceID())
	return r.put(ctx, key, []byte("{not json"))
}

// InstanceID is the worker's id: its lease id.
func (r *Registration) InstanceID() uint64 { return uint64(r.lease) }

// Kill stops the keep-alive without revoking: the keys disappear when the
// lease's TTL lapses, as when a worker process dies.
func (r *Registration) Kill() { r.cancel() }

// Deregister revokes the lease, removing the keys at once (a clean shutdown).
func (r *Registration) Deregister(ctx context.Context) error {
	r.cancel()
	_, err := r.client.Revoke(ctx, r.lease)
	return err
}

// Records renders a worker's Endpoint and Model records, keyed as Dynamo
// keys them (instance id in lower-case hex).
func Records(w Worker, instanceID uint64) map[string][]byte {
	hex := strconv.FormatUint(instanceID, 16)
	ep := map[string]any{
		"type": "Endpoint", "namespace": w.Namespace, "component": w.Component, "endpoint": "generate",
		"instance_id": instanceID, "transport": map[string]any{"tcp": w.Transport},
	}
	runtime := map[string]any{
		"total_kv_blocks": w.TotalKVBlocks, "max_num_batched_tokens": w.MaxNumBatchedTokens,
		"max_num_seqs": w.MaxNumSeqs, "context_length": w.ContextLength,
		"data_parallel_start_rank": 0, "data_parallel_size": max(w.DPSize, 1),
	}
	card := map[string]any{
		"display_name": w.Model, "worker_type": w.WorkerType, "kv_cache_block_size": w.BlockSize,
		"model_input": "Tokens", "model_type": "Chat | Completions", "runtime_config": runtime,
	}
	if w.Tokenizer != nil {
		card["tokenizer"] = map[string]any{"hf_tokenizer_json": w.Tokenizer.wire()}
	}
	if w.PromptFormatter != nil {
		card["prompt_formatter"] = map[string]any{"hf_tokenizer_config_json": w.PromptFormatter.wire()}
	}
	model := map[string]any{
		"type": "Model", "namespace": w.Namespace, "component": w.Component, "endpoint": "generate",
		"instance_id": instanceID, "card_json": card,
	}
	path := fmt.Sprintf("%s/%s/generate/%s", w.Namespace, w.Component, hex)
	out := map[string][]byte{
		"v1/instances/" + path: mustJSON(ep),
		"v1/mdc/" + path:       mustJSON(model),
	}
	for _, c := range w.Channels {
		// The scope-based layout of newer releases: endpoint-scoped, with
		// the publisher's own id (not the worker's) as instance_id.
		key := fmt.Sprintf("v1/event_channels/namespace/%s/component/%s/endpoint/generate/topic/%s/%x",
			discovery.EncodeSegment(w.Namespace), discovery.EncodeSegment(w.Component), discovery.EncodeSegment(c.Topic), c.PublisherID)
		rec := map[string]any{
			"type":  "EventChannel",
			"scope": map[string]any{"kind": "endpoint", "endpoint": map[string]any{"namespace": w.Namespace, "component": w.Component, "name": "generate"}},
			"topic": c.Topic, "instance_id": c.PublisherID,
			"transport": map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": c.Endpoint}},
		}
		if c.Replay != "" {
			rec["replay"] = map[string]any{"kind": "Zmq", "config": map[string]any{"endpoint": c.Replay}}
		}
		out[key] = mustJSON(rec)
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only maps of plain values above
	}
	return b
}
