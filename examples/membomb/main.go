// Command membomb is a Palyra example job that keeps allocating and touching
// memory until the sandbox stops it. It exists to show (and test) the memory
// limit: the run ends with reason memory_limit.
package main

import (
	"fmt"
	"os"
)

func main() {
	var hoard [][]byte
	total := 0
	for {
		chunk := make([]byte, 1<<20)
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = byte(i) // touch every page so it is really backed
		}
		hoard = append(hoard, chunk)
		total += len(chunk)
		if total%(16<<20) == 0 {
			fmt.Fprintf(os.Stderr, "membomb: holding %d MiB\n", total>>20)
		}
	}
}
