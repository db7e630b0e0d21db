// Command kv is a Palyra example job using key-value storage: a counter.
// It reads a key from stdin (it must start with the job's granted prefix),
// increments the decimal number stored there (a missing key counts as 0)
// and prints the new value.
//
// Without a key-value grant covering the key it prints the capability
// error to stderr and exits with 2.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o kv.wasm ./examples/kv
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/palyra-mesh/palyra/runtime/wasm/guest"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(fmt.Errorf("reading stdin: %w", err))
	}
	key := strings.TrimSpace(string(in))
	n := 0
	switch val, err := guest.KVGet(key); {
	case errors.Is(err, guest.ErrNotFound):
	case err != nil:
		fail(err)
	default:
		if n, err = strconv.Atoi(string(val)); err != nil {
			fail(fmt.Errorf("key %q holds %q, not a number", key, val))
		}
	}
	n++
	if err := guest.KVPut(key, []byte(strconv.Itoa(n))); err != nil {
		fail(err)
	}
	fmt.Println(n)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "kv:", err)
	if errors.Is(err, guest.ErrNoGrant) {
		os.Exit(2)
	}
	os.Exit(1)
}
