// Command fetch is a Palyra example job using HTTP egress: it fetches the
// URL given on stdin and prints the status line and the body.
//
// The job needs the URL's host in its allow_hosts (and allow_private for a
// private address); without the grant the fetch fails with a capability
// error, which fetch prints to stderr before exiting with code 2.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o fetch.wasm ./examples/fetch
// Run:   palyra job submit --wasm fetch.wasm --input https://example.com/ --allow-host example.com --wait
package main

import (
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
		fmt.Fprintln(os.Stderr, "fetch: reading stdin:", err)
		os.Exit(1)
	}
	url := strings.TrimSpace(string(in))
	if url == "" {
		fmt.Fprintln(os.Stderr, "fetch: give the URL to fetch on stdin")
		os.Exit(1)
	}
	resp, err := guest.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetch:", err)
		if errors.Is(err, guest.ErrNoGrant) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Printf("status %d\n", resp.Status)
	os.Stdout.Write(resp.Body)
}
