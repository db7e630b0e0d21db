package consensus

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/palyra-mesh/palyra/proto/raftpb"
)

// skillCmd wraps c as this version's API proposes it (under SkillRules).
func skillCmd(c *raftpb.SkillCommand) *raftpb.Command {
	c.Rules = SkillRules
	return &raftpb.Command{Cmd: &raftpb.Command_Skill{Skill: c}}
}

// legacySkillCmd wraps c as an earlier version wrote it (no rules).
func legacySkillCmd(c *raftpb.SkillCommand) *raftpb.Command {
	return &raftpb.Command{Cmd: &raftpb.Command_Skill{Skill: c}}
}

func skillRec(id, key string) *raftpb.SkillRecord {
	return &raftpb.SkillRecord{SkillId: id, Version: "1.0.0", Publisher: "acme", PublisherKey: key, PackageSha256: "pkg-" + id,
		Tools: []*raftpb.SkillTool{{Id: "t", ModuleSha256: "mod-shared"}}}
}

// TestSkillRegistryRules: installs need the publisher's trusted key, a
// trusted key is replaced only explicitly, a skill's blobs stay referenced
// while it is installed (and as long as another skill shares them), and
// the registry survives a snapshot.
func TestSkillRegistryRules(t *testing.T) {
	f := NewFSM()
	res := applyAll(t, f, skillCmd(&raftpb.SkillCommand{Install: skillRec("a", "k1")}))
	if !errors.Is(res[0].Err, ErrPermissionDenied) {
		t.Fatalf("install from an untrusted publisher: %v", res[0].Err)
	}
	res = applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k1"}}),
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k2"}}),
		skillCmd(&raftpb.SkillCommand{Install: skillRec("a", "k2")}),
		skillCmd(&raftpb.SkillCommand{Install: skillRec("a", "k1")}),
		skillCmd(&raftpb.SkillCommand{Install: skillRec("b", "k1")}),
	)
	if res[0].Err != nil || !errors.Is(res[1].Err, ErrConflict) || !errors.Is(res[2].Err, ErrPermissionDenied) || res[3].Err != nil || res[4].Err != nil {
		t.Fatalf("trust, silent key change, wrong key, installs: %v %v %v %v %v", res[0].Err, res[1].Err, res[2].Err, res[3].Err, res[4].Err)
	}
	st := f.State()
	if r, ok := st.Skill("a"); !ok || r.Status != SkillActive {
		t.Fatalf("skill a: %+v", r)
	}
	for _, h := range []string{"pkg-a", "pkg-b", "mod-shared"} {
		if !st.BlobReferenced(h) {
			t.Errorf("blob %s is not referenced while its skill is installed", h)
		}
	}
	res = applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{SetStatusId: "a", Status: SkillQuarantined, Reason: "suspicious"}),
		skillCmd(&raftpb.SkillCommand{RemoveId: "b"}),
	)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if r, _ := st.Skill("a"); r.Status != SkillQuarantined || len(r.Findings) != 1 || r.Findings[0] != "operator: suspicious" {
		t.Fatalf("quarantined: %+v", r)
	}
	if st.BlobReferenced("pkg-b") || !st.BlobReferenced("mod-shared") {
		t.Fatal("removing b should drop its package and keep the module a still uses")
	}

	// A snapshot carries the registry and its blob references; a backup
	// scan names the skills' blobs.
	c, err := ScanSnapshot(bytes.NewReader(snapshotBytes(t, f)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Skills != 1 || !slices.Contains(c.Blobs, "pkg-a") || !slices.Contains(c.Blobs, "mod-shared") || slices.Contains(c.Blobs, "pkg-b") {
		t.Fatalf("scan: %d skills, blobs %v", c.Skills, c.Blobs)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	gs := g.State()
	if r, ok := gs.Skill("a"); !ok || r.Status != SkillQuarantined {
		t.Fatalf("restored skill: %+v", r)
	}
	if p, ok := gs.Publisher("acme"); !ok || p.Key != "k1" {
		t.Fatalf("restored publisher: %+v", p)
	}
	if !gs.BlobReferenced("mod-shared") || gs.BlobReferenced("pkg-b") {
		t.Fatal("restored blob references")
	}
	applyAll(t, g, skillCmd(&raftpb.SkillCommand{RemoveId: "a"}))
	if gs.BlobReferenced("mod-shared") || gs.BlobReferenced("pkg-a") {
		t.Fatal("blobs still referenced after every skill was removed")
	}
	if r := applyAll(t, g, skillCmd(&raftpb.SkillCommand{Untrust: "acme"}), skillCmd(&raftpb.SkillCommand{Untrust: "acme"})); r[0].Err != nil || !errors.Is(r[1].Err, ErrNotFound) {
		t.Fatalf("untrust: %v %v", r[0].Err, r[1].Err)
	}
}

// TestApprovalDecisions: a job that requires approval waits (not in the
// queue), is queued with its own deadline when approved, aborted with the
// reason when denied, and expires when nobody decides in time.
func TestApprovalDecisions(t *testing.T) {
	f := NewFSM()
	gated := func(id string) *raftpb.Command {
		return submitWith(id, func(r *raftpb.JobRecord) { r.RequiresApproval, r.DeadlineAtMs, r.RunDeadlineAtMs = true, 1000, 9000 })
	}
	decide := func(id string, ok bool, at int64) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_DecideJob{DecideJob: &raftpb.DecideJob{Id: id, Approve: ok, Reason: "r", By: "device:d-op", AtMs: at}}}
	}
	res := applyAll(t, f, gated("a"), gated("b"), gated("c"), submitWith("plain", func(*raftpb.JobRecord) {}))
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	st := f.State()
	if a, _ := st.Job("a"); a.Phase != PhaseWaitingForApproval || st.Count(PhaseQueued) != 1 || st.Count(PhaseWaitingForApproval) != 3 {
		t.Fatalf("waiting: %v queued=%d waiting=%d", a.Phase, st.Count(PhaseQueued), st.Count(PhaseWaitingForApproval))
	}
	if r := applyAll(t, f, decide("plain", true, 10)); !errors.Is(r[0].Err, ErrConflict) {
		t.Fatalf("approving a job that does not wait: %v", r[0].Err)
	}
	applyAll(t, f, decide("a", true, 10), decide("b", false, 20), &raftpb.Command{Cmd: &raftpb.Command_ExpireJob{ExpireJob: &raftpb.ExpireJob{Id: "c", AtMs: 1000}}})
	a, _ := st.Job("a")
	b, _ := st.Job("b")
	c, _ := st.Job("c")
	if a.Phase != PhaseQueued || a.DeadlineAtMS != 9000 || a.DecidedBy != "device:d-op" || a.DecidedAtMS != 10 {
		t.Fatalf("approved: %+v", a)
	}
	if b.Phase != PhaseAborted || b.Error == nil || b.Error.Code != "denied" {
		t.Fatalf("denied: %+v", b)
	}
	if c.Phase != PhaseExpired || c.Error == nil || c.Error.Code != "expired" {
		t.Fatalf("expired: %+v", c)
	}
	if r := applyAll(t, f, gated("d"), decide("d", true, 5)); r[1].Err != nil {
		t.Fatal(r[1].Err)
	}
	if r := applyAll(t, f, submitWith("e", func(r *raftpb.JobRecord) { r.RequiresApproval = true })); r[0].Err == nil {
		t.Fatal("a job requiring approval with no approval expiry was accepted")
	}
}

