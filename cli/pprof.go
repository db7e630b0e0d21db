package cli

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// servePprof serves Go's profiler on PALYRA_PPROF (a loopback address,
// e.g. 127.0.0.1:6060) when it is set: a debugging aid for benchmarks,
// off by default, and refused on any non-loopback address.
func servePprof() error {
	addr := os.Getenv("PALYRA_PPROF")
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("PALYRA_PPROF=%q: give a loopback address such as 127.0.0.1:6060", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("PALYRA_PPROF: %w", err)
	}
	go func() { _ = http.Serve(ln, mux) }()
	return nil
}
