package zmtp

import "bytes"

// The ZMTP 3.x greeting (rfc.zeromq.org 23/ZMTP, 37/ZMTP), 64 bytes:
//
//	0      signature 0xFF
//	1..8   padding
//	9      signature 0x7F
//	10, 11 version major, minor
//	12..31 mechanism name, zero-padded
//	32     as-server
//	33..63 filler
const (
	greetingSize  = 64
	signatureSize = 10
	sigFirst      = 0xFF
	sigLast       = 0x7F
	offMajor      = 10
	offMinor      = 11
	offMechanism  = 12
	mechanismLen  = 20
)

// ourMinor is the version we announce: 3.0. Our subscriptions are 3.0-style
// data frames, so announcing 3.0 tells a 3.1 peer to expect exactly that.
// PING, a 3.1 command, is still answered because libzmq sends heartbeats to
// 3.0 peers as well.
const ourMinor = 0

var nullMechanism = [mechanismLen]byte{'N', 'U', 'L', 'L'}

// putGreeting writes our greeting into dst[:64]: version 3.0, NULL mechanism,
// as-server 0 (NULL has no client/server roles).
func putGreeting(dst []byte) {
	g := dst[:greetingSize]
	clear(g)
	g[0] = sigFirst
	g[9] = sigLast
	g[offMajor] = 3
	g[offMinor] = ourMinor
	copy(g[offMechanism:], nullMechanism[:])
}

// readGreeting reads and checks the peer's greeting and returns the minor
// version it speaks (0 or 1). Fields are checked as soon as they arrive so
// that a peer speaking something else entirely (HTTP, ZMTP 1.0/2.0) is
// refused at once instead of when the handshake deadline expires.
func readGreeting(r *reader) (minor int, err error) {
	g, err := r.peek(1)
	if err != nil {
		return 0, err
	}
	if g[0] != sigFirst {
		return 0, protoErr("greeting: bad signature byte 0x%02x (not a ZMTP peer)", g[0])
	}
	if g, err = r.peek(signatureSize); err != nil {
		return 0, err
	}
	if g[9] != sigLast {
		return 0, protoErr("greeting: bad signature end 0x%02x (ZMTP 1.0 peer?)", g[9])
	}
	if g, err = r.peek(offMinor + 1); err != nil {
		return 0, err
	}
	major, mnr := g[offMajor], g[offMinor]
	if major < 3 {
		return 0, protoErr("greeting: ZMTP version %d.%d not supported (need 3.x)", major, mnr)
	}
	if g, err = r.peek(greetingSize); err != nil {
		return 0, err
	}
	mech := g[offMechanism : offMechanism+mechanismLen]
	if !bytes.Equal(mech, nullMechanism[:]) {
		return 0, protoErr("greeting: mechanism %q not supported (need NULL)", bytes.TrimRight(mech, "\x00"))
	}
	r.discard(greetingSize)
	// A peer newer than us downgrades to our version (version negotiation in
	// 23/ZMTP); anything above 3.0 behaves as 3.1 towards a SUB.
	if major > 3 || mnr >= 1 {
		return 1, nil
	}
	return 0, nil
}
