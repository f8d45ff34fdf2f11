package envelope

import "time"

// Limits are the ceilings one subscription enforces on its peer. Each size is
// checked against the size the peer declares, before anything is allocated
// or read, so a peer can never make a subscription hold more than these
// bounds. They live with the codec, not the transport, so that decoders
// can refuse what the transport would never deliver without importing it.
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
