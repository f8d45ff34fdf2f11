// Package h1test has what the HTTP/1.1 client's and server's tests share.
package h1test

import (
	"io"
	"net"
	"time"
)

// Conn is a connection whose peer already sent R and reads nothing: what
// is written to it is only counted. Deadlines are accepted and ignored.
type Conn struct {
	R       io.Reader
	Written int
}

func (c *Conn) Read(p []byte) (int, error)       { return c.R.Read(p) }
func (c *Conn) Write(p []byte) (int, error)      { c.Written += len(p); return len(p), nil }
func (c *Conn) Close() error                     { return nil }
func (c *Conn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *Conn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *Conn) SetDeadline(time.Time) error      { return nil }
func (c *Conn) SetReadDeadline(time.Time) error  { return nil }
func (c *Conn) SetWriteDeadline(time.Time) error { return nil }