// TestHooksQueueJobsDeterministically: hooks bound to after_run and to a
// system event queue one job per event, with the same id and input on
// every replica, and hook jobs trigger no hooks themselves.
func TestHooksQueueJobsDeterministically(t *testing.T) {
	// The skill declares a host; its tool narrows its grants to none.
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g", HttpHosts: []string{"example.com"},
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g", Grants: &raftpb.ToolGrants{}}}}
	cmds := []*raftpb.Command{
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-a", Event: HookAfterRun, SkillId: "g", Tool: "gate"}, AtMs: 3}}},
		{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-i", Event: HookSkillInstalled, SkillId: "g", Tool: "gate"}, AtMs: 4}}},
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 5}), // fires skill:installed
		submitWith("j", func(*raftpb.JobRecord) {}),
		assign("j", 1, "n1"),
		{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "j", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 6}}},
	}
	a, b := NewFSM(), NewFSM()
	for _, r := range applyAll(t, a, cmds...) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	applyAll(t, b, cmds...)
	after, ok := a.State().Job("hk-h-a-j")
	if !ok || after.Phase != PhaseQueued || after.HookID != "h-a" || after.ModuleHash != "mod-g" || !bytes.Contains(after.Input, []byte(`"event":"after_run"`)) || !bytes.Contains(after.Input, []byte(`"id":"j"`)) {
		t.Fatalf("after_run hook job: %+v", after)
	}
	if len(after.AllowHosts) != 0 {
		t.Fatalf("the hook job of a tool without grants may reach %v", after.AllowHosts)
	}
	other, _ := b.State().Job("hk-h-a-j")
	if string(other.Input) != string(after.Input) {
		t.Fatalf("replicas made different hook inputs:\n%s\n%s", after.Input, other.Input)
	}
	installed := a.State().Jobs(JobFilter{Phase: PhaseQueued})
	var ids []string
	for _, j := range installed {
		ids = append(ids, j.ID)
	}
	if len(ids) != 2 {
		t.Fatalf("queued jobs %v, want the after_run and the skill:installed hook jobs", ids)
	}
	// The hook job ending triggers nothing.
	applyAll(t, a, assign("hk-h-a-j", 1, "n1"), &raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "hk-h-a-j", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 7}}})
	if _, ok := a.State().Job("hk-h-a-hk-h-a-j"); ok {
		t.Fatal("a hook job triggered a hook")
	}
}

