// srvprof reference server: Go net/http hello handler (studies 1 and 2).
//
//	GET /      -> "hello world" (11 bytes)
//	GET /512b  -> 511 x 'a' + '\n' (512 bytes, with Content-Length)
//
// Listens on 127.0.0.1 only, with an explicit listen(2) backlog (Go's
// net.Listen always uses net.core.somaxconn, so the socket is made by hand).
// GOMAXPROCS comes from the environment (the run script sets it from --workers).
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
)

var (
	hello   = []byte("hello world")
	body512 = []byte(strings.Repeat("a", 511) + "\n")
)

func listen(port, backlog int) (net.Listener, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("listen: %w", err)
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close() // FileListener dups the fd
	return net.FileListener(f)
}

func main() {
	port := flag.Int("port", 0, "listen on 127.0.0.1:PORT")
	backlog := flag.Int("backlog", 511, "listen backlog")
	noKeepalive := flag.Bool("no-keepalive", false, "close the connection after every response")
	flag.Parse()
	if *port <= 0 || *port > 65535 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: hello-go --port PORT [--backlog N] [--no-keepalive]")
		os.Exit(2)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h.Set("Content-Length", "11")
		w.Write(hello)
	})
	len512 := strconv.Itoa(len(body512))
	mux.HandleFunc("/512b", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/plain")
		h.Set("Content-Length", len512)
		w.Write(body512)
	})

	ln, err := listen(*port, *backlog)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello-go:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: mux}
	if *noKeepalive {
		srv.SetKeepAlivesEnabled(false)
	}
	if err := srv.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "hello-go:", err)
		os.Exit(1)
	}
}
