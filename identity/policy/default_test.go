package policy

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestDefaultPolicyIntent states what the shipped policy is for, case by case.
func TestDefaultPolicyIntent(t *testing.T) {
	e := defaultEngine(t)
	ownJob := JobResource("j-1", plainDevice.String(), "wasm")
	othersJob := JobResource("j-2", otherDevice.String(), "wasm")
	cases := []struct {
		name   string
		p      Principal
		action string
		res    Resource
		allow  bool
		reason string
	}{
		{"operator submits", opDevice, ActionJobSubmit, ClusterResource(), true, "operators"},
		{"operator sets policy", opDevice, ActionPolicySet, ClusterResource(), true, "operators"},
		{"operator pairs", opDevice, ActionPairCreate, ClusterResource(), true, "operators"},
		{"operator cancels any job", opDevice, ActionJobCancel, othersJob, true, "operators"},
		{"operator grants http", opDevice, ActionGrantHTTP, GrantResource(GrantHTTP, "example.com"), true, "operators"},
		{"operator prunes jobs", opDevice, ActionJobPrune, ClusterResource(), true, "operators"},
		{"operator saves snapshots", opDevice, ActionSnapshotSave, ClusterResource(), true, "operators"},
		{"operator removes a node", opDevice, ActionNodeRemove, ClusterResource(), true, "operators"},
		{"operator cannot do node work", opDevice, ActionWorkerReport, ownJob, false, ""},
		{"operator cannot join raft", opDevice, ActionRaftJoin, ClusterResource(), false, ""},

		{"device submits", plainDevice, ActionJobSubmit, ClusterResource(), true, "devices"},
		{"device reads node status", plainDevice, ActionNodeStatus, ClusterResource(), true, "devices"},
		{"device cancels own job", plainDevice, ActionJobCancel, ownJob, true, "devices-own-jobs"},
		{"device cannot cancel another's job", plainDevice, ActionJobCancel, othersJob, false, ""},
		{"device cannot read another's job", plainDevice, ActionJobRead, othersJob, false, ""},
		{"device cannot set policy", plainDevice, ActionPolicySet, ClusterResource(), false, ""},
		{"device cannot pair", plainDevice, ActionPairCreate, ClusterResource(), false, ""},
		{"device cannot read secrets", plainDevice, ActionSecretList, ClusterResource(), false, ""},
		{"device cannot prune jobs", plainDevice, ActionJobPrune, ClusterResource(), false, ""},
		{"device cannot save snapshots", plainDevice, ActionSnapshotSave, ClusterResource(), false, ""},
		{"device cannot remove a node", plainDevice, ActionNodeRemove, ClusterResource(), false, ""},
		{"device gets no grants", plainDevice, ActionGrantHTTP, GrantResource(GrantHTTP, "example.com"), false, ""},

		{"node reports", node, ActionWorkerReport, ownJob, true, "nodes"},
		{"node reads a job", node, ActionJobRead, othersJob, true, "nodes"},
		{"node cannot submit", node, ActionJobSubmit, ClusterResource(), false, ""},
		{"node cannot set policy", node, ActionPolicySet, ClusterResource(), false, ""},
		{"node cannot cancel", node, ActionJobCancel, othersJob, false, ""},
		{"node cannot prune jobs", node, ActionJobPrune, ClusterResource(), false, ""},
		{"node cannot save snapshots", node, ActionSnapshotSave, ClusterResource(), false, ""},
		{"operator flag means nothing on a node", Principal{Kind: KindNode, ID: "n-2", Operator: true}, ActionPolicySet, ClusterResource(), false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := e.Authorize(Request{Principal: c.p, Action: c.action, Resource: c.res})
			if d.Allow != c.allow || len(d.Errors) > 0 {
				t.Fatalf("got %s, want allow=%v", Explain(d), c.allow)
			}
			if c.allow && !slices.Contains(d.Reasons, c.reason) {
				t.Errorf("reasons %v, want %s among them", d.Reasons, c.reason)
			}
			if !c.allow && len(d.Reasons) != 0 {
				t.Errorf("deny should have no reasons (no permit), got %v", d.Reasons)
			}
		})
	}
}

