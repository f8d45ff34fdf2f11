package zmtp

import (
	"encoding/binary"
	"strings"
)

// Command bodies (23/ZMTP): a name-length octet, the name, then data. READY's
// data is a list of properties: name-length octet, name, 4-octet big-endian
// value length, value.

// minCommandBytes is the smallest MaxCommandBytes accepted: a PUB's READY
// (Socket-Type plus perhaps an empty Identity) must fit.
const minCommandBytes = 64

// pingContextMax is the longest PING context 37/ZMTP allows; it bounds the
// PONG we write into the 64-byte scratch.
const pingContextMax = 16

const (
	socketTypeProp = "Socket-Type"
	ourSocketType  = "SUB"
)

// splitCommand splits a command body into its name and data. Both alias body.
func splitCommand(body []byte) (name, data []byte, err error) {
	if len(body) == 0 {
		return nil, nil, protoErr("empty command")
	}
	n := int(body[0])
	if n == 0 || 1+n > len(body) {
		return nil, nil, protoErr("command name length %d does not fit a %d-byte command", n, len(body))
	}
	return body[1 : 1+n], body[1+n:], nil
}

// peerSocketType walks READY's properties and returns the Socket-Type value.
// Property names are case-insensitive; other properties are ignored.
func peerSocketType(props []byte) ([]byte, error) {
	var st []byte
	found := false
	for len(props) > 0 {
		nl := int(props[0])
		if nl == 0 || 1+nl+4 > len(props) {
			return nil, protoErr("READY: truncated property")
		}
		name := props[1 : 1+nl]
		vl := binary.BigEndian.Uint32(props[1+nl:])
		rest := props[1+nl+4:]
		if uint64(vl) > uint64(len(rest)) {
			return nil, protoErr("READY: property %q value length %d overruns the command", name, vl)
		}
		if strings.EqualFold(string(name), socketTypeProp) {
			if found {
				return nil, protoErr("READY: Socket-Type given twice")
			}
			st, found = rest[:vl], true
		}
		props = rest[vl:]
	}
	if !found {
		return nil, protoErr("READY: no Socket-Type property")
	}
	return st, nil
}

// appendPong appends the PONG that answers a PING whose data (TTL + context)
// is given. PING's context is echoed; a context longer than the 16 octets the
// spec allows is refused, which also keeps the PONG within the scratch.
func appendPong(dst, pingData []byte) ([]byte, error) {
	if len(pingData) < 2 {
		return dst, protoErr("PING without a TTL")
	}
	ctx := pingData[2:]
	if len(ctx) > pingContextMax {
		return dst, protoErr("PING context of %d bytes (at most %d)", len(ctx), pingContextMax)
	}
	dst = appendFrameHeader(dst, flagCommand, 1+len("PONG")+len(ctx))
	dst = append(dst, byte(len("PONG")))
	dst = append(dst, "PONG"...)
	return append(dst, ctx...), nil
}

// clip bounds peer-supplied text (an ERROR reason, a socket type) before it
// is quoted into an error message.
func clip(b []byte) []byte {
	const most = 64
	if len(b) > most {
		return b[:most]
	}
	return b
}
