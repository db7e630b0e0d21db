package consensus

import (
	"fmt"
	"strings"
)

// Phase is a job's lifecycle phase. The numeric values are persisted in the
// raft log and snapshots: never renumber them.
type Phase uint32

// Job phases, with Palyra's wire names.
const (
	PhaseUnknown Phase = iota
	PhaseQueued
	PhaseRunning
	PhaseWaitingForApproval
	PhasePaused
	PhaseCompleted
	PhaseFailed
	PhaseAborted
	PhaseExpired
)

var phaseNames = [...]string{
	PhaseUnknown:            "unknown",
	PhaseQueued:             "queued",
	PhaseRunning:            "running",
	PhaseWaitingForApproval: "waiting_for_approval",
	PhasePaused:             "paused",
	PhaseCompleted:          "completed",
	PhaseFailed:             "failed",
	PhaseAborted:            "aborted",
	PhaseExpired:            "expired",
}

// AllPhases lists the real phases in lifecycle order.
var AllPhases = []Phase{PhaseQueued, PhaseRunning, PhaseWaitingForApproval, PhasePaused,
	PhaseCompleted, PhaseFailed, PhaseAborted, PhaseExpired}

// String returns the wire name.
func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint32(p))
}

// Terminal reports whether no further transition can happen.
func (p Phase) Terminal() bool {
	switch p {
	case PhaseCompleted, PhaseFailed, PhaseAborted, PhaseExpired:
		return true
	}
	return false
}

// ParsePhase parses a wire name case-insensitively ("Running", "QUEUED"),
// also accepting "-" for "_" and the older aliases "cancelled"/"canceled"
// (aborted), "succeeded"/"done" (completed) and "pending" (queued).
func ParsePhase(s string) (Phase, error) {
	k := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	for i, n := range phaseNames {
		if i != 0 && n == k {
			return Phase(i), nil
		}
	}
	switch k {
	case "cancelled", "canceled":
		return PhaseAborted, nil
	case "succeeded", "done":
		return PhaseCompleted, nil
	case "pending":
		return PhaseQueued, nil
	}
	return PhaseUnknown, fmt.Errorf("unknown job phase %q; use one of queued, running, waiting_for_approval, paused, completed, failed, aborted, expired", s)
}
