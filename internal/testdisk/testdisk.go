// Package testdisk gives tests a disk that fills: a small tmpfs mounted on
// a fresh directory, a filler that takes what is left, and the free space.
// Mounting needs root; CI runs as root and must run these tests, so there a
// missing privilege fails the test instead of skipping it.
package testdisk

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Small mounts a tmpfs of size bytes on a fresh directory and returns it;
// it is unmounted when the test ends.
func Small(t testing.TB, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		msg := fmt.Sprintf("!!! %s NOT RUN: it mounts a small tmpfs and needs root", t.Name())
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI must run it")
		}
		fmt.Fprintln(os.Stderr, msg)
		t.Skip(msg)
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// Free is the bytes an unprivileged writer may still use on dir's disk.
func Free(t testing.TB, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Fill writes a file named "filler" into dir until the disk refuses more,
// then gives back leave bytes (truncating the filler), and returns the
// filler's path: removing it frees the disk again.
func Fill(t testing.TB, dir string, leave int64) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatalf("create the filler: %v", err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("z"), 4096)
	var n int64
	for {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v (want ENOSPC)", dir, err)
			}
			break
		}
	}
	if leave > 0 {
		if err := f.Truncate(max(0, n-leave)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}