// TestHooksFiredInOneEntryAreAllQueued: two after_run hooks on one job
// queue two hook jobs in the same entry (the same commit index); both must
// be in the placement queue and the phase index, not only the job map.
func TestHooksFiredInOneEntryAreAllQueued(t *testing.T) {
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g",
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g"}}}
	f := NewFSM()
	for _, r := range applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		&raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-a", Event: HookAfterRun, SkillId: "g", Tool: "gate"}, AtMs: 3}}},
		&raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-b", Event: HookAfterRun, SkillId: "g", Tool: "gate"}, AtMs: 3}}},
		submitWith("j", func(*raftpb.JobRecord) {}),
		assign("j", 1, "n1"),
		&raftpb.Command{Cmd: &raftpb.Command_FinishJob{FinishJob: &raftpb.FinishJob{Id: "j", Attempt: 1, NodeId: "n1", Ok: true, AtMs: 6}}},
	) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	st := f.State()
	var queued []string
	st.Queued("wasm", func(j Job) bool { queued = append(queued, j.ID); return true })
	if len(queued) != 2 || st.Count(PhaseQueued) != 2 || len(st.Jobs(JobFilter{Phase: PhaseQueued})) != 2 {
		t.Fatalf("queue %v, queued count %d, listed %d: want both hook jobs everywhere", queued, st.Count(PhaseQueued), len(st.Jobs(JobFilter{Phase: PhaseQueued})))
	}
}

