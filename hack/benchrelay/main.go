// Command benchrelay is the floor for proxy-overhead benchmarks: a TCP relay
// that gives each client connection its own backend connection and copies
// bytes both ways (one goroutine per direction), understanding nothing of
// HTTP. What it costs per request is what Go's runtime and the sockets cost
// a goroutine-per-connection proxy on the machine at hand; a router's
// overhead above it is its own work.
package main

import (
	"flag"
	"io"
	"log"
	"net"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9200", "listen address")
	backend := flag.String("backend", "127.0.0.1:9100", "backend address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	for {
		client, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(client, *backend)
	}
}

func relay(client net.Conn, backend string) {
	defer client.Close()
	up, err := net.Dial("tcp", backend)
	if err != nil {
		log.Print(err)
		return
	}
	defer up.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(client, up)
		_ = client.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(up, client)
	_ = up.(*net.TCPConn).CloseWrite()
	<-done
}
