// Package artifacts resolves, verifies, caches and loads the tokenizer and
// chat-template files a Dynamo worker's model card names.
//
// Cards are fleet-authored and the files they name are code (a Jinja
// template runs in the router; a tokenizer decides what is hashed), so
// nothing is fetched, cached or handed out unless an operator pinned its
// blake3 checksum. Every byte is verified against that checksum after a
// download and on every read from the content-addressed cache.
//
// The package has three layers: ParseCard reads a card's artifact slots
// (bounded, every refusal with a reason); Store fetches the bytes of one
// CheckedFile under the pins and allow flags; Loader turns those bytes into
// a value (a tokenizer, a parsed template) in the background, with a
// bounded cache and a retry delay taken from a clock.Clock.
//
// Store and Loader do I/O and run loads on goroutines of their own: they
// belong beside the live adapters, never inside the deterministic core.
package artifacts
