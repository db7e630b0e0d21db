// Command reverse is a Palyra example job: it reads all of stdin and writes
// it back reversed rune by rune, adding nothing (`hello` → `olleh`).
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o reverse.wasm ./examples/reverse
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "reverse: reading stdin:", err)
		os.Exit(1)
	}
	runes := []rune(string(in))
	for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
		runes[i], runes[j] = runes[j], runes[i]
	}
	if _, err := os.Stdout.WriteString(string(runes)); err != nil {
		fmt.Fprintln(os.Stderr, "reverse: writing stdout:", err)
		os.Exit(1)
	}
}
