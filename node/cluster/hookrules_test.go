package cluster

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/palyra-mesh/palyra/consensus"
	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// While a member runs an older version (it does not advertise
// FeatureHookExitNull), the leader's entries carry no hook rules, so a
// cancelled job's after_run input says exit_code 0 on every replica, as
// the older one builds it; once that member is upgraded, the same input
// says null.
func TestHookExitNullWaitsForEveryMember(t *testing.T) {
	nodes := olderThird(t)
	eventually(t, 10*time.Second, "everyone to see the old node's features", func() error {
		for _, n := range nodes {
			if n.cl.AllSupport(FeatureHookExitNull) {
				return fmt.Errorf("%s finds every member supports %s", n.id, FeatureHookExitNull)
			}
		}
		return nil
	})
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g",
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g"}}}
	skill := func(c *raftpb.SkillCommand) *raftpb.Command {
		c.Rules = consensus.SkillRules
		return &raftpb.Command{Cmd: &raftpb.Command_Skill{Skill: c}}
	}
	apply := func(cmds ...*raftpb.Command) {
		t.Helper()
		for _, c := range cmds {
			if _, err := leaderOf(t, nodes).cl.Apply(ctxFor(t, 10*time.Second), c); err != nil {
				t.Fatalf("%v: %v", c, err)
			}
		}
	}
	cancel := func(id string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: id, AtMs: time.Now().UnixMilli()}}}
	}
	// exitCode is what the after_run input of job id says, on each node.
	exitCode := func(id string) []string {
		t.Helper()
		var out []string
		for _, n := range nodes {
			if err := n.cl.VerifyRead(ctxFor(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			hk, ok := n.store.State().Job("hk-h-a-" + id)
			if !ok {
				t.Fatalf("%s holds no after_run hook job for %s", n.id, id)
			}
			var in struct {
				Job map[string]json.RawMessage `json:"job"`
			}
			if err := json.Unmarshal(hk.Input, &in); err != nil {
				t.Fatalf("%s: hook input %s: %v", n.id, hk.Input, err)
			}
			out = append(out, string(in.Job["exit_code"]))
		}
		return out
	}
	apply(
		skill(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skill(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		&raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{
			Bind: &raftpb.HookRecord{Id: "h-a", Event: consensus.HookAfterRun, SkillId: "g", Tool: "gate"}, AtMs: 3}}},
		submit("mixed"), cancel("mixed"),
	)
	for i, got := range exitCode("mixed") {
		if got != "0" {
			t.Fatalf("%s: a cancelled job's after_run input says exit_code %s with an older member, want 0 as the older node builds it", nodes[i].id, got)
		}
	}

	// The older member is upgraded.
	nodes[2].stop()
	nodes[2].old = false
	nodes[2].start(false)
	eventually(t, 20*time.Second, "the upgraded node back", func() error { return converged(nodes, 3, 0) })
	eventually(t, 10*time.Second, "everyone to see the upgraded node's features", func() error {
		for _, n := range nodes {
			if !n.cl.AllSupport(FeatureHookExitNull) {
				return fmt.Errorf("%s still finds a member without %s", n.id, FeatureHookExitNull)
			}
		}
		return nil
	})
	apply(submit("current"), cancel("current"))
	for i, got := range exitCode("current") {
		if got != "null" {
			t.Fatalf("%s: a cancelled job's after_run input says exit_code %s in a current cluster, want null", nodes[i].id, got)
		}
	}
}
