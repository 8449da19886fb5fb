// faulty: a small HTTP/1.1 server that misbehaves on purpose, for srvprof's
// integration tests. Same contract as the reference servers (127.0.0.1:PORT,
// GET / -> "hello world", GET /512b -> 512 bytes, keep-alive) plus --mode.
//
// Modes (see servers/faulty/README.md):
//
//	ok                  behave normally
//	delay               sleep --delay-ms before every response (every --delay-every'th)
//	reset-every-third   every third connection (counting connections that sent a
//	                    request): read its request, then close with SO_LINGER 0
//	                    (the client sees an RST instead of a response)
//	stall-once          answer normally, but --stall-after-ms after the first
//	                    request stop answering for --stall-ms, once
//	never-answer        accept and read, never write
//	malformed           answer with bytes that are not HTTP, then close
//	close-mid-response  headers with Content-Length 100, 10 body bytes, close
//	slow                write the response one byte at a time, --byte-delay-ms apart
//	crash-after         after --after-requests answered requests die by
//	                    --signal SEGV (exit status 139) or KILL (137)
//	stw                 every --stw-every answered requests, stop the world
//	                    for about --spin-ms (stw.go)
//
// On SIGTERM/SIGINT it prints "answered=N" (responses fully written) to stderr
// and exits 0.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

var (
	port         = flag.Int("port", 0, "listen on 127.0.0.1:PORT")
	backlog      = flag.Int("backlog", 511, "listen backlog")
	noKeepalive  = flag.Bool("no-keepalive", false, "close the connection after every response")
	mode         = flag.String("mode", "ok", "ok|delay|reset-every-third|stall-once|never-answer|malformed|close-mid-response|slow|crash-after|stw")
	delayMs      = flag.Int("delay-ms", 100, "delay: sleep before each response")
	delayEvery   = flag.Int64("delay-every", 1, "delay: sleep before every Nth request's response only")
	stallAfterMs = flag.Int("stall-after-ms", 1000, "stall-once: start of the stall, after the first request")
	stallMs      = flag.Int("stall-ms", 2000, "stall-once: length of the stall")
	byteDelayMs  = flag.Int("byte-delay-ms", 10, "slow: delay between bytes")
	afterReqs    = flag.Int64("after-requests", 100, "crash-after: die after this many answered requests")
	sigName      = flag.String("signal", "SEGV", "crash-after: SEGV or KILL")
)

var (
	answered  atomic.Int64
	delayable atomic.Int64 // requests seen by the delay mode
	requested atomic.Int64 // connections that sent at least one request
	firstReq  sync.Once
	stallFrom time.Time // set once, by the first request
	stallMu   sync.Mutex
	crashMu   sync.Mutex
	hello     = []byte("hello world")
	body512   = []byte(strings.Repeat("a", 511) + "\n")
	notFound  = []byte("not found\n")
)

func listen(port, backlog int) (net.Listener, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
	}
	if err := syscall.Listen(fd, backlog); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "listener")
	defer f.Close()
	return net.FileListener(f)
}

// readRequest reads one request head; returns the path and whether the client
// wants the connection kept open. Request bodies are not supported.
func readRequest(r *bufio.Reader) (path string, keep bool, err error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", false, err
	}
	parts := strings.Fields(line)
	if len(parts) != 3 {
		return "", false, fmt.Errorf("bad request line %q", line)
	}
	path, _, _ = strings.Cut(parts[1], "?")
	keep = parts[2] == "HTTP/1.1"
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return "", false, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, ok := strings.Cut(h, ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), "connection") {
			switch strings.ToLower(strings.TrimSpace(value)) {
			case "close":
				keep = false
			case "keep-alive":
				keep = true
			}
		}
	}
	return path, keep && !*noKeepalive, nil
}

