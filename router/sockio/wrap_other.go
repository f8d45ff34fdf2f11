//go:build !linux

package sockio

import "net"

// Wrap returns c: the raw calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
