// Package etcdsource is the read-only etcd discovery source: an adapter that
// turns Dynamo's etcd registrations into discovery events for the core.
//
// The router is a passive observer in Dynamo's discovery protocol. This
// package issues range gets and watches (and, with credentials, the
// Authenticate RPC that clientv3 runs on connect) and nothing else: it never
// writes, deletes, compacts, or takes or renews a lease, so a misconfigured
// router can neither deregister a healthy worker nor keep a dead one alive.
// readonly_test.go enforces this on the package's source.
//
// Each pass dials a fresh client, range-gets every watched prefix of every
// namespace at one store revision, hands the host one DiscoveryResync per
// namespace, then watches every prefix from the next revision and hands the
// host each watch response as one batch. When anything ends the pass
// (a closed or compacted watch, a lost connection), the watcher waits a
// backoff on its Clock and starts over from a fresh snapshot, which also
// recovers from events lost to compaction.
package etcdsource