func response(path string, keep bool) []byte {
	status, body := "200 OK", hello
	switch path {
	case "/":
	case "/512b":
		body = body512
	case "/pauses":
		body = pausesBody()
	default:
		status, body = "404 Not Found", notFound
	}
	conn := "keep-alive"
	if !keep {
		conn = "close"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %s\r\nServer: srvprof-faulty\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: %s\r\n\r\n", status, len(body), conn)
	b.Write(body)
	return b.Bytes()
}

// stallWait blocks while the one-time stall window is open.
func stallWait() {
	firstReq.Do(func() {
		stallMu.Lock()
		stallFrom = time.Now().Add(time.Duration(*stallAfterMs) * time.Millisecond)
		stallMu.Unlock()
	})
	stallMu.Lock()
	from := stallFrom
	stallMu.Unlock()
	until := from.Add(time.Duration(*stallMs) * time.Millisecond)
	if now := time.Now(); !now.Before(from) && now.Before(until) {
		time.Sleep(until.Sub(now))
	}
}

// die kills the process with a real signal death (not an exit code).
func die() {
	if *sigName == "KILL" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	// The Go runtime keeps its own SIGSEGV handler even after
	// signal.Reset(SIGSEGV); a SIGSEGV sent with kill(2) then makes it print a
	// goroutine dump and exit with status 2 (checked with Go 1.26), not die by
	// the signal. So restore SIG_DFL with a raw rt_sigaction, then send SIGSEGV.
	var sa struct {
		handler  uintptr
		flags    uint64
		restorer uintptr
		mask     uint64
	}
	syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(syscall.SIGSEGV), uintptr(unsafe.Pointer(&sa)), 0, 8, 0, 0)
	syscall.Kill(os.Getpid(), syscall.SIGSEGV)
	time.Sleep(time.Second)
	os.Exit(139) // not reached
}

func serve(c net.Conn) {
	defer c.Close()
	tc := c.(*net.TCPConn)
	r := bufio.NewReader(c)
	var nth int64 // this connection's number among connections that sent a request
	for {
		if *mode == "never-answer" {
			io.Copy(io.Discard, c) // read until the client gives up
			return
		}
		path, keep, err := readRequest(r)
		if err != nil {
			return
		}
		if nth == 0 {
			// Counted at the first request, so that readiness probes (a bare
			// TCP connect) do not shift the every-third pattern.
			nth = requested.Add(1)
		}
		switch *mode {
		case "reset-every-third":
			if nth%3 == 0 {
				tc.SetLinger(0) // close() now sends RST
				return
			}
		case "delay":
			if *delayEvery <= 1 || delayable.Add(1)%*delayEvery == 0 {
				time.Sleep(time.Duration(*delayMs) * time.Millisecond)
			}
		case "stall-once":
			stallWait()
		case "malformed":
			c.Write([]byte("\x00\xffTHIS IS NOT HTTP\r\n\x7f\x01garbage\n"))
			return
		case "close-mid-response":
			c.Write([]byte("HTTP/1.1 200 OK\r\nServer: srvprof-faulty\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n0123456789"))
			return
		case "crash-after":
			crashMu.Lock() // answer exactly N, then die before answering more
			if answered.Load() >= *afterReqs {
				die()
			}
		}
		resp := response(path, keep)
		if *mode == "slow" {
			for i := range resp {
				if _, err := c.Write(resp[i : i+1]); err != nil {
					return
				}
				time.Sleep(time.Duration(*byteDelayMs) * time.Millisecond)
			}
		} else if _, err := c.Write(resp); err != nil {
			if *mode == "crash-after" {
				crashMu.Unlock()
			}
			return
		}
		n := answered.Add(1)
		if *mode == "stw" && path == "/" {
			maybeStopTheWorld(n)
		}
		if *mode == "crash-after" {
			if n >= *afterReqs {
				die()
			}
			crashMu.Unlock()
		}
		if !keep {
			return
		}
	}
}

func main() {
	flag.Parse()
	if *port <= 0 || *port > 65535 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: faulty --port PORT --mode MODE [options]; see servers/faulty/README.md")
		os.Exit(2)
	}
	switch *mode {
	case "ok", "delay", "reset-every-third", "stall-once", "never-answer", "malformed", "close-mid-response", "slow", "crash-after", "stw":
	default:
		fmt.Fprintf(os.Stderr, "faulty: unknown --mode %q\n", *mode)
		os.Exit(2)
	}
	if *mode == "stw" {
		reexecForStw()
		calibrateSpin()
	}
	if *sigName != "SEGV" && *sigName != "KILL" {
		fmt.Fprintf(os.Stderr, "faulty: --signal must be SEGV or KILL, not %q\n", *sigName)
		os.Exit(2)
	}
	ln, err := listen(*port, *backlog)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faulty:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		fmt.Fprintf(os.Stderr, "answered=%d\n", answered.Load())
		os.Exit(0)
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "faulty: accept:", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go serve(c)
	}
}
