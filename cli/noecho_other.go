//go:build !linux

package cli

import (
	"context"
	"os"

	"golang.org/x/term"
)

// readTyped reads one line typed at the terminal f without echo (the
// Linux build reads until Ctrl-D, so a pasted block arrives whole).
func readTyped(_ context.Context, f *os.File) ([]byte, error) {
	return term.ReadPassword(int(f.Fd()))
}
