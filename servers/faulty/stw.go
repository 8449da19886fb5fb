// stw mode: every --stw-every answered requests a goroutine spins --spin-ms in
// a loop without function calls while another forces a garbage collection. With
// asynchronous preemption off (the process re-executes itself with
// GODEBUG=asyncpreemptoff=1), the collector's stop-the-world cannot complete
// until the loop ends: every goroutine, request handlers included, stops for
// about --spin-ms. GET /pauses answers the runtime's own count and total of
// its stop-the-world pauses (runtime/metrics), for the test to compare with.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

var (
	stwEvery   = flag.Int64("stw-every", 100, "stw: force a pause every N answered requests")
	spinMs     = flag.Int("spin-ms", 20, "stw: length of the loop the pause waits for")
	spinIters  uint64        // iterations of spin() that take --spin-ms, calibrated at start
	spinResult atomic.Uint64 // keeps the loop's result alive
	stwBusy    atomic.Bool   // a pause is being made
)

// reexecForStw re-executes the process with asynchronous preemption off, once.
func reexecForStw() {
	if strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1") {
		return
	}
	self, err := os.Executable()
	if err == nil {
		env := append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		err = syscall.Exec(self, os.Args, env)
	}
	fmt.Fprintln(os.Stderr, "faulty: re-exec for --mode stw:", err)
	os.Exit(1)
}

// spin runs n steps of a linear congruential generator: no function call, so
// no point where the goroutine can be stopped without asynchronous preemption.
func spin(n uint64) uint64 {
	x := uint64(1)
	for i := uint64(0); i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

// calibrateSpin sets spinIters so that spin(spinIters) takes about --spin-ms.
func calibrateSpin() {
	const probe = 50_000_000
	start := time.Now()
	spinResult.Store(spin(probe))
	perMs := float64(probe) / (float64(time.Since(start).Nanoseconds()) / 1e6)
	spinIters = uint64(perMs * float64(*spinMs))
}

// maybeStopTheWorld makes a pause after every --stw-every'th answered request.
func maybeStopTheWorld(n int64) {
	if n%*stwEvery != 0 || !stwBusy.CompareAndSwap(false, true) {
		return
	}
	started := make(chan struct{})
	go func() {
		close(started)
		spinResult.Store(spin(spinIters))
	}()
	go func() {
		<-started
		runtime.GC()
		stwBusy.Store(false)
	}()
}

// pausesBody is the runtime's own account of its stop-the-world pauses so far:
// "pauses=N total_ms=T", T summed from the histograms' bucket midpoints.
func pausesBody() []byte {
	samples := []metrics.Sample{
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/sched/pauses/total/other:seconds"},
	}
	metrics.Read(samples)
	var n uint64
	var total float64
	for _, s := range samples {
		if s.Value.Kind() != metrics.KindFloat64Histogram {
			continue
		}
		h := s.Value.Float64Histogram()
		for i, c := range h.Counts {
			lo, hi := h.Buckets[i], h.Buckets[i+1]
			if hi > 1e9 {
				hi = lo
			}
			if lo < -1e9 {
				lo = hi
			}
			n += c
			total += float64(c) * (lo + hi) / 2
		}
	}
	return []byte(fmt.Sprintf("pauses=%d total_ms=%.3f\n", n, total*1e3))
}
