// Command fetchjson is an HTTP-fetch skill tool (examples/skills/web): it
// reads {"url": "..."} on stdin, fetches it through the host's egress
// (guest.Get: only granted hosts) and writes {"status": N, "bytes": N,
// "body": "..."} with the body cut to 64 KiB.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o fetchjson.wasm ./examples/fetchjson
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/palyra-mesh/palyra/runtime/wasm/guest"
)

func main() {
	var in struct {
		URL string `json:"url"`
	}
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	if err != nil || in.URL == "" {
		fmt.Fprintln(os.Stderr, `fetchjson: want {"url": "..."} on stdin`, err)
		os.Exit(1)
	}
	resp, err := guest.Get(in.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fetchjson:", err)
		if errors.Is(err, guest.ErrNoGrant) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	body := resp.Body
	if len(body) > 64<<10 {
		body = body[:64<<10]
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"status": resp.Status, "bytes": len(resp.Body), "body": string(body)})
}
