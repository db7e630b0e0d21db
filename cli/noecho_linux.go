package cli

import (
	"bytes"
	"context"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// readTyped reads a value typed (or pasted) at the terminal f with echo
// off, line editing on, until Ctrl-D, giving up when ctx ends (Ctrl-C),
// with the terminal restored either way. The Enter before Ctrl-D is not
// part of the value; lines before it are (a pasted PEM block arrives
// whole, not cut at its first line with the rest left to the shell).
func readTyped(ctx context.Context, f *os.File) ([]byte, error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	type read struct {
		b   []byte
		err error
	}
	done := make(chan read, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(f, 1<<20))
		done <- read{b, err}
	}()
	select {
	case r := <-done:
		return bytes.TrimSuffix(r.b, []byte("\n")), r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
