package browser

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"time"
)

// InstallHint is what to do when no Chromium is found.
const InstallHint = "install Debian's headless Chromium: apt-get install -y chromium-headless-shell"

// candidates are tried in order: the headless shell (small, no GPU or X
// dependencies), then full Chromium, then whatever PATH offers.
var (
	fixedCandidates = []string{
		"/usr/lib/chromium/chromium-headless-shell",
		"/usr/lib/chromium/chromium",
	}
	pathCandidates = []string{"chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}
)

// Detect finds a Chromium binary that runs. It prefers the real binaries
// under /usr/lib/chromium over the wrapper scripts Debian puts on PATH
// (/usr/bin/chromium sources config files and may not exec the browser
// directly, which hides its PID from the executor). A candidate counts only
// if `--version` answers within a few seconds. Nothing is ever downloaded.
func Detect() (path string, ok bool) {
	var found []string
	found = append(found, fixedCandidates...)
	for _, name := range pathCandidates {
		if p, err := exec.LookPath(name); err == nil {
			found = append(found, p)
		}
	}
	for _, p := range found {
		if usable(p) {
			return p, true
		}
	}
	return "", false
}

// usable reports whether p is an executable binary (not a shell script)
// that prints a Chromium version.
func usable(p string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return false
	}
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	head := make([]byte, 2)
	_, err = f.Read(head)
	f.Close()
	if err != nil || string(head) == "#!" {
		return false
	}
	// A machine busy enough can take longer than the first bound to start
	// Chromium even for --version (a test suite under -race on 2 cores
	// did): one that timed out is asked once more, for longer, before it
	// is called missing.
	for _, limit := range versionTimeouts {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		out, err := exec.CommandContext(ctx, p, "--version").Output()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			return bytes.Contains(out, []byte("Chromium")) || bytes.Contains(out, []byte("Chrome"))
		}
		if !timedOut {
			return false
		}
	}
	return false
}

// versionTimeouts bound each `--version` try of a candidate.
var versionTimeouts = []time.Duration{10 * time.Second, 45 * time.Second}
