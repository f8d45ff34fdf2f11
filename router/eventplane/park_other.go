//go:build !linux

package eventplane

import (
	"errors"
	"net"
)

// Parking needs epoll; elsewhere every session reads with a goroutine of
// its own.

type parkSlot struct{}

var (
	errConnClosed = errors.New("connection closed before parking")
	errPollerDown = errors.New("parking is not supported on this system")
)

func newParkSlot(net.Conn) *parkSlot { return nil }

func (*parkSlot) park(func()) error { return errPollerDown }

func (*parkSlot) wake() {}

func (*parkSlot) release() {}