// TestSkillWithHooksIsNotDisabledOrRemoved: disabling, quarantining or
// removing a skill that hooks are bound to is refused, naming each hook,
// unless the command lists every one of them to unbind (--force); a hook
// is not bound to a skill that is not active, so a bind and a remove that
// race cannot leave a hook dangling (which made every submission fail).
func TestSkillWithHooksIsNotDisabledOrRemoved(t *testing.T) {
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g",
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g"}}}
	bind := func(id, event string) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: id, Event: event, SkillId: "g", Tool: "gate"}, AtMs: 3}}}
	}
	f := NewFSM()
	for _, r := range applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		bind("h-b", HookBeforeRun), bind("h-a", HookAfterRun),
	) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	st := f.State()
	for _, c := range []*raftpb.SkillCommand{
		{SetStatusId: "g", Status: SkillDisabled, AtMs: 4},
		{SetStatusId: "g", Status: SkillQuarantined, Reason: "x", AtMs: 4},
		{RemoveId: "g", AtMs: 4},
		{RemoveId: "g", UnbindHooks: []string{"h-b"}, AtMs: 4}, // h-a bound meanwhile
	} {
		err := applyAll(t, f, skillCmd(c))[0].Err
		var ce *Error
		if !errors.As(err, &ce) || ce.Code != ErrConflict.Code || !strings.Contains(ce.Message, "h-a (after_run -> gate)") ||
			(len(c.UnbindHooks) == 0 && !strings.Contains(ce.Message, "h-b (before_run -> gate)")) || !strings.Contains(ce.Hint, "palyra hook unbind HOOK_ID") || !strings.Contains(ce.Hint, "--force") {
			t.Fatalf("%v: %v", c, err)
		}
		if r, ok := st.Skill("g"); !ok || r.Status != SkillActive || len(st.Hooks()) != 2 {
			t.Fatalf("%v: a refused command changed the registry: %v %d hooks", c, r, len(st.Hooks()))
		}
	}
	// Forced: the hooks go in the same entry, journaled; the skill is disabled.
	if err := applyAll(t, f, skillCmd(&raftpb.SkillCommand{SetStatusId: "g", Status: SkillDisabled, UnbindHooks: []string{"h-a", "h-b"}, AtMs: 5}))[0].Err; err != nil {
		t.Fatal(err)
	}
	if r, _ := st.Skill("g"); r.Status != SkillDisabled || len(st.Hooks()) != 0 {
		t.Fatalf("forced disable: %v, hooks %v", r.Status, st.Hooks())
	}
	unbinds := 0
	recs, _, _, _ := st.Journal(0, 0, 1000)
	for _, rec := range recs {
		if rec.Action == "hook.unbind" && strings.Contains(rec.Detail, "--force") {
			unbinds++
		}
	}
	if unbinds != 2 {
		t.Fatalf("journal has %d forced unbinds, want 2", unbinds)
	}
	// Not bound to a disabled skill, nor to one that is gone.
	if err := applyAll(t, f, bind("h-c", HookBeforeRun))[0].Err; err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("bind to a disabled skill: %v", err)
	}
	if r := applyAll(t, f, skillCmd(&raftpb.SkillCommand{RemoveId: "g", AtMs: 6}), bind("h-d", HookBeforeRun)); r[0].Err != nil || r[1].Err == nil {
		t.Fatalf("remove %v, then bind %v", r[0].Err, r[1].Err)
	}
	if len(st.Hooks()) != 0 {
		t.Fatalf("hooks %v", st.Hooks())
	}
}

