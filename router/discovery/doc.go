// Package discovery is the pure core of fleet discovery: it folds Dynamo's
// discovery records (events.DiscoveryPut, DiscoveryDelete, DiscoveryResync)
// into workers with a reducer that reads no clock and does no I/O, and
// publishes the result through a Registry as immutable, generation-numbered
// Snapshots that readers load without locking.
//
// Records are held by key and identities are read from values; an identity
// claimed by more than one key is refused as a whole, and every ceiling on
// fleet-authored input is checked before parsing. The sources that produce
// the events (the etcd watcher) and the host that runs them live outside
// this folder, in router/discoverysource.
package discovery