// TestDefaultPolicyMatrix checks every action for each kind of caller, so an
// action added later cannot slip through unnoticed.
func TestDefaultPolicyMatrix(t *testing.T) {
	e := defaultEngine(t)
	nodeWork := []string{ActionWorkerHeartbeat, ActionWorkerReport, ActionRaftJoin, ActionBlobFetch}
	want := map[string][]string{
		"node":     append(slices.Clone(nodeWork), ActionNodeStatus, ActionJobRead),
		"device":   {ActionJobSubmit, ActionJobList, ActionNodeStatus, ActionJobRead, ActionJobWatch, ActionJobCancel, ActionBrowserOpen, ActionBrowserDrive, ActionSkillList, ActionSkillRun},
		"operator": slices.DeleteFunc(Actions(), func(a string) bool { return slices.Contains(nodeWork, a) }),
	}
	callers := map[string]Principal{"node": node, "device": plainDevice, "operator": opDevice}
	for _, who := range slices.Sorted(maps.Keys(callers)) {
		p := callers[who]
		var got []string
		for _, a := range Actions() {
			if d := e.Authorize(Request{Principal: p, Action: a, Resource: resourceFor(t, a, p)}); d.Allow {
				got = append(got, a)
			}
		}
		slices.Sort(got)
		slices.Sort(want[who])
		if !slices.Equal(got, want[who]) {
			t.Errorf("%s may do %v, want %v", who, got, want[who])
		}
	}
}

func TestExplainDefault(t *testing.T) {
	e := defaultEngine(t)
	d := e.Authorize(Request{Principal: plainDevice, Action: ActionPolicySet, Resource: ClusterResource()})
	if got, want := Explain(d), "deny: no policy permits device:d-1a2b3c4d to policy.set on Cluster::default"; got != want {
		t.Errorf("Explain = %q, want %q", got, want)
	}
	d = e.Authorize(Request{Principal: opDevice, Action: ActionPolicySet, Resource: ClusterResource()})
	if got, want := Explain(d), "allow by policy operators"; got != want {
		t.Errorf("Explain = %q, want %q", got, want)
	}
}

func TestDefaultPolicyIDs(t *testing.T) {
	s := mustParse(t, string(DefaultPolicy()))
	if got, want := s.IDs(), []string{"operators", "nodes", "devices", "devices-own-jobs"}; !slices.Equal(got, want) {
		t.Errorf("IDs = %v, want %v", got, want)
	}
	if string(s.Source()) != string(DefaultPolicy()) {
		t.Error("Source differs from the parsed document")
	}
}

// TestActionsMatchSchema keeps the exported constants and the schema in step.
func TestActionsMatchSchema(t *testing.T) {
	got := slices.Sorted(maps.Keys(schemaModel.appliesTo))
	want := slices.Sorted(slices.Values(Actions()))
	if !slices.Equal(got, want) {
		t.Errorf("schema actions %v\nconstants      %v", got, want)
	}
	for _, g := range []string{"admin", "node_work", "jobs", "grants"} {
		if !slices.Contains(schemaModel.actionNames, g) {
			t.Errorf("action group %q missing from schema", g)
		}
	}
}

// TestDefaultPolicyGrantExample uncomments the grant example at the end of
// the default policy and checks that it does what it says for devices as
// the API builds them: devices carry no labels (pairing sets none), so the
// example must match on attributes a device really has.
func TestDefaultPolicyGrantExample(t *testing.T) {
	src := string(DefaultPolicy())
	i := strings.Index(src, "// @id(")
	if i < 0 {
		t.Fatal("the default policy has no commented example")
	}
	var example []string
	for _, line := range strings.Split(src[i:], "\n") {
		if !strings.HasPrefix(line, "//") {
			break
		}
		example = append(example, strings.TrimPrefix(strings.TrimPrefix(line, "//"), " "))
	}
	e := NewEngine(mustParse(t, src+"\n"+strings.Join(example, "\n")+"\n"))
	grant := GrantResource(GrantHTTP, "api.example.com")
	// plainDevice (d-1a2b3c4d) is the first device the example names.
	listed := Principal{Kind: KindDevice, ID: plainDevice.ID, Name: "ci-runner"}
	if d := e.Authorize(Request{Principal: listed, Action: ActionGrantHTTP, Resource: grant}); !d.Allow {
		t.Errorf("the example does not grant the device it names: %s\n%s", Explain(d), strings.Join(example, "\n"))
	}
	if d := e.Authorize(Request{Principal: otherDevice, Action: ActionGrantHTTP, Resource: grant}); d.Allow {
		t.Errorf("the example grants a device it does not name: %s", Explain(d))
	}
}