// TestSkillUpgradeRules: a skill id belongs to its publisher; a downgrade
// needs allow_downgrade; a version's package never changes; an operator's
// status survives an upgrade; an upgrade that would strand a bound hook is
// refused. Each refused install leaves the registry as it was.
func TestSkillUpgradeRules(t *testing.T) {
	rec := func(pub, version, pkg string, tools ...string) *raftpb.SkillRecord {
		r := &raftpb.SkillRecord{SkillId: "web", Version: version, Publisher: pub, PublisherKey: "k-" + pub, PackageSha256: pkg}
		for _, id := range tools {
			r.Tools = append(r.Tools, &raftpb.SkillTool{Id: id, ModuleSha256: "mod-" + id})
		}
		return r
	}
	f := NewFSM()
	st := f.State()
	for _, r := range applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "example", Key: "k-example"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "mallory", Key: "k-mallory"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: rec("example", "1.2.0", "pkg-120", "wc", "gate"), AtMs: 2, By: "device:op"}),
	) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	refused := func(c *raftpb.SkillCommand, want string) {
		t.Helper()
		before, _ := st.Skill("web")
		err := applyAll(t, f, skillCmd(c))[0].Err
		var ce *Error
		if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || !strings.Contains(ce.Message+" "+ce.Hint, want) {
			t.Fatalf("install %s %s: %v, want a conflict saying %q", c.Install.Publisher, c.Install.Version, err, want)
		}
		if after, _ := st.Skill("web"); !proto.Equal(before, after) {
			t.Fatalf("a refused install changed the skill: %v -> %v", before, after)
		}
	}
	refused(&raftpb.SkillCommand{Install: rec("mallory", "9.0.0", "pkg-m", "wc", "gate"), AtMs: 3}, "published by example")
	refused(&raftpb.SkillCommand{Install: rec("mallory", "0.0.1", "pkg-m", "wc", "gate"), AllowDowngrade: true, AtMs: 3}, "published by example")
	refused(&raftpb.SkillCommand{Install: rec("example", "1.1.9", "pkg-119", "wc", "gate"), AtMs: 3}, "--allow-downgrade")
	refused(&raftpb.SkillCommand{Install: rec("example", "1.2.0", "pkg-other", "wc", "gate"), AtMs: 3}, "a version's contents do not change")

	// The same package again is fine; a downgrade when allowed is too.
	for _, c := range []*raftpb.SkillCommand{
		{Install: rec("example", "1.2.0", "pkg-120", "wc", "gate"), AtMs: 4},
		{Install: rec("example", "1.0.0", "pkg-100", "wc", "gate"), AllowDowngrade: true, AtMs: 5},
		{Install: rec("example", "1.10.0", "pkg-1100", "wc", "gate"), AtMs: 6}, // 1.10 > 1.2: semantic, not string order
	} {
		if err := applyAll(t, f, skillCmd(c))[0].Err; err != nil {
			t.Fatalf("install %s: %v", c.Install.Version, err)
		}
	}
	if r, _ := st.Skill("web"); r.Version != "1.10.0" || r.PreviousVersion != "1.0.0" || r.Status != SkillActive {
		t.Fatalf("after upgrades: %s (previous %s) %s", r.Version, r.PreviousVersion, SkillStatusName(r.Status))
	}
	recs, _, _, _ := st.Journal(0, 0, 1000)
	if last := recs[len(recs)-1]; last.Action != "skill.install" || !strings.Contains(last.Detail, "publisher=example version=1.10.0") || !strings.Contains(last.Detail, "replaces=1.0.0") {
		t.Fatalf("journal: %+v", last)
	}

	// An operator's quarantine (and its reason) survives an upgrade.
	if err := applyAll(t, f, skillCmd(&raftpb.SkillCommand{SetStatusId: "web", Status: SkillQuarantined, Reason: "malware found", AtMs: 7, By: "device:op"}))[0].Err; err != nil {
		t.Fatal(err)
	}
	if err := applyAll(t, f, skillCmd(&raftpb.SkillCommand{Install: rec("example", "1.11.0", "pkg-1110", "wc", "gate"), AtMs: 8, By: "device:vm"}))[0].Err; err != nil {
		t.Fatal(err)
	}
	if r, _ := st.Skill("web"); r.Version != "1.11.0" || r.Status != SkillQuarantined || !slices.Contains(r.Findings, "operator: malware found") || r.StatusBy != "device:op" {
		t.Fatalf("upgrade of a quarantined skill: %s %s %v by %s", r.Version, SkillStatusName(r.Status), r.Findings, r.StatusBy)
	}
	// A status the install itself gave (the audit's quarantine) does not stick.
	g := NewFSM()
	applyAll(t, g, skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "example", Key: "k-example"}, AtMs: 1}))
	q := rec("example", "1.0.0", "pkg-q", "wc")
	q.Status, q.Findings = SkillQuarantined, []string{"http_hosts: *.com"}
	applyAll(t, g, skillCmd(&raftpb.SkillCommand{Install: q, AtMs: 2, By: "device:op"}), skillCmd(&raftpb.SkillCommand{Install: rec("example", "1.0.1", "pkg-fixed", "wc"), AtMs: 3, By: "device:op"}))
	if r, _ := g.State().Skill("web"); r.Status != SkillActive || len(r.Findings) != 0 {
		t.Fatalf("a fixed version after an audit quarantine: %s %v", SkillStatusName(r.Status), r.Findings)
	}

	// Hooks: a bound tool must survive the upgrade, and the new version
	// must be active.
	applyAll(t, f, skillCmd(&raftpb.SkillCommand{SetStatusId: "web", Status: SkillActive, AtMs: 9}))
	if err := applyAll(t, f, &raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{Bind: &raftpb.HookRecord{Id: "h-1", Event: HookBeforeRun, SkillId: "web", Tool: "gate"}, AtMs: 10}}})[0].Err; err != nil {
		t.Fatal(err)
	}
	refused(&raftpb.SkillCommand{Install: rec("example", "2.0.0", "pkg-200", "wc", "gate2"), AtMs: 11}, "h-1 (before_run -> gate): version 2.0.0 has no tool gate")
	bad := rec("example", "2.0.0", "pkg-200q", "wc", "gate")
	bad.Status, bad.Findings = SkillQuarantined, []string{"http_hosts: *.com"}
	refused(&raftpb.SkillCommand{Install: bad, AtMs: 11}, "version 2.0.0 would be quarantined")
	if err := applyAll(t, f, skillCmd(&raftpb.SkillCommand{Install: rec("example", "2.0.0", "pkg-200ok", "wc", "gate", "gate2"), AtMs: 12}))[0].Err; err != nil {
		t.Fatalf("an upgrade keeping the bound tool: %v", err)
	}
}

