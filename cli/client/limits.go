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
	mib := func(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
	if len(m.WasmModule) > palyrav1.MaxModuleBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("module is %s; the limit is %s", mib(len(m.WasmModule)), mib(palyrav1.MaxModuleBytes)),
			Hint: "build with -ldflags=-s -w, or strip the module (wasm-strip)"}
	}
	if len(m.Input) > palyrav1.MaxInputBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("input is %s; the limit is %s", mib(len(m.Input)), mib(palyrav1.MaxInputBytes)),
			Hint: "pass less input, or have the job fetch its data"}
	}
	total := 0
	for i, in := range m.Inputs {
		if len(in) > palyrav1.MaxInputBytes {
			return &Error{Code: "invalid_argument", Message: fmt.Sprintf("input %d is %s; the limit is %s per task", i, mib(len(in)), mib(palyrav1.MaxInputBytes)),
				Hint: "pass less input per task, or have the tasks fetch their data"}
		}
		total += len(in)
	}
	if total > palyrav1.MaxArrayInputBytes {
		return &Error{Code: "invalid_argument", Message: fmt.Sprintf("the array's inputs total %s; the limit is %s per array", mib(total), mib(palyrav1.MaxArrayInputBytes)),
			Hint: "split the work into several arrays"}
	}
	return nil
}
