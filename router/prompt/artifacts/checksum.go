package artifacts

import (
	"encoding/hex"
	"fmt"

	"lukechampine.com/blake3"
)

// checksumPrefix is the only algorithm Dynamo's CheckedFile uses.
const checksumPrefix = "blake3:"

// Checksum is "blake3:" followed by 64 lowercase hex digits: the identity
// of an artifact's bytes, and the name of its cache blob.
type Checksum string

// ParseChecksum accepts exactly the form a card and pinned_artifacts use.
// Upper-case hex is refused rather than folded, so a pin and a card always
// compare as plain strings.
func ParseChecksum(s string) (Checksum, error) {
	if len(s) != len(checksumPrefix)+64 || s[:len(checksumPrefix)] != checksumPrefix {
		return "", fmt.Errorf("checksum must be %q followed by 64 lowercase hex digits", checksumPrefix)
	}
	for _, c := range s[len(checksumPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("checksum must be %q followed by 64 lowercase hex digits", checksumPrefix)
		}
	}
	return Checksum(s), nil
}

// Sum is the checksum of data.
func Sum(data []byte) Checksum {
	d := blake3.Sum256(data)
	return Checksum(checksumPrefix + hex.EncodeToString(d[:]))
}
