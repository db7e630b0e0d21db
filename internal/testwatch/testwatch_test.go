package testwatch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const dump = `goroutine 1 [running]:
main.main()
	/x/main.go:1 +0x1

goroutine 7 [chan receive, 25 minutes]:
sync.(*WaitGroup).Wait(0xc0)
	/usr/local/go/src/sync/waitgroup.go:118 +0x48
github.com/palyra-mesh/palyra/node.(*Node).Close.func1()
	/check/work/main/node/node.go:499 +0x1d6
github.com/palyra-mesh/palyra/node.(*Node).Close(0xc0)
	/check/work/main/node/node.go:488 +0x4a
created by testing.(*T).Run in goroutine 1
	/usr/local/go/src/testing/testing.go:1 +0x1

goroutine 8 [chan receive, 25 minutes]:
sync.(*WaitGroup).Wait(0xc1)
	/usr/local/go/src/sync/waitgroup.go:118 +0x48
github.com/palyra-mesh/palyra/node.(*Node).Close.func1()
	/check/work/main/node/node.go:499 +0x1d6
github.com/palyra-mesh/palyra/node.(*Node).Close(0xc1)
	/check/work/main/node/node.go:488 +0x4a

goroutine 12 [select, 2 minutes]:
github.com/quic-go/quic-go/http3.(*ClientConn).RoundTrip(0xc0)
	/root/go/pkg/mod/github.com/quic-go/quic-go@v0.65.0/http3/client.go:10 +0x1
github.com/palyra-mesh/palyra/cli/client.(*Client).Status(0xc0)
	/check/work/main/cli/client/client.go:77 +0x1

goroutine 9 [select, 3 minutes]:
github.com/quic-go/quic-go.(*Conn).run(0xc0)
	/root/go/pkg/mod/github.com/quic-go/quic-go@v0.65.0/connection.go:1 +0x1

goroutine 10 [select]:
github.com/palyra-mesh/palyra/node.(*Node).loop(0xc0)
	/check/work/main/node/node.go:10 +0x1

goroutine 11 [sleep]:
time.Sleep(0x1)
	/usr/local/go/src/runtime/time.go:1 +0x1
github.com/palyra-mesh/palyra/node_test.TestBusy(0xc0)
	/check/work/main/node/busy_test.go:12 +0x1
`

// The summary keeps only long waits in this module's code, merges
// goroutines with the same stack, and names file and line.
func TestSummary(t *testing.T) {
	got := Summary(dump, "TestBusy/sub", 30)
	want := "  [chan receive, 25 min] ×2\n    node.(*Node).Close.func1 node/node.go:499\n    node.(*Node).Close node/node.go:488\n" +
		"  [select, 2 min] ×1\n    (in github.com/quic-go/quic-go/http3.(*ClientConn).RoundTrip http3/client.go:10)\n    cli/client.(*Client).Status client/client.go:77\n" +
		"  [sleep, <1 min] ×1\n    node_test.TestBusy node/busy_test.go:12\n"
	if got != want {
		t.Fatalf("summary:\n%q\nwant\n%q", got, want)
	}
	if s := Summary(dump, "TestBusy", 2); !strings.Contains(s, "3 more stacks") {
		t.Fatalf("a summary over its line budget: %q", s)
	}
}

// A tracked test that runs past its limit is named on the last line, and
// the process exits with 3.
func TestTrackNamesAHungTest(t *testing.T) {
	if os.Getenv("PALYRA_TESTWATCH_CHILD") == "1" {
		Track(t)
		select {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestTrackNamesAHungTest$")
	cmd.Env = append(os.Environ(), "PALYRA_TESTWATCH_CHILD=1", "PALYRA_TEST_HANG_LIMIT=300ms")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("child: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "TestTrackNamesAHungTest hung") {
		t.Fatalf("last line %q", last)
	}
}
