// Package zmtp is a bounded ZMTP 3.x SUB client over a net.Conn, its
// DEALER variant for request/reply with a ROUTER (Dealer, dealer.go), and the
// PUB end of one connection (PubConn, pub.go) for the router's own
// publishers (replica sync).
//
// The router subscribes to tcp:// endpoints that the fleet announces in
// discovery, so every byte it reads here is fleet-authored. General-purpose
// ZMQ libraries allocate whatever frame length a peer declares; one hostile
// or corrupt header claiming a terabyte kills the process. This package
// speaks exactly the subset a Dynamo publisher needs — the NULL mechanism,
// READY as SUB, 3.0-style subscriptions (a data frame 0x01+topic, which 3.0
// and 3.1 publishers both accept), PING answered with PONG — and checks
// every declared size against a fixed ceiling (Limits) before it allocates
// or waits for a single body byte.
//
// Memory per subscription is fixed and small: a 2 KiB read buffer in which
// greetings and commands are parsed in place, a 64-byte write scratch, and a
// message arena that starts at 512 B and grows by powers of two only as far
// as the declared sizes require, never past Limits.MaxMessageBytes. Reading
// steady-state messages allocates nothing.
//
// Time is bounded too: the handshake must finish within HandshakeTimeout and,
// once the first byte of a message (or command) arrives, the rest must
// arrive within MessageTimeout. Between messages there is no deadline at all,
// because publishers are silent while nothing changes; to stop a Sub, close
// its connection. A caller that parks idle connections reads with
// ReadMessageOrIdle, which gives up waiting after an idle time without
// ending the Sub, and lets go of the buffers meanwhile (ReleaseBuffers).
//
// Every protocol violation is reported as a *ProtocolError (the caller counts
// it as transport_refused and reconnects with backoff); plain I/O errors such
// as io.EOF after a publisher restart are returned unchanged.
package zmtp