// TestRunsOfAnInactiveSkillDoNotStart: a run queued before its skill was
// disabled, quarantined or removed ends instead of being placed; a run
// waiting for approval cannot be approved; quarantining or removing a
// skill stops its running runs, and no other job.
func TestRunsOfAnInactiveSkillDoNotStart(t *testing.T) {
	f := NewFSM()
	st := f.State()
	run := func(id, skill string, gated bool) *raftpb.Command {
		return submitWith(id, func(r *raftpb.JobRecord) {
			r.SkillId, r.SkillTool = skill, "t"
			if gated {
				r.RequiresApproval, r.DeadlineAtMs, r.RunDeadlineAtMs = true, 100_000, 200_000
			}
		})
	}
	assign := func(id string) *raftpb.Command {
		return round(50, map[string]uint32{"n-1": 10}, place(id, 1, "n-1"))
	}
	rec := func(id string) *raftpb.SkillRecord {
		return &raftpb.SkillRecord{SkillId: id, Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-" + id,
			Tools: []*raftpb.SkillTool{{Id: "t", ModuleSha256: "mod-" + id}}}
	}
	for _, r := range applyAll(t, f, addNode("n-1"),
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: rec("q"), AtMs: 2}),
		skillCmd(&raftpb.SkillCommand{Install: rec("d"), AtMs: 2}),
		skillCmd(&raftpb.SkillCommand{Install: rec("other"), AtMs: 2}),
		run("q-running", "q", false), run("q-queued", "q", false), run("q-gated", "q", true),
		run("d-queued", "d", false), run("other-running", "other", false), run("plain", "", false),
		assign("q-running"), assign("other-running"),
		skillCmd(&raftpb.SkillCommand{SetStatusId: "q", Status: SkillQuarantined, Reason: "malware", By: "device:op", AtMs: 60}),
		skillCmd(&raftpb.SkillCommand{SetStatusId: "d", Status: SkillDisabled, AtMs: 60}),
	) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if j, _ := st.Job("q-running"); j.Phase != PhaseAborted || j.Error.Code != "skill_unavailable" || !strings.Contains(j.Error.Message, "quarantined by device:op") {
		t.Fatalf("running run of a quarantined skill: %s %+v", j.Phase, j.Error)
	}
	if j, _ := st.Job("other-running"); j.Phase != PhaseRunning {
		t.Fatalf("another skill's run: %s", j.Phase)
	}
	res := applyAll(t, f, assign("q-queued"), assign("d-queued"), assign("plain"),
		&raftpb.Command{Cmd: &raftpb.Command_DecideJob{DecideJob: &raftpb.DecideJob{Id: "q-gated", Approve: true, By: "device:op", AtMs: 70, Rules: SkillRules}}})
	for _, id := range []string{"q-queued", "d-queued"} {
		if j, _ := st.Job(id); j.Phase != PhaseAborted || j.Error.Code != "skill_unavailable" || !strings.Contains(j.Error.Hint, "palyra skill enable") {
			t.Fatalf("%s placed after its skill stopped: %s %+v", id, j.Phase, j.Error)
		}
	}
	if res[2].Err != nil {
		t.Fatalf("a plain job: %v", res[2].Err)
	}
	if j, _ := st.Job("q-gated"); !errors.Is(res[3].Err, ErrConflict) || j.Phase != PhaseWaitingForApproval || !strings.Contains(res[3].Err.Error(), "cannot be approved") {
		t.Fatalf("approving a run of a quarantined skill: %v, %s", res[3].Err, j.Phase)
	}
	// Removing a skill stops its running runs too; denying still works.
	res = applyAll(t, f, skillCmd(&raftpb.SkillCommand{RemoveId: "other", AtMs: 80}),
		&raftpb.Command{Cmd: &raftpb.Command_DecideJob{DecideJob: &raftpb.DecideJob{Id: "q-gated", Approve: false, By: "device:op", AtMs: 81, Rules: SkillRules}}})
	if j, _ := st.Job("other-running"); res[0].Err != nil || j.Phase != PhaseAborted || !strings.Contains(j.Error.Message, "removed") {
		t.Fatalf("running run of a removed skill: %v %s %+v", res[0].Err, j.Phase, j.Error)
	}
	if j, _ := st.Job("q-gated"); res[1].Err != nil || j.Phase != PhaseAborted {
		t.Fatalf("deny: %v %s", res[1].Err, j.Phase)
	}
}

