package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
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
	for name, certs := range map[string][]tls.Certificate{"no certificate": nil, "self-signed": {selfSigned(t)}} {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}, Certificates: certs},
			QUICConfig:      &quic.Config{HandshakeIdleTimeout: 3 * time.Second},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+p.addr+"/palyra.v1.NodeService/Status",
			strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: request answered with %s; want the handshake refused", name, resp.Status)
		}
		cancel()
		tr.Close()
	}
	// The node still serves its own operator.
	if r := p.cli("status"); r.code != 0 {
		t.Fatalf("status after refused clients: %+v", r)
	}
}
