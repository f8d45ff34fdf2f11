// Package httpd is a lean HTTP/1.1 server for http.Handlers, the twin of
// the gateway's own client (router/gateway/upstream). net/http's server
// gives every request a cancel context and a background read of its
// connection (a goroutine hand-off and an extra system call each time),
// parses heads through textproto, and buffers answers in two layers. This
// one serves each connection from one goroutine with buffers it keeps or
// pools, parses heads in place, answers a short response in one write,
// and watches a connection for the client leaving only once a request has
// run for a while (Server.WatchAfter), which is when leaving matters.
//
// Its deadlines (the idle wait, and a write deadline a handler sets
// through http.ResponseController) are lenient: one already set a little
// later than needed is kept (sockio.Lenient), so they fire up to a
// sixteenth of their length late, at most a second, never early.
//
// It speaks HTTP/1.0 and 1.1 without TLS, upgrades or hijacking: the
// inference and admin routes need none of them.
package httpd
