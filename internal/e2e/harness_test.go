package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/internal/testwatch"
)

var palyraBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "palyra-e2e-")
	if err != nil {
		panic(err)
	}
	palyraBin = filepath.Join(dir, "palyra")
	build := exec.Command("go", "build", "-o", palyraBin, "github.com/palyra-mesh/palyra")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building palyra:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is one palyra node process.
type proc struct {
	t       *testing.T
	dataDir string
	addr    string
	args    []string
	cmd     *exec.Cmd
	log     *bytes.Buffer
}

// freeUDPAddr returns a loopback address with a free UDP port for a node
// to listen on, kept by the node across restarts. The port is below the
// kernel's ephemeral range: a port from that range (what binding :0
// gives) can be handed to any other socket on the machine while its node
// is down (a CLI call's QUIC client, a node of another test), and the
// restarted node then fails to bind its recorded address. That happened
// once in a CI run, with `go test` running packages in parallel.
func freeUDPAddr(t *testing.T) string {
	t.Helper()
	lo := ephemeralLow()
	if lo < 11000 { // no room below the range: take an ephemeral port
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Close()
		return pc.LocalAddr().String()
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(lo-10000)
		if portsGiven[port] {
			continue
		}
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		pc.Close()
		portsGiven[port] = true
		return fmt.Sprintf("127.0.0.1:%d", port)
	}
	t.Fatal("no free UDP port below the ephemeral range")
	return ""
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // never handed out twice in one run
)

// ephemeralLow is the first port of the kernel's ephemeral range (32768,
// Linux's default, when it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 32768
	}
	return lo
}

func newProc(t *testing.T, extra ...string) *proc {
	testwatch.Track(t)
	p := &proc{t: t, dataDir: t.TempDir(), addr: freeUDPAddr(t), args: extra}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) start() {
	p.t.Helper()
	p.log = &bytes.Buffer{}
	args := append([]string{"--data-dir", p.dataDir, "node", "start", "--listen", p.addr}, p.args...)
	p.cmd = exec.Command(palyraBin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if r := p.cli("status", "--json"); r.code == 0 && strings.Contains(r.stdout, `"raft_state": "Leader"`) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("node did not become ready; log:\n%s", p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *proc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Signal(syscall.SIGKILL)
		p.cmd.Wait()
		p.cmd = nil
	}
}

type result struct {
	code           int
	stdout, stderr string
}

func (p *proc) cli(args ...string) result {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, palyraBin, append([]string{"--data-dir", p.dataDir, "--addr", p.addr}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		p.t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

type job struct {
	ID      string `json:"id"`
	Phase   string `json:"phase"`
	Output  string `json:"output"`
	Attempt uint32 `json:"attempt"`
	NodeID  string `json:"node_id"`
	Error   *struct{ Code, Message string }
}

func (p *proc) job(id string) job {
	p.t.Helper()
	r := p.cli("job", "get", id, "--json")
	if r.code != 0 {
		p.t.Fatalf("job get %s: %+v", id, r)
	}
	var j job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		p.t.Fatal(err)
	}
	return j
}

func (p *proc) waitPhase(id string, phases ...string) job {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		j := p.job(id)
		for _, ph := range phases {
			if j.Phase == ph {
				return j
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("job %s is %s, want %v; log:\n%s", id, j.Phase, phases, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
