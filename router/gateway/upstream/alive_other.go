//go:build !linux

package upstream

// peerClosed cannot look at the socket here: a connection the server
// dropped while it idled shows up as the request's error instead.
func (c *conn) peerClosed() bool { return false }
