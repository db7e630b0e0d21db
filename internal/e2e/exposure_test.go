package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// socketInodes returns the inodes of the sockets a process holds open.
func socketInodes(t *testing.T, pid int) map[string]bool {
	fds, err := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fd)
		if err == nil && strings.HasPrefix(link, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	return out
}

// procSockets lists (proto, local address, state) for the process's inet sockets.
func procSockets(t *testing.T, pid int) [][3]string {
	inodes := socketInodes(t, pid)
	var out [][3]string
	for _, proto := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, proto))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && inodes[fields[9]] {
				out = append(out, [3]string{proto, fields[1], fields[3]})
			}
		}
		f.Close()
	}
	return out
}

func TestOnlyTheQUICPortIsOpen(t *testing.T) {
	p := newProc(t)
	p.start()
	socks := procSockets(t, p.cmd.Process.Pid)
	if len(socks) != 1 {
		t.Fatalf("node holds %d inet sockets, want exactly one UDP socket: %v", len(socks), socks)
	}
	s := socks[0]
	if !strings.HasPrefix(s[0], "udp") {
		t.Fatalf("the node's socket is %s, want UDP (QUIC): %v", s[0], s)
	}
	port := p.addr[strings.LastIndex(p.addr, ":")+1:]
	var portNum int
	fmt.Sscanf(port, "%d", &portNum)
	if !strings.HasSuffix(s[1], fmt.Sprintf(":%04X", portNum)) {
		t.Fatalf("UDP socket bound to %s, want port %d", s[1], portNum)
	}
}

func TestClientWithoutClusterCertificateIsRefused(t *testing.T) {
	p := newProc(t)
	p.start()
	call := func(certs []tls.Certificate, path string) (*http.Response, error) {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}, Certificates: certs},
			QUICConfig:      &quic.Config{HandshakeIdleTimeout: 3 * time.Second},
		}
		defer tr.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+p.addr+path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			resp.Body = io.NopCloser(strings.NewReader(string(body)))
		}
		return resp, err
	}
	// A forged certificate (right principal form, wrong issuer) fails the handshake.
	if resp, err := call([]tls.Certificate{selfSigned(t)}, "/palyra.v1.NodeService/Status"); err == nil {
		t.Errorf("self-signed client answered with %s; want the handshake refused", resp.Status)
	}
	// Without a certificate, every call but pairing is refused.
	for _, path := range []string{"/palyra.v1.NodeService/Status", "/palyra.v1.JobService/ListJobs",
		"/palyra.v1.IdentityService/CreatePairing", "/palyra.v1.PolicyService/GetPolicy"} {
		resp, err := call(nil, path)
		if err != nil {
			t.Fatalf("%s without certificate: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "only pairing is open") {
			t.Errorf("%s without certificate: %s %q; want 401", path, resp.Status, body)
		}
	}
	// The pairing call is reachable (and refuses a bogus request on its merits).
	resp, err := call(nil, "/palyra.v1.IdentityService/Pair")
	if err != nil || resp.StatusCode == http.StatusUnauthorized {
		t.Fatalf("pairing endpoint not reachable without a certificate: %v %v", resp, err)
	}
	// The node still serves its own operator.
	if r := p.cli("status"); r.code != 0 {
		t.Fatalf("status after refused clients: %+v", r)
	}
}
