package zmtp

import (
	"fmt"

	"switchyard/router/envelope"
)

// Limits are the ceilings a Sub enforces on its peer (envelope.Limits);
// envelope.LoadLimits and envelope.KVEventLimits are the presets.
type Limits = envelope.Limits

// validateLimits rejects limits that would make the ceilings meaningless. Invalid
// limits are a programming error of the caller, not a peer's fault, so the
// error is not a *ProtocolError.
func validateLimits(l Limits) error {
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
