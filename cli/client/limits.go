package client

import (
	"fmt"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// checkSize refuses, before anything is sent, a submission over the
// limits every node enforces, with the message and hint a node gives: a
// payload far over them would otherwise meet the transport's own limit
// first and get its raw error.
func checkSize(m *palyrav1.SubmitJobRequest) error {
	if len(m.WasmModule) > palyrav1.MaxModuleBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("module is %s; the limit is %s", SizeOf(len(m.WasmModule), palyrav1.MaxModuleBytes), SizeOf(palyrav1.MaxModuleBytes, 0)),
			Hint: "build with -ldflags=-s -w, or strip the module (wasm-strip)"}
	}
	if len(m.Input) > palyrav1.MaxInputBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("input is %s; the limit is %s", SizeOf(len(m.Input), palyrav1.MaxInputBytes), SizeOf(palyrav1.MaxInputBytes, 0)),
			Hint: "pass less input, or have the job fetch its data"}
	}
	total := 0
	for i, in := range m.Inputs {
		if len(in) > palyrav1.MaxInputBytes {
			return &Error{Code: "invalid_argument", Message: fmt.Sprintf("input %d is %s; the limit is %s per task", i, SizeOf(len(in), palyrav1.MaxInputBytes), SizeOf(palyrav1.MaxInputBytes, 0)),
				Hint: "pass less input per task, or have the tasks fetch their data"}
		}
		total += len(in)
	}
	if total > palyrav1.MaxArrayInputBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("the array's inputs total %s; the limit is %s per array", SizeOf(total, palyrav1.MaxArrayInputBytes), SizeOf(palyrav1.MaxArrayInputBytes, 0)),
			Hint: "split the work into several arrays"}
	}
	return nil
}

// SizeOf formats a size in bytes for a message about a limit: in KiB, MiB
// or GiB, unless that would read the same as the limit (1,048,577 bytes
// against 1 MiB), then in bytes. limit 0: no limit to compare with.
func SizeOf(n, limit int) string {
	f := func(n int) string {
		switch {
		case n < 1<<10:
			return fmt.Sprintf("%d B", n)
		case n < 1<<20:
			return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
		case n < 1<<30:
			return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
		}
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	}
	if limit > 0 && n != limit && f(n) == f(limit) {
		return fmt.Sprintf("%d bytes", n)
	}
	return f(n)
}
