package cli

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// status shows the voter target next to the voter count while the
// cluster is below it (in text and --json): one node started with the
// default target of three voters lacks two.
func TestStatusShowsTheVoterTargetBelowIt(t *testing.T) {
	c := startNode(t)
	r := c.cli("status")
	if r.code != 0 || !strings.Contains(r.stdout, "1 of 1 alive (target 3: add 2 nodes to reach it)") {
		t.Fatalf("status: %+v", r)
	}
	r = c.cli("status", "--json")
	var st struct {
		Voters struct {
			Total, Alive, Target, Spares *int
		} `json:"voters"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	if v := st.Voters; v.Total == nil || *v.Total != 1 || v.Target == nil || *v.Target != 3 || v.Spares == nil || *v.Spares != 0 {
		t.Fatalf("status --json voters: %s", r.stdout)
	}
}

// status says since when the leader leads (the node's first leader is one
// change), and doctor reports the changes as leader stability.
func TestStatusSaysSinceWhenTheLeaderLeads(t *testing.T) {
	c := startNode(t)
	r := c.cli("status", "--json")
	var st struct {
		LeaderSince string `json:"leader_since"`
		Changes     int    `json:"leader_changes_last_hour"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	if since, err := time.Parse(time.RFC3339Nano, st.LeaderSince); err != nil || since.After(time.Now()) || st.Changes != 1 {
		t.Fatalf("status --json: leader since %q (%v), %d changes; want a past time and the one election: %s", st.LeaderSince, err, st.Changes, r.stdout)
	}
	if r := c.cli("status"); r.code != 0 || !strings.Contains(r.stdout, ", since ") || strings.Contains(r.stdout, "leader changes") {
		t.Fatalf("status: %+v", r)
	}
	if r := c.cli("doctor", "--json"); !strings.Contains(r.stdout, `"leader stability"`) || !strings.Contains(r.stdout, "saw 1 leader change(s) in the ") || !strings.Contains(r.stdout, " since it started") {
		t.Fatalf("doctor: %+v", r)
	}
}

// Past five leader changes in an hour, doctor warns and names the timers;
// status says how many there were.
func TestLeaderChurn(t *testing.T) {
	now := time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC)
	s := &palyrav1.StatusResponse{NodeId: "n-1", LeaderSinceMs: now.Add(-90 * time.Second).UnixMilli(), LeaderChangesLastHour: 6}
	if ch := leaderChurnCheck(s); ch.Status != "warn" || !strings.Contains(ch.Fix, "--network wan") || !strings.Contains(ch.Detail, "6 leader change") {
		t.Fatalf("churn check: %+v", ch)
	}
	if got := leaderTenure(s, now); got != ", followed by this node since 04:58:30Z (1m ago); 6 leader changes in the last hour" {
		t.Fatalf("tenure on a follower: %q", got)
	}
	leader := &palyrav1.StatusResponse{NodeId: "n-1", LeaderId: "n-1", LeaderSinceMs: s.LeaderSinceMs}
	if got := leaderTenure(leader, now); got != ", since 04:58:30Z (1m ago)" {
		t.Fatalf("tenure on the leader: %q", got)
	}
	s.LeaderChangesLastHour = 5
	if ch := leaderChurnCheck(s); ch.Status != "ok" {
		t.Fatalf("five changes: %+v", ch)
	}
	if ch := leaderChurnCheck(&palyrav1.StatusResponse{}); ch.Status != "ok" || !strings.Contains(ch.Detail, "does not say") {
		t.Fatalf("an older node: %+v", ch)
	}
	// A node up for 20 minutes counted over those; with no leader now,
	// doctor says so rather than "ok".
	young := &palyrav1.StatusResponse{NodeId: "n-1", LeaderId: "n-2", LeaderSinceMs: s.LeaderSinceMs, LeaderChangesLastHour: 2, UptimeMs: (20 * time.Minute).Milliseconds()}
	if got := leaderTenure(young, now); !strings.HasSuffix(got, "; 2 leader changes in the 20m since it started") {
		t.Fatalf("tenure on a young node: %q", got)
	}
	young.LeaderId, young.LeaderSinceMs = "", 0
	if ch := leaderChurnCheck(young); ch.Status != "warn" || !strings.Contains(ch.Detail, "no leader now") {
		t.Fatalf("no leader: %+v", ch)
	}
	if got := leaderTenure(&palyrav1.StatusResponse{}, now); got != "" {
		t.Fatalf("tenure of an older node: %q", got)
	}
}

// status through a data dir whose node is down says that the node that
// answered is another one (it described a follower elsewhere as if it were
// this machine's node); --addr, which picks the node, gets no note.
func TestStatusNotesAnotherNodeAnswered(t *testing.T) {
	c := startNode(t) // a data dir with a node and its operator credential
	st, err := (node.Layout{Dir: c.dir}).ReadState()
	if err != nil {
		t.Fatal(err)
	}
	ctxFor := func(args ...string) *ucli.Context {
		fs := flag.NewFlagSet("palyra", flag.ContinueOnError)
		fs.String("data-dir", "", "")
		fs.String("config-dir", t.TempDir(), "")
		fs.String("addr", "", "")
		fs.Bool("json", false, "")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return ucli.NewContext(ucli.NewApp(), fs, nil)
	}
	note := otherNodeNote(ctxFor("--data-dir", c.dir), "n-other002")
	if !strings.Contains(note, "this data dir's node "+st.NodeID+" ("+st.Address+") did not answer; this is n-other002") || !strings.Contains(note, "palyra node start --data-dir "+c.dir) {
		t.Fatalf("note %q", note)
	}
	for what, ctx := range map[string]*ucli.Context{
		"its own node answered": ctxFor("--data-dir", c.dir),
		"--addr chose the node": ctxFor("--data-dir", c.dir, "--addr", "127.0.0.1:7545"),
		"--json":                ctxFor("--data-dir", c.dir, "--json"),
	} {
		answered := "n-other002"
		if what == "its own node answered" {
			answered = st.NodeID
		}
		if note := otherNodeNote(ctx, answered); note != "" {
			t.Errorf("%s: note %q", what, note)
		}
	}
	// A node's data dir without its operator credential (a device's was
	// used): the command was never aimed at that node.
	bare := t.TempDir()
	if err := (node.Layout{Dir: bare}).WriteState(node.State{NodeID: "n-mine0001", Address: "127.0.0.1:7544"}); err != nil {
		t.Fatal(err)
	}
	if note := otherNodeNote(ctxFor("--data-dir", bare), "n-other002"); note != "" {
		t.Fatalf("data dir without an operator credential: note %q", note)
	}
}
