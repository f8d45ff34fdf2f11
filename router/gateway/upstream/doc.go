// Package upstream is the gateway's HTTP/1.1 client for plain http://
// backends. Unlike net/http's Transport, which gives every connection a
// read and a write goroutine and hands each request and answer across
// channels, it writes the request and reads the answer's head on the
// caller's goroutine, and the answer's body on the reader's, through
// buffers kept with the connection. Idle keep-alive connections are pooled
// per host. Anything it does not speak (TLS, proxies, bodies of unknown
// length) goes to a fallback RoundTripper.
package upstream
