package wasm

import (
	"errors"
	"fmt"
	"math"
	"strconv"
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
// guest's own exit status, then traps. msg says what happened; hint, what
// to do about it (the flag that raises the limit the run hit), so a
// client shows every reason's fix in the same place.
func (o outcome) classify() (reason runtime.Reason, exitCode int, msg, hint string) {
	if o.err == nil && !o.outputFull {
		return runtime.ReasonNone, 0, "", ""
	}
	var out *outputLimitError
	switch {
	case errors.As(o.cause, &out):
		return runtime.ReasonOutputLimit, 0, o.outputMessage(out.stream), outputHint
	case o.cause == errTimeout:
		return runtime.ReasonTimeout, 0, fmt.Sprintf("timed out after %v", o.lim.timeout), "raise it with --timeout"
	case o.cause == ErrClosed:
		return runtime.ReasonInternal, 0, "the worker's wasm executor shut down during the run", "run the job again"
	case o.cause != nil || o.callerDone:
		return runtime.ReasonCanceled, 0, "canceled before the job finished", ""
	case o.outputFull:
		return runtime.ReasonOutputLimit, 0, o.outputMessage("output"), outputHint
	case o.outOfFuel:
		return runtime.ReasonOutOfFuel, 0, fmt.Sprintf("out of fuel after %d units", o.lim.fuel), o.lim.fuelHint()
	case o.refused > 0:
		return runtime.ReasonMemoryLimit, 0, fmt.Sprintf(
			"memory limit %s reached (guest tried to grow to %s)",
			humanBytes(o.lim.memory), humanBytes(o.refused)), "raise it with --memory (at most 4GiB)"
	}
	var exit *sys.ExitError
	if errors.As(o.err, &exit) {
		if exit.ExitCode() == 0 {
			return runtime.ReasonNone, 0, "", ""
		}
		code := int(exit.ExitCode())
		msg := fmt.Sprintf("exited with code %d", code)
		if tail := lastLine(o.stderr); tail != "" {
			msg += ": " + tail
		} else {
			msg += " (stderr is empty)"
		}
		return runtime.ReasonExitCode, code, msg, ""
	}
	if !o.instantiated && !strings.Contains(o.err.Error(), "wasm error:") {
		return runtime.ReasonInvalidModule, 0, "module failed to instantiate: " + firstLine(o.err.Error()), ""
	}
	return runtime.ReasonTrap, 0, trapMessage(o.err), ""
}

// outputHint is the hint of a run that overflowed stdout or stderr.
const outputHint = "raise it with --max-output (it bounds stdout and stderr, each)"

func (o outcome) outputMessage(stream string) string {
	return fmt.Sprintf("%s exceeded %s", stream, humanBytes(uint64(o.lim.maxOutput)))
}

// fuelHint says how to give a job that ran out of fuel more: --fuel, a
// tenfold budget for an example, and that leaving it out (or 0) is the
// default budget, not an unlimited one.
func (l limits) fuelHint() string {
	more := uint64(l.fuel) * 10
	if l.fuel > math.MaxInt64/10 {
		more = math.MaxInt64
	}
	if l.defaultFuel {
		return fmt.Sprintf("raise the budget with --fuel, e.g. --fuel %d (a job without --fuel, or with --fuel 0, gets the default of %s units, about 3–15 s of CPU; no budget is unlimited)",
			more, groupDigits(l.fuel))
	}
	return fmt.Sprintf("raise the budget with --fuel, e.g. --fuel %d (--fuel 0 is the default, %s units, not an unlimited budget)", more, groupDigits(l.defaultBudget))
}

// groupDigits writes n with thousands separators: 10,000,000,000.
func groupDigits[T int64 | uint64](n T) string {
	s := strconv.FormatUint(uint64(n), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
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
