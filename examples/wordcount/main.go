// Command wordcount is a pure skill tool (examples/skills/web): it reads
// {"text": "..."} on stdin and writes {"words": N, "lines": N, "bytes": N}.
// It needs no grant.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o wordcount.wasm ./examples/wordcount
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	var in struct {
		Text string `json:"text"`
	}
	data, err := io.ReadAll(os.Stdin)
	if err == nil {
		err = json.Unmarshal(data, &in)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, `wordcount: want {"text": "..."} on stdin:`, err)
		os.Exit(1)
	}
	out := map[string]int{
		"words": len(strings.Fields(in.Text)),
		"lines": strings.Count(in.Text, "\n"),
		"bytes": len(in.Text),
	}
	if in.Text != "" && !strings.HasSuffix(in.Text, "\n") {
		out["lines"]++
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
