// Command secret is a Palyra example job reading a secret: it prints the
// length and sha256 of the secret named on stdin — never its value.
// Given "leak NAME" it prints the value by mistake, as a careless job
// might, to show that the job's output masks it (***).
//
// The job needs the name in its secret grant; without it the read fails
// with a capability error, printed to stderr, and the job exits with 2.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o secret.wasm ./examples/secret
package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/palyra-mesh/palyra/runtime/wasm/guest"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "secret: reading stdin:", err)
		os.Exit(1)
	}
	name := strings.TrimSpace(string(in))
	name, leak := strings.CutPrefix(name, "leak ")
	val, err := guest.Secret(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "secret:", err)
		if errors.Is(err, guest.ErrNoGrant) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	if leak {
		fmt.Printf("the token is %s, oops\n", val)
		os.Stderr.Write(val[:len(val)/2]) // in two writes: masked all the same
		os.Stderr.Write(val[len(val)/2:])
		fmt.Fprintln(os.Stderr)
		return
	}
	fmt.Printf("len=%d sha256=%x\n", len(val), sha256.Sum256(val))
}
