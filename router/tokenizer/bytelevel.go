package tokenizer

import "unicode/utf8"

// byteRunes is GPT-2's bytes_to_unicode table: every byte gets a printable
// rune, so a byte-level vocabulary stores any byte string as text. Bytes
// that are printable Latin-1 keep their own rune; the others (controls,
// space, 0x7F-0xA0, 0xAD) get U+0100 onwards, in byte order.
var byteRunes = func() (table [256]rune) {
	next := rune(256)
	for b := 0; b < 256; b++ {
		if printableLatin1(b) {
			table[b] = rune(b)
			continue
		}
		table[b] = next
		next++
	}
	return table
}()

// runeBytes inverts byteRunes; a rune outside the table maps to -1.
var runeBytes = func() map[rune]byte {
	m := make(map[rune]byte, 256)
	for b, r := range byteRunes {
		m[r] = byte(b)
	}
	return m
}()

func printableLatin1(b int) bool {
	return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
}

// fromByteLevel turns a byte-level vocabulary string back into the raw bytes
// it stands for; ok is false when a rune is not in the byte-level alphabet.
func fromByteLevel(s string) (raw string, ok bool) {
	buf := make([]byte, 0, len(s))
	for _, r := range s {
		if r == utf8.RuneError {
			return "", false
		}
		b, found := runeBytes[r]
		if !found {
			return "", false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}
