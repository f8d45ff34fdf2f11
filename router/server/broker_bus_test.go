package server

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"switchyard/fakefleet/registrar"
	"switchyard/router/bus/broker"
	"switchyard/router/config"
	"switchyard/router/discovery"
)

// A router started with the event bus on and the broker transport opens
// its subscriptions through the bus it started: an agent that connects
// covers the namespace and the kv_metrics subscription connects through
// it (the event plane must be given the bus, not the nil before it).
func TestBrokerTransportSubscribesThroughItsOwnBus(t *testing.T) {
	certFile, keyFile, roots := busCerts(t)
	const token = "broker-token"
	sum := sha256.Sum256([]byte(token))
	c := embeddedConfig("tok")
	c.Dynamo.Load.Transport = config.TransportBroker
	busAddr := freeAddr(t)
	b := &c.Dynamo.EventBus
	b.Enabled, b.Listen = true, busAddr
	b.TLS = config.BusTLS{Cert: certFile, Key: keyFile}
	b.Brokers = []config.BusClient{{ID: "broker-a", Role: config.BusRoleBroker,
		TokenHash: "sha256:" + hex.EncodeToString(sum[:]), Namespaces: []string{"dynamo"}}}
	srv, err := New(c, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer srv.Close()
	base := "http://" + srv.Addr()

	pubAddr := freeAddr(t)
	pub := zmq4.NewPub(context.Background())
	require.NoError(t, pub.Listen("tcp://"+pubAddr))
	defer pub.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer cli.Close()
	_, err = registrar.Register(context.Background(), cli, registrar.Worker{
		Namespace: "dynamo", Component: "decode", WorkerType: "decode", Model: "m", BlockSize: 16,
		TotalKVBlocks: 64, MaxNumBatchedTokens: 512, MaxNumSeqs: 4, ContextLength: 1024, Transport: "127.0.0.1:9/x",
		Channels: []registrar.Channel{{Topic: "kv_metrics", PublisherID: 2718281828, Endpoint: "tcp://" + pubAddr}},
	}, 5, nil)
	require.NoError(t, err)

	subState := func() string {
		_, raw := get(t, base+"/admin/dynamo/workers", "tok")
		var body struct {
			Subscriptions []map[string]any `json:"subscriptions"`
		}
		_ = json.Unmarshal(raw, &body)
		if len(body.Subscriptions) != 1 {
			return ""
		}
		return body.Subscriptions[0]["state"].(string) + "/" + body.Subscriptions[0]["transport"].(string)
	}
	eventually(t, "pending before any broker", func() bool { return subState() == "pending/broker" })

	// The agent's discovery is the router's own registry: the publisher is
	// advertised.
	agent, err := broker.New(broker.Config{
		BusURL: "https://" + busAddr, ClientID: "broker-a", Namespaces: []string{"dynamo"},
		Token: func() (string, error) { return token, nil }, TLS: &tls.Config{RootCAs: roots},
		Directory: broker.SnapshotDirectory(func() *discovery.Snapshot { return srv.Registry().Snapshot() }),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	defer func() { cancel(); <-done }()
	eventually(t, "connected through the broker", func() bool { return subState() == "connected/broker" })
}
