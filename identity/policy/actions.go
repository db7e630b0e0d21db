package policy

import (
	"net/netip"
	"strings"
)

// Actions: one per API call, one per kind of node work, one per capability
// grant a job may request. The API passes them as Request.Action.
const (
	ActionJobSubmit = "job.submit"
	ActionJobRead   = "job.read"
	ActionJobList   = "job.list"
	ActionJobCancel = "job.cancel"
	ActionJobWatch  = "job.watch"
	// ActionJobPrune removes ended jobs and sets how long they are kept
	// (the retention): it deletes other principals' results, so it is an
	// admin action.
	ActionJobPrune = "job.prune"
	// ActionJobApprove approves or denies a job waiting for approval (an
	// admin action under the default policy).
	ActionJobApprove = "job.approve"

	// ActionBrowserOpen opens an interactive browser session on a worker;
	// ActionBrowserDrive runs steps in one, screenshots, lists and closes
	// it (a device only its own sessions, an operator any).
	ActionBrowserOpen  = "browser.open"
	ActionBrowserDrive = "browser.drive"

	ActionNodeStatus = "node.status"
	ActionNodeList   = "node.list"
	ActionNodeJoin   = "node.join"
	ActionNodeLeave  = "node.leave"
	ActionNodeDrain  = "node.drain"
	// ActionNodeRemove takes a node that is gone for good out of the
	// cluster (raft, registry, its work re-queued).
	ActionNodeRemove = "node.remove"

	ActionPairCreate   = "pair.create"
	ActionPairList     = "pair.list"
	ActionPairRevoke   = "pair.revoke"
	ActionDeviceList   = "device.list"
	ActionDeviceRevoke = "device.revoke"

	// ActionCAStatus reads the trust bundle and who holds the CA keys;
	// ActionCARotate replaces the cluster's CA root (an admin action).
	ActionCAStatus = "ca.status"
	ActionCARotate = "ca.rotate"

	ActionPolicyGet   = "policy.get"
	ActionPolicySet   = "policy.set"
	ActionPolicyCheck = "policy.check"

	ActionSecretSet    = "secret.set"
	ActionSecretList   = "secret.list"
	ActionSecretDelete = "secret.delete"

	// Skills: installing, trusting publishers and changing a skill's
	// status are admin actions; listing and running are for any device
	// under the default policy (a run's grants are checked like a job's).
	ActionSkillInstall = "skill.install"
	ActionSkillManage  = "skill.manage"
	ActionSkillTrust   = "skill.trust"
	ActionSkillList    = "skill.list"
	ActionSkillRun     = "skill.run"

	// ActionAuditRead lists and verifies the audit journal (an admin
	// action: it shows who did what).
	ActionAuditRead = "audit.read"

	// ActionKVRead reads and lists the replicated key-value store and
	// ActionKVWrite puts and deletes in it, on Grant resources of type kv
	// named by the key (or, for a list, the prefix): admin actions under
	// the default policy (jobs reach the store only through grant.kv).
	ActionKVRead  = "kv.read"
	ActionKVWrite = "kv.write"

	// ActionSnapshotSave copies the whole cluster out (every job's data,
	// the sealed secrets, the CA key and the data key): an admin action.
	ActionSnapshotSave = "snapshot.save"

	// Node work: only nodes do it under the default policy.
	ActionWorkerHeartbeat = "worker.heartbeat"
	ActionWorkerReport    = "worker.report"
	ActionRaftJoin        = "raft.join"
	ActionBlobFetch       = "blob.fetch"

	// Capability grants a job requests; the principal is the job's submitter.
	ActionGrantHTTP   = "grant.http"
	ActionGrantSecret = "grant.secret"
	ActionGrantKV     = "grant.kv"
)

// Principal kinds.
const (
	KindNode   = "node"
	KindDevice = "device"
)

// Resource types, and the ID of the one Cluster resource.
const (
	TypeCluster = "Cluster"
	TypeJob     = "Job"
	TypeGrant   = "Grant"

	ClusterID = "default"
)

// Grant types (the Grant resource's type attribute).
const (
	GrantHTTP   = "http"
	GrantSecret = "secret"
	GrantKV     = "kv"
)

// Actions returns every action a request may name, in a stable order.
func Actions() []string {
	return []string{
		ActionJobSubmit, ActionJobRead, ActionJobList, ActionJobCancel, ActionJobWatch, ActionJobPrune, ActionJobApprove,
		ActionBrowserOpen, ActionBrowserDrive,
		ActionNodeStatus, ActionNodeList, ActionNodeJoin, ActionNodeLeave, ActionNodeDrain, ActionNodeRemove,
		ActionPairCreate, ActionPairList, ActionPairRevoke, ActionDeviceList, ActionDeviceRevoke,
		ActionCAStatus, ActionCARotate,
		ActionPolicyGet, ActionPolicySet, ActionPolicyCheck,
		ActionSecretSet, ActionSecretList, ActionSecretDelete, ActionKVRead, ActionKVWrite, ActionSnapshotSave,
		ActionSkillInstall, ActionSkillManage, ActionSkillTrust, ActionSkillList, ActionSkillRun, ActionAuditRead,
		ActionWorkerHeartbeat, ActionWorkerReport, ActionRaftJoin, ActionBlobFetch,
		ActionGrantHTTP, ActionGrantSecret, ActionGrantKV,
	}
}

// ClusterResource is the resource of cluster-wide calls: Palyra::Cluster::"default".
func ClusterResource() Resource { return Resource{Type: TypeCluster, ID: ClusterID} }

// JobResource is a job as a resource; submitter is the submitting principal
// in "device:d-…" form and kind the job's kind ("wasm", "browser").
func JobResource(id, submitter, kind string) Resource {
	return Resource{Type: TypeJob, ID: id, Attrs: map[string]any{"submitter": submitter, "kind": kind}}
}

// GrantResource is a capability a job requests: typ is GrantHTTP, GrantSecret
// or GrantKV and name the host, secret key or key-value prefix.
//
// An HTTP grant of a host name is in each of its parent domains
// (Grant::"api.example.com" is in Grant::"example.com" and Grant::"com"),
// because a grant of a domain admits its subdomains: a policy that
// forbids `resource in Palyra::Grant::"example.com"` refuses a grant of
// example.com and of any name under it. name must be canonical
// (netguard.NormaliseAllowHost): the API normalises hosts before it asks.
func GrantResource(typ, name string) Resource {
	r := Resource{Type: TypeGrant, ID: name, Attrs: map[string]any{"type": typ}}
	if typ == GrantHTTP {
		r.Parents = parentDomains(name)
	}
	return r
}

// parentDomains lists the domains a host name is under, nearest first:
// "a.b.c" → "b.c", "c". An IP address (or "private") has none.
func parentDomains(host string) []string {
	if _, err := netip.ParseAddr(host); err == nil || !strings.Contains(host, ".") {
		return nil
	}
	var out []string
	for rest := host; ; {
		_, after, ok := strings.Cut(rest, ".")
		if !ok || after == "" {
			return out
		}
		out = append(out, after)
		rest = after
	}
}
