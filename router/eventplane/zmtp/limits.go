package zmtp

import (
	"fmt"
	"time"
)

// Limits are the ceilings one subscription enforces on its peer. Each size is
// checked against the size the peer declares, before anything is allocated
// or read, so a peer can never make a Sub hold more than these bounds.
type Limits struct {
	// MaxFrameBytes is the largest data frame body accepted.
	MaxFrameBytes int
	// MaxFramesPerMessage bounds the parts of one multipart message.
	MaxFramesPerMessage int
	// MaxMessageBytes bounds the sum of one message's frame bodies; it is
	// also the most message memory a Sub ever retains.
	MaxMessageBytes int
	// MaxCommandBytes bounds READY, PING and any other command body. Commands
	// are parsed in place in the read buffer, so it may not exceed 2 KiB.
	MaxCommandBytes int
	// HandshakeTimeout bounds the whole greeting and READY exchange.
	HandshakeTimeout time.Duration
	// MessageTimeout bounds one message (or command) from its first byte to
	// its last, so a trickling peer cannot pin a half message forever.
	MessageTimeout time.Duration
}

// LoadLimits suit kv_metrics (ActiveLoad) subscriptions: 4-frame messages
// whose envelope is refused above 16 KiB further up anyway.
var LoadLimits = Limits{
	MaxFrameBytes:       64 << 10,
	MaxFramesPerMessage: 8,
	MaxMessageBytes:     128 << 10,
	MaxCommandBytes:     1 << 10,
	HandshakeTimeout:    10 * time.Second,
	MessageTimeout:      30 * time.Second,
}

// KVEventLimits suit kv-events subscriptions, whose batches of stored blocks
// are much larger than load samples: a 1 MiB event frame plus room for the
// topic, id and sequence frames.
var KVEventLimits = Limits{
	MaxFrameBytes:       1 << 20,
	MaxFramesPerMessage: 8,
	MaxMessageBytes:     1<<20 + 64<<10,
	MaxCommandBytes:     1 << 10,
	HandshakeTimeout:    10 * time.Second,
	MessageTimeout:      30 * time.Second,
}

// validate rejects limits that would make the ceilings meaningless. Invalid
// limits are a programming error of the caller, not a peer's fault, so the
// error is not a *ProtocolError.
func (l Limits) validate() error {
	switch {
	case l.MaxFrameBytes <= 0:
		return fmt.Errorf("zmtp: invalid limits: MaxFrameBytes %d must be positive", l.MaxFrameBytes)
	case l.MaxFramesPerMessage <= 0:
		return fmt.Errorf("zmtp: invalid limits: MaxFramesPerMessage %d must be positive", l.MaxFramesPerMessage)
	case l.MaxMessageBytes <= 0:
		return fmt.Errorf("zmtp: invalid limits: MaxMessageBytes %d must be positive", l.MaxMessageBytes)
	case l.MaxCommandBytes < minCommandBytes || l.MaxCommandBytes > readBufSize:
		return fmt.Errorf("zmtp: invalid limits: MaxCommandBytes %d must be in [%d, %d]", l.MaxCommandBytes, minCommandBytes, readBufSize)
	case l.HandshakeTimeout <= 0:
		return fmt.Errorf("zmtp: invalid limits: HandshakeTimeout %v must be positive", l.HandshakeTimeout)
	case l.MessageTimeout <= 0:
		return fmt.Errorf("zmtp: invalid limits: MessageTimeout %v must be positive", l.MessageTimeout)
	}
	return nil
}