// TestEntriesFromBeforeTheSkillRulesReplayAsThen: a log written by an
// earlier version replays as it applied then (a restart after an upgrade
// replays the entries since the last snapshot): an install over another
// publisher's skill replaces it, a quarantine leaves running runs alone,
// a placement and an approval of an inactive skill's run go through.
func TestEntriesFromBeforeTheSkillRulesReplayAsThen(t *testing.T) {
	f := NewFSM()
	st := f.State()
	rec := func(pub, version, pkg string) *raftpb.SkillRecord {
		return &raftpb.SkillRecord{SkillId: "web", Version: version, Publisher: pub, PublisherKey: "k-" + pub, PackageSha256: pkg,
			Tools: []*raftpb.SkillTool{{Id: "t", ModuleSha256: "mod"}}}
	}
	run := func(id string, gated bool) *raftpb.Command {
		return submitWith(id, func(r *raftpb.JobRecord) {
			r.SkillId, r.SkillTool = "web", "t"
			if gated {
				r.RequiresApproval, r.DeadlineAtMs, r.RunDeadlineAtMs = true, 100_000, 200_000
			}
		})
	}
	legacyRound := &raftpb.Command{Cmd: &raftpb.Command_SchedulerRound{SchedulerRound: &raftpb.SchedulerRound{AtMs: 50,
		Slots: []*raftpb.NodeSlots{{NodeId: "n-1", Kind: "wasm", Slots: 10}}, Placements: []*raftpb.AssignJob{place("queued", 1, "n-1")}}}}
	for i, r := range applyAll(t, f, addNode("n-1"),
		legacySkillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "a", Key: "k-a"}}),
		legacySkillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "b", Key: "k-b"}}),
		legacySkillCmd(&raftpb.SkillCommand{Install: rec("a", "2.0.0", "pkg-a")}),
		legacySkillCmd(&raftpb.SkillCommand{Install: rec("b", "1.0.0", "pkg-b")}), // another publisher, a downgrade
		run("running", false), run("queued", false), run("gated", true),
		round(40, map[string]uint32{"n-1": 10}, place("running", 1, "n-1")),
		legacySkillCmd(&raftpb.SkillCommand{SetStatusId: "web", Status: SkillQuarantined, AtMs: 45}),
		legacyRound,
		&raftpb.Command{Cmd: &raftpb.Command_DecideJob{DecideJob: &raftpb.DecideJob{Id: "gated", Approve: true, AtMs: 60}}},
	) {
		if r.Err != nil {
			t.Fatalf("entry %d: %v", i, r.Err)
		}
	}
	if r, _ := st.Skill("web"); r.Publisher != "b" || r.Version != "1.0.0" {
		t.Fatalf("the legacy install: %s %s", r.Publisher, r.Version)
	}
	for id, want := range map[string]Phase{"running": PhaseRunning, "queued": PhaseRunning, "gated": PhaseQueued} {
		if j, _ := st.Job(id); j.Phase != want {
			t.Errorf("%s: %s, want %s as before the rules", id, j.Phase, want)
		}
	}
}

