package cluster

import (
	"fmt"
	"maps"
	"slices"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/peerpb"
)

// MaxMetaSize is the most a node's encoded Meta may take: memberlist
// carries it in every alive message.
const MaxMetaSize = memberlist.MetaMaxSize

// Meta is what a node tells every other member about itself through gossip,
// for placement decisions: labels (e.g. "zone": "a"), capacity per job kind
// (e.g. "wasm": 8) and the software version.
type Meta struct {
	Labels   map[string]string
	Capacity map[string]int
	Version  string
	// Features lists what this node's software supports that older
	// versions do not (FeatureBatch); the cluster sets it.
	Features []string
}

// FeatureBatch says a node applies CommandBatch entries (group commit):
// nodes batch only while every member says so, so a cluster being
// upgraded one node at a time never commits an entry an older node would
// refuse (and so diverge from the others).
const FeatureBatch = "batch"

// FeatureKVRun says a node applies a job's key-value writes once per (run,
// seq) and FeatureToolGrants that it gives a skill tool's runs (hook jobs
// queued in Apply) the tool's own grants: a write sent again, or a tool
// narrowing its skill's grants, would apply differently on an older node
// (it ignores the fields), so nodes use them only while every member says
// so (AllSupport).
const (
	FeatureKVRun      = "kv-run"
	FeatureToolGrants = "tool-grants"
)

// FeatureEndedOutput says a node keeps on a job cancelled or expired under
// its run the output the run had written (FinishJob.ended_output); an
// older node refuses such a result as stale and would keep none.
const FeatureEndedOutput = "ended-output"

// FeatureKVAudit says a node records an operator's key-value writes (the
// API's KVService) in the audit journal; an older node would not, and its
// journal would differ.
const FeatureKVAudit = "kv-audit"

// FeatureHookRules says a node refuses, in Apply, a hook binding that
// duplicates one (consensus.HookRules): an older node would take it, and
// the replicas' hooks would differ.
const FeatureHookRules = "hook-rules"

// FeatureHookExitNull says a node builds the after_run hook inputs of an
// entry under consensus.HookRules when the entry says so
// (Command.hook_rules): exit_code null for a job whose guest never
// exited. An older node ignores the field and would write 0, and the
// replicas' hook jobs would differ, so the leader stamps the rules only
// while every member says so (hookRules).
const FeatureHookExitNull = "hook-exit-null"

// FeatureCertLedger says a node records the certificates it signs in the
// certificate ledger and checks its peers' against it: while an older
// node is a member, nothing is recorded (it could not apply the records,
// and its audit journal would differ) and nothing is refused for lack of
// a record (its certificates have none).
const FeatureCertLedger = "cert-ledger"

// FeatureRunHere says a node applies RunHere entries (a short job run
// where it was submitted, recorded with its result in one entry): an
// older node refuses the command, and the replicas would differ, so a node
// runs jobs that way only while every member says so.
const FeatureRunHere = "run-here"

// features are those this software has.
var features = []string{FeatureBatch, FeatureKVRun, FeatureToolGrants, FeatureEndedOutput, FeatureKVAudit, FeatureHookRules, FeatureHookExitNull,
	FeatureCertLedger, FeatureRunHere}

// hookRules is the consensus.HookRules this node's store stamps on the
// entries it proposes (consensus.Store.SetHookRules): those of this
// software once every member applies them, none before.
func (c *Cluster) hookRules() uint32 {
	if c.AllSupport(FeatureHookExitNull) {
		return consensus.HookRules
	}
	return 0
}

// farewell is what a node's meta announces about its going: a graceful
// leave (it is leaving the cluster) or a clean stop (it stays a member and
// is expected back).
type farewell struct{ leaving, stopping bool }

// encodeMeta encodes m (deterministically, so equal metas give equal bytes)
// and refuses results larger than MaxMetaSize.
func encodeMeta(m Meta, f farewell) ([]byte, error) {
	pb := &peerpb.NodeMeta{Labels: m.Labels, Version: m.Version, Leaving: f.leaving, Stopping: f.stopping, Features: m.Features}
	if len(m.Capacity) > 0 {
		pb.Capacity = make(map[string]int64, len(m.Capacity))
		for k, v := range m.Capacity {
			pb.Capacity[k] = int64(v)
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(pb)
	if err != nil {
		return nil, fmt.Errorf("cluster: encode node meta: %w", err)
	}
	if len(b) > MaxMetaSize {
		return nil, fmt.Errorf("cluster: node meta is %d bytes encoded, more than the %d gossip allows; use fewer or shorter labels", len(b), MaxMetaSize)
	}
	return b, nil
}

// decodeMeta reverses encodeMeta.
func decodeMeta(b []byte) (Meta, farewell, error) {
	var pb peerpb.NodeMeta
	if err := proto.Unmarshal(b, &pb); err != nil {
		return Meta{}, farewell{}, fmt.Errorf("cluster: decode node meta: %w", err)
	}
	m := Meta{Labels: pb.Labels, Version: pb.Version, Features: pb.Features}
	if len(pb.Capacity) > 0 {
		m.Capacity = make(map[string]int, len(pb.Capacity))
		for k, v := range pb.Capacity {
			m.Capacity[k] = int(v)
		}
	}
	return m, farewell{leaving: pb.Leaving, stopping: pb.Stopping}, nil
}

// clone returns a deep copy, so callers never share maps with the cluster.
func (m Meta) clone() Meta {
	return Meta{Labels: maps.Clone(m.Labels), Capacity: maps.Clone(m.Capacity), Version: m.Version, Features: slices.Clone(m.Features)}
}
