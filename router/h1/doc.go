// Package h1 is the HTTP/1.1 message syntax the gateway's own client
// (router/gateway/upstream) and server (router/httpd) share: bounded line
// reads, header fields, Content-Length and the chunked transfer coding.
// Everything here reads untrusted bytes, so every read has a cap and every
// malformed input is an error, never a panic.
package h1
