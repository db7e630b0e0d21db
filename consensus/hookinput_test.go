package consensus

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// TestAfterRunExitCodeFollowsTheEntrysHookRules: under HookRules an
// after_run input says exit_code null for a job whose guest never exited
// (cancelled, trapped) and the code for one that did; an entry written
// before them (hook_rules 0) still says 0, as it did then, so a replica
// replaying an old log builds the same hook jobs as the one that applied
// it first.
func TestAfterRunExitCodeFollowsTheEntrysHookRules(t *testing.T) {
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g",
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g"}}}
	under := func(rules uint32, c *raftpb.Command) *raftpb.Command { c.HookRules = rules; return c }
	cancel := func(id string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_CancelJob{CancelJob: &raftpb.CancelJob{Id: id, AtMs: 10}}}
	}
	result := func(id string, exit int32, code string) *raftpb.Command {
		f := &raftpb.FinishJob{Id: id, Attempt: 1, NodeId: "n1", Ok: code == "", ExitCode: exit, AtMs: 10}
		if code != "" {
			f.Error = &raftpb.Error{Code: code, Message: "m"}
		}
		return &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: f}}
	}
	cmds := []*raftpb.Command{
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-a", Event: HookAfterRun, SkillId: "g", Tool: "gate"}, AtMs: 3, Rules: HookRules}}},
	}
	for _, id := range []string{"old-cancel", "cancel", "ok", "exit3", "trap", "old-trap"} {
		cmds = append(cmds, submitWith(id, func(*raftpb.JobRecord) {}))
	}
	for _, id := range []string{"ok", "exit3", "trap", "old-trap"} {
		cmds = append(cmds, assign(id, 1, "n1"))
	}
	cmds = append(cmds,
		under(0, cancel("old-cancel")),
		under(HookRules, cancel("cancel")),
		under(HookRules, result("ok", 0, "")),
		under(HookRules, result("exit3", 3, "exit_code")),
		under(HookRules, result("trap", 0, "trap")),
		under(0, result("old-trap", 0, "trap")),
	)
	f := NewFSM()
	for i, r := range applyAll(t, f, cmds...) {
		if r.Err != nil {
			t.Fatalf("command %d: %v", i, r.Err)
		}
	}
	for id, want := range map[string]string{
		"old-cancel": "0",    // before the rules: as then
		"cancel":     "null", // never ran
		"ok":         "0",
		"exit3":      "3",
		"trap":       "null", // ran, never exited
		"old-trap":   "0",
	} {
		hk, ok := f.State().Job("hk-h-a-" + id)
		if !ok {
			t.Fatalf("no after_run hook job for %s", id)
		}
		var in struct {
			Job map[string]json.RawMessage `json:"job"`
		}
		if err := json.Unmarshal(hk.Input, &in); err != nil {
			t.Fatalf("%s: hook input %s: %v", id, hk.Input, err)
		}
		got, ok := in.Job["exit_code"]
		if !ok || string(got) != want {
			t.Errorf("%s: hook input says exit_code %s, want %s (input %s)", id, got, want, hk.Input)
		}
	}
}

// TestProposeStampsTheStoresHookRules: the hook rules an entry carries are
// the proposing leader's (SetHookRules), whatever the command came with:
// none until they are set, so a proposer cannot turn them on while an
// older member would apply the entry without them.
func TestProposeStampsTheStoresHookRules(t *testing.T) {
	s := openStore(t, t.TempDir(), "n1", true)
	defer s.Close()
	waitLeader(t, s)
	committed := func(id string, sent uint32) uint32 {
		t.Helper()
		cmd := submit(id)
		cmd.HookRules = sent
		if _, err := s.Apply(context.Background(), cmd); err != nil {
			t.Fatal(err)
		}
		if cmd.HookRules != sent {
			t.Fatal("Propose changed the caller's command")
		}
		var l raft.Log
		if err := s.bolt.GetLog(s.raft.LastIndex(), &l); err != nil {
			t.Fatal(err)
		}
		var c raftpb.Command
		if err := proto.Unmarshal(l.Data, &c); err != nil {
			t.Fatal(err)
		}
		if c.GetSubmitJob().GetJob().GetId() != id {
			t.Fatalf("the last entry is not %s's submit: %v", id, &c)
		}
		return c.HookRules
	}
	if got := committed("unset", HookRules); got != 0 {
		t.Fatalf("without SetHookRules an entry carries hook rules %d, want 0", got)
	}
	s.SetHookRules(func() uint32 { return 0 })
	if got := committed("older-member", HookRules); got != 0 {
		t.Fatalf("while a member lacks them an entry carries hook rules %d, want 0", got)
	}
	s.SetHookRules(func() uint32 { return HookRules })
	if got := committed("all-current", 0); got != HookRules {
		t.Fatalf("with every member current an entry carries hook rules %d, want %d", got, HookRules)
	}
}
