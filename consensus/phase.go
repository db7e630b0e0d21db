package consensus

import "github.com/palyra-mesh/palyra/proto/palyrav1"

// Phase is a job's lifecycle phase. Its numeric values equal the API's
// palyrav1.JobPhase values and are persisted in the raft log and
// snapshots: never renumber them.
type Phase uint32

// Job phases, with Palyra's wire names.
const (
	PhaseUnknown            = Phase(palyrav1.JobPhase_JOB_PHASE_UNSPECIFIED)
	PhaseQueued             = Phase(palyrav1.JobPhase_JOB_PHASE_QUEUED)
	PhaseRunning            = Phase(palyrav1.JobPhase_JOB_PHASE_RUNNING)
	PhaseWaitingForApproval = Phase(palyrav1.JobPhase_JOB_PHASE_WAITING_FOR_APPROVAL)
	PhasePaused             = Phase(palyrav1.JobPhase_JOB_PHASE_PAUSED)
	PhaseCompleted          = Phase(palyrav1.JobPhase_JOB_PHASE_COMPLETED)
	PhaseFailed             = Phase(palyrav1.JobPhase_JOB_PHASE_FAILED)
	PhaseAborted            = Phase(palyrav1.JobPhase_JOB_PHASE_ABORTED)
	PhaseExpired            = Phase(palyrav1.JobPhase_JOB_PHASE_EXPIRED)
)

// AllPhases lists the real phases in lifecycle order.
var AllPhases = []Phase{PhaseQueued, PhaseRunning, PhaseWaitingForApproval, PhasePaused,
	PhaseCompleted, PhaseFailed, PhaseAborted, PhaseExpired}

// String returns the wire name.
func (p Phase) String() string { return palyrav1.JobPhase(p).WireName() }

// Terminal reports whether no further transition can happen.
func (p Phase) Terminal() bool { return palyrav1.JobPhase(p).Terminal() }

// ParsePhase parses a wire name case-insensitively, with Palyra's aliases.
func ParsePhase(s string) (Phase, error) {
	p, err := palyrav1.ParseJobPhase(s)
	return Phase(p), err
}
