package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A stream opened again asks to start where the output received ends
// (bytes dropped for a slow reader count) and prints what the node sends
// past that, even what overlaps; through a node older than resumption
// (messages not Resumable), which starts over at the attempt's first
// byte, what was printed is skipped by count, as before.
func TestLogPrinterResumes(t *testing.T) {
	const running = palyrav1.JobPhase_JOB_PHASE_RUNNING
	printer := func() (*logPrinter, *bytes.Buffer) {
		var out bytes.Buffer
		fs := flag.NewFlagSet("logs", flag.ContinueOnError)
		fs.Bool("json", false, "")
		return &logPrinter{c: ucli.NewContext(&ucli.App{Writer: &out, ErrWriter: &bytes.Buffer{}}, fs, nil)}, &out
	}

	p, out := printer()
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("a\n"), StdoutEnd: 2, Resumable: true})
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Note: "8 bytes of output were dropped", Stdout: []byte("z\n"), StdoutEnd: 12, StderrEnd: 3, Stderr: []byte("e\n\n"), Resumable: true})
	p.resume()
	req := p.request("j-1")
	if req.Attempt != 1 || req.StdoutOffset != 12 || req.StderrOffset != 3 || !req.Follow {
		t.Fatalf("resuming asks for %v; want attempt 1 from stdout 12, stderr 3", req)
	}
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("z\ny\n"), StdoutEnd: 14, Resumable: true})
	if got := out.String(); got != "a\nz\ny\n" {
		t.Fatalf("printed %q through a node that resumes; want %q", got, "a\nz\ny\n")
	}

	p, out = printer()
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("a\nb\n")})
	p.resume()
	if req := p.request("j-1"); req.StdoutOffset != 4 {
		t.Fatalf("resuming after an older node asks for stdout from %d; want 4", req.StdoutOffset)
	}
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("a\nb\nc\n")})
	if got := out.String(); got != "a\nb\nc\n" {
		t.Fatalf("printed %q through an older node that starts over; want %q", got, "a\nb\nc\n")
	}

	// After a gap (4 bytes dropped for a slow reader), an older node's
	// stream starts over from the first byte: where the output received
	// ends is what it sent, not the old end plus what it printed, so the
	// next resumption through a current node loses nothing.
	p, out = printer()
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("a\n"), StdoutEnd: 2, Resumable: true})
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("d\n"), StdoutEnd: 8, Resumable: true}) // b, c dropped
	p.resume()
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("a\nb\nc\nd\ne\n")})
	p.resume()
	if req := p.request("j-1"); req.StdoutOffset != 10 {
		t.Fatalf("resuming after an older node that started over asks for stdout from %d; want 10, where what it sent ends", req.StdoutOffset)
	}
	p.print(&palyrav1.JobLogsResponse{Attempt: 1, Phase: running, Stdout: []byte("f\n"), StdoutEnd: 12, Resumable: true})
	if got := out.String(); !strings.HasSuffix(got, "e\nf\n") {
		t.Fatalf("printed %q; want it to end with e and f, none lost", got)
	}
}
