package cli

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the side a user types into, and
// the terminal the command reads.
func openPTY(t *testing.T) (user, tty *os.File) {
	t.Helper()
	user, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminal to type into: %v", err)
	}
	t.Cleanup(func() { user.Close() })
	if err := unix.IoctlSetPointerInt(int(user.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(user.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return user, tty
}

// A secret typed or pasted at a terminal is read whole (several lines,
// until Ctrl-D) without echo, and the terminal echoes again afterwards.
// term.ReadPassword read one line: a pasted PEM block was cut at its
// first line and the rest went to the shell.
func TestSecretTypedAtATerminalIsNotEchoed(t *testing.T) {
	user, tty := openPTY(t)
	got := make(chan string, 1)
	go func() {
		v, err := readTyped(context.Background(), tty)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		got <- string(v)
	}()
	// Type once the terminal's echo is off (readTyped turned it off).
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err == nil && tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo never turned off")
		}
		time.Sleep(10 * time.Millisecond)
	}
	user.Write([]byte("-----BEGIN KEY-----\nc2VjcmV0\n-----END KEY-----\n\x04"))
	select {
	case v := <-got:
		if v != "-----BEGIN KEY-----\nc2VjcmV0\n-----END KEY-----" {
			t.Fatalf("read %q; want the three lines without the last Enter", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not end at Ctrl-D")
	}
	if tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Fatalf("the terminal's echo was not restored (%v)", err)
	}
}
