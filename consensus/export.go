package consensus

import "github.com/palyra-mesh/palyra/proto/raftpb"

// JobFromRecord is the inverse of JobRecord: it rebuilds a Job from its log
// form with every field, e.g. from a forwarded apply's answer.
func JobFromRecord(r *raftpb.JobRecord) Job { return jobFromRecord(r) }
