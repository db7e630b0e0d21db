package palyrav1

import (
	"fmt"
	"strings"
)

// WireName returns the phase's wire name ("queued", "waiting_for_approval").
func (p JobPhase) WireName() string {
	if p == JobPhase_JOB_PHASE_UNSPECIFIED {
		return "unknown"
	}
	if _, ok := JobPhase_name[int32(p)]; !ok {
		return fmt.Sprintf("phase(%d)", int32(p))
	}
	return strings.ToLower(strings.TrimPrefix(p.String(), "JOB_PHASE_"))
}

// Terminal reports whether no further transition can happen.
func (p JobPhase) Terminal() bool {
	switch p {
	case JobPhase_JOB_PHASE_COMPLETED, JobPhase_JOB_PHASE_FAILED, JobPhase_JOB_PHASE_ABORTED, JobPhase_JOB_PHASE_EXPIRED:
		return true
	}
	return false
}

// ParseJobPhase parses a wire name case-insensitively ("Running",
// "QUEUED", "waiting-for-approval"), also accepting the older aliases
// "cancelled"/"canceled" (aborted), "succeeded"/"done" (completed) and
// "pending" (queued).
func ParseJobPhase(s string) (JobPhase, error) {
	k := strings.ReplaceAll(strings.ToLower(strings.TrimSpace(s)), "-", "_")
	switch k {
	case "cancelled", "canceled":
		return JobPhase_JOB_PHASE_ABORTED, nil
	case "succeeded", "done":
		return JobPhase_JOB_PHASE_COMPLETED, nil
	case "pending":
		return JobPhase_JOB_PHASE_QUEUED, nil
	}
	if v, ok := JobPhase_value["JOB_PHASE_"+strings.ToUpper(k)]; ok && v != 0 {
		return JobPhase(v), nil
	}
	return 0, fmt.Errorf("unknown job phase %q; use one of queued, running, waiting_for_approval, paused, completed, failed, aborted, expired", s)
}
