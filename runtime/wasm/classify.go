package wasm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/palyra-mesh/palyra/runtime"
	"github.com/tetratelabs/wazero/sys"
)

// outcome is everything known when a run ends; classify turns it into a
// Reason, exit code and one-line message.
type outcome struct {
	err          error // from instantiation or _start
	instantiated bool  // _start was reached
	cause        error // why the run's context ended, nil if it did not
	callerDone   bool  // the caller's own ctx ended
	outputFull   bool
	outOfFuel    bool   // the fuel check trapped
	refused      uint64 // largest memory size refused, bytes
	lim          limits
	stderr       []byte
}

// classify decides why a run ended. Limits the executor enforced come
// first (they explain whatever symptom the guest showed next), then the
// guest's own exit status, then traps.
func (o outcome) classify() (reason runtime.Reason, exitCode int, msg string) {
	if o.err == nil && !o.outputFull {
		return runtime.ReasonNone, 0, ""
	}
	var out *outputLimitError
	switch {
	case errors.As(o.cause, &out):
		return runtime.ReasonOutputLimit, 0, o.outputMessage(out.stream)
	case o.cause == errTimeout:
		return runtime.ReasonTimeout, 0, fmt.Sprintf("timed out after %v; raise it with --timeout", o.lim.timeout)
	case o.cause == ErrClosed:
		return runtime.ReasonInternal, 0, "the worker's wasm executor shut down during the run; run the job again"
	case o.cause != nil || o.callerDone:
		return runtime.ReasonCanceled, 0, "canceled before the job finished"
	case o.outputFull:
		return runtime.ReasonOutputLimit, 0, o.outputMessage("output")
	case o.outOfFuel:
		return runtime.ReasonOutOfFuel, 0, fmt.Sprintf("out of fuel after %d units", o.lim.fuel) // the hint names --fuel
	case o.refused > 0:
		return runtime.ReasonMemoryLimit, 0, fmt.Sprintf(
			"memory limit %s reached (guest tried to grow to %s); raise it with --memory",
			humanBytes(o.lim.memory), humanBytes(o.refused))
	}
	var exit *sys.ExitError
	if errors.As(o.err, &exit) {
		if exit.ExitCode() == 0 {
			return runtime.ReasonNone, 0, ""
		}
		code := int(exit.ExitCode())
		msg := fmt.Sprintf("exited with code %d", code)
		if tail := lastLine(o.stderr); tail != "" {
			msg += ": " + tail
		} else {
			msg += " (stderr is empty)"
		}
		return runtime.ReasonExitCode, code, msg
	}
	if !o.instantiated && !strings.Contains(o.err.Error(), "wasm error:") {
		return runtime.ReasonInvalidModule, 0, "module failed to instantiate: " + firstLine(o.err.Error())
	}
	return runtime.ReasonTrap, 0, trapMessage(o.err)
}

func (o outcome) outputMessage(stream string) string {
	return fmt.Sprintf("%s exceeded %s; raise it with --max-output", stream, humanBytes(uint64(o.lim.maxOutput)))
}

// trapMessage makes wazero's trap error one readable line:
// "wasm error: unreachable (recovered by wazero)\nwasm stack trace: ..." →
// "guest trapped: unreachable".
func trapMessage(err error) string {
	line := firstLine(err.Error())
	line = strings.TrimSuffix(line, " (recovered by wazero)")
	line = strings.TrimPrefix(line, "wasm error: ")
	msg := "guest trapped: " + line
	if strings.Contains(line, "stack overflow") {
		msg += " (recursion too deep)"
	}
	return msg
}
