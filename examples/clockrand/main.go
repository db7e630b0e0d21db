// Command clockrand reads the clock, sleeps, and draws random numbers
// (math/rand/v2 and crypto/rand), printing what it saw: run with
// --deterministic, every run prints the same; without, every run differs
// and the sleep takes real time. stdin: how long to sleep (default 50ms).
package main

import (
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"
)

func main() {
	in, _ := io.ReadAll(os.Stdin)
	d := 50 * time.Millisecond
	if s := strings.TrimSpace(string(in)); s != "" {
		v, err := time.ParseDuration(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bad duration %q: %v\n", s, err)
			os.Exit(2)
		}
		d = v
	}
	start := time.Now()
	fmt.Printf("now %s\n", start.UTC().Format(time.RFC3339Nano))
	time.Sleep(d)
	fmt.Printf("slept %s (asked %s)\n", time.Since(start), d)
	fmt.Printf("math/rand %d %d %d\n", rand.IntN(1_000_000), rand.IntN(1_000_000), rand.Uint64())
	b := make([]byte, 16)
	crand.Read(b)
	fmt.Printf("crypto/rand %s\n", hex.EncodeToString(b))
	m := map[int]bool{}
	for i := range 8 {
		m[i] = true
	}
	var order []int
	for k := range m {
		order = append(order, k)
	}
	fmt.Printf("map order %v\n", order)
	fmt.Fprintf(os.Stderr, "done at %d\n", time.Now().UnixNano())
}