// TestDuplicateHookBindRefusedInApply: a bind of an (event, skill, tool)
// already bound is refused by the FSM itself under HookRules, so two binds
// racing through two API nodes cannot both land (the tool would run twice
// per event); a bind from before those rules replays as it applied then.
func TestDuplicateHookBindRefusedInApply(t *testing.T) {
	tool := &raftpb.SkillRecord{SkillId: "g", Version: "1.0.0", Publisher: "acme", PublisherKey: "k", PackageSha256: "pkg-g",
		Tools: []*raftpb.SkillTool{{Id: "gate", ModuleSha256: "mod-g"}, {Id: "other", ModuleSha256: "mod-o"}}}
	bind := func(id, event, toolID string, rules uint32) *raftpb.Command {
		return &raftpb.Command{Cmd: &raftpb.Command_Hook{Hook: &raftpb.HookCommand{
			Bind: &raftpb.HookRecord{Id: id, Event: event, SkillId: "g", Tool: toolID}, AtMs: 3, Rules: rules}}}
	}
	f := NewFSM()
	res := applyAll(t, f,
		skillCmd(&raftpb.SkillCommand{Trust: &raftpb.PublisherRecord{Name: "acme", Key: "k"}, AtMs: 1}),
		skillCmd(&raftpb.SkillCommand{Install: tool, AtMs: 2}),
		bind("h-1", HookAfterRun, "gate", HookRules),
		bind("h-2", HookAfterRun, "gate", HookRules),  // the racing duplicate
		bind("h-3", HookBeforeRun, "gate", HookRules), // another event
		bind("h-4", HookAfterRun, "other", HookRules), // another tool
		bind("h-5", HookAfterRun, "gate", 0),          // an old entry replayed
	)
	for i, r := range res {
		if i == 3 {
			continue
		}
		if r.Err != nil {
			t.Fatalf("command %d refused: %v", i, r.Err)
		}
	}
	var err *Error
	if !errors.As(res[3].Err, &err) || err.Code != ErrConflict.Code || !strings.Contains(err.Message, "h-1") || !strings.Contains(err.Hint, "hook list") {
		t.Fatalf("duplicate bind: %v, want a conflict naming h-1 and 'palyra hook list'", res[3].Err)
	}
	var ids []string
	for _, h := range f.State().Hooks() {
		ids = append(ids, h.Id)
	}
	if want := []string{"h-1", "h-3", "h-4", "h-5"}; !slices.Equal(ids, want) {
		t.Fatalf("hooks %v, want %v", ids, want)
	}
}
