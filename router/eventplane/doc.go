// Package eventplane keeps the router's subscriptions to Dynamo's event
// plane: it derives the publishers to follow from the discovery snapshot
// (Targets), checks their addresses against the dial policy (Dialer), and
// runs one bounded ZMTP session per publisher (Supervisor, over
// router/eventplane/zmtp) with jittered reconnects and one process-wide
// subscription budget. A Connector opens each session's byte stream: a
// direct dial, or (dynamo.load.transport broker) a stream an event-bus
// broker relays (Bus), with pending subscriptions waiting for a covering
// session and a debounced coverage report (CoverageReporter). An idle
// direct session parks with one epoll poller instead of holding a reading
// goroutine (runner.go, park_linux.go). What arrives is handed, frames as read, to a family's
// Sink; decoding is the pure codec's (router/envelope), so the core never
// imports this package's sockets.
package eventplane
