package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/cli/client"
	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/internal/testwasm"
	"github.com/palyra-mesh/palyra/node"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// palyra runs the CLI outside any node's data dir (offline commands, or a
// paired device's config dir), in dir.
func palyra(t *testing.T, dir string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, palyraBin, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

func mustJSON(t *testing.T, what string, r result, v any) {
	t.Helper()
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), v) != nil {
		t.Fatalf("%s: %+v", what, r)
	}
}

// getJob reads a job through m (a linearizable read); ok is false if the
// node answered that there is no such job.
func getJob(t *testing.T, m *member, id string) (job, bool) {
	t.Helper()
	r := m.cli("job", "get", id, "--json")
	if r.code != 0 {
		if strings.Contains(r.stdout+r.stderr, "not_found") || strings.Contains(r.stdout+r.stderr, "no job") {
			return job{}, false
		}
		t.Fatalf("job get %s via %s: %+v", id, m.name, r)
	}
	var j job
	if err := json.Unmarshal([]byte(r.stdout), &j); err != nil {
		t.Fatal(err)
	}
	return j, true
}

// waitEnded polls a job through m until it ends.
func waitEnded(t *testing.T, m *member, id string, d time.Duration) job {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		j, ok := getJob(t, m, id)
		if !ok {
			t.Fatalf("job %s is unknown to %s", id, m.name)
		}
		switch j.Phase {
		case "completed", "failed", "aborted", "expired":
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s via %s still %s after %s", id, m.name, j.Phase, d)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func submitVia(t *testing.T, m *member, args ...string) string {
	t.Helper()
	r := m.cli(append([]string{"job", "submit"}, args...)...)
	if r.code != 0 {
		t.Fatalf("submit via %s: %+v", m.name, r)
	}
	return strings.TrimSpace(r.stdout)
}

// listAll lists every job through m, page by page.
func listAll(t *testing.T, m *member) []string {
	t.Helper()
	var ids []string
	after := ""
	for {
		args := []string{"job", "list", "--json", "--limit", "1000", "--oldest-first"}
		if after != "" {
			args = append(args, "--after", after)
		}
		var page struct {
			Jobs []struct {
				ID string `json:"id"`
			} `json:"jobs"`
			Next string `json:"next_after_id"`
		}
		mustJSON(t, "job list", m.cli(args...), &page)
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if page.Next == "" {
			return ids
		}
		after = page.Next
	}
}

// busySubmitter submits jobs through a node until stopped, recording for
// each accepted job when its submission was sent and answered.
type busySubmitter struct {
	mu       sync.Mutex
	accepted []acceptedJob
	errs     int
}

type acceptedJob struct {
	id         string
	sent, done time.Time
}

func (b *busySubmitter) run(ctx context.Context, cl *client.Client, module string, prefix string) {
	for i := 0; ctx.Err() == nil; i++ {
		sent := time.Now()
		resp, err := cl.Jobs.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{ModuleSha256: module,
			Input: []byte(fmt.Sprintf("%s-%04d", prefix, i))}))
		b.mu.Lock()
		if err == nil {
			b.accepted = append(b.accepted, acceptedJob{id: resp.Msg.Job.Id, sent: sent, done: time.Now()})
		} else if ctx.Err() == nil {
			b.errs++
		}
		b.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A three-node cluster is backed up with 'palyra snapshot save' while jobs
// keep being submitted, then lost (every process SIGKILLed, every data
// dir deleted) and restored into three new nodes (one restored from the
// file, two joined by pairing). Everything comes back: every job accepted
// before the save (with outputs held in blobs), the array, the secret
// (a job reads it, so the data key came back), the policy, the members
// (a device paired before the loss works with its old credential, and so
// does the old operator); jobs submitted after the save are not there;
// the job count is the snapshot's; the restored cluster takes new work.
func TestSnapshotOfBusyClusterRestoresIntoNewNodes(t *testing.T) {
	t.Parallel()
	reverse, secretWasm, sleep := testwasm.Path(t, "reverse"), testwasm.Path(t, "secret"), testwasm.Path(t, "sleep")
	work := t.TempDir()
	c := newLoopbackCluster(t, 3)
	c.form()
	c.waitViews("3 alive voters and one leader on every node", 90*time.Second, c.members, agree(3, 3))
	n1, n2, n3 := c.members[0], c.members[1], c.members[2]

	// Policy, secret, a paired device, jobs of every shape.
	pol := n1.cli("policy", "get")
	policyFile := filepath.Join(work, "policy.cedar")
	os.WriteFile(policyFile, []byte(pol.stdout+"\n// kept by the snapshot\n"), 0o600)
	if r := n1.cli("policy", "set", policyFile); pol.code != 0 || r.code != 0 {
		t.Fatalf("policy: %+v %+v", pol, r)
	}
	secretFile := filepath.Join(work, "secret")
	os.WriteFile(secretFile, []byte("s3cr3t"), 0o600)
	if r := n2.cli("secret", "set", "tok", "--from-file", secretFile); r.code != 0 {
		t.Fatalf("secret set: %+v", r)
	}
	var pc struct {
		Code string `json:"code"`
	}
	mustJSON(t, "pair create --kind device", n1.cli("pair", "create", "--kind", "device", "--json"), &pc)
	devDir := t.TempDir()
	if r := palyra(t, work, "--config-dir", devDir, "device", "pair", "--code", pc.Code, "--peer", n3.addr); r.code != 0 {
		t.Fatalf("device pair: %+v", r)
	}
	var devStatus struct {
		Caller string `json:"caller"`
	}
	mustJSON(t, "device status", palyra(t, work, "--config-dir", devDir, "--addr", n2.addr, "status", "--json"), &devStatus)
	r := palyra(t, work, "--config-dir", devDir, "--addr", n2.addr, "job", "submit", "--wasm", reverse, "--input", "from the device")
	if r.code != 0 {
		t.Fatalf("device submit: %+v", r)
	}
	devJob := strings.TrimSpace(r.stdout)

	big := strings.Repeat("0123456789abcdef", 600) // above the 4 KiB inline limit: input and output are blobs
	bigFile := filepath.Join(work, "big")
	os.WriteFile(bigFile, []byte(big), 0o600)
	ids := []string{devJob,
		submitVia(t, n2, "--wasm", reverse, "--input-file", bigFile),
		submitVia(t, n3, "--wasm", reverse, "--input", "small"),
		submitVia(t, n3, "--wasm", secretWasm, "--secret", "tok", "--input", "tok"),
	}
	inputs := filepath.Join(work, "inputs")
	os.WriteFile(inputs, []byte("a1\nb2\nc3\nd4\ne5\n"), 0o600)
	arrayID := submitVia(t, n1, "--wasm", reverse, "--inputs", inputs)
	for i := 0; i < 5; i++ {
		ids = append(ids, fmt.Sprintf("%s.%d", arrayID, i))
	}
	want := map[string]job{}
	for _, id := range ids {
		j := waitEnded(t, n1, id, 2*time.Minute)
		if j.Phase != "completed" {
			t.Fatalf("job %s: %+v", id, j)
		}
		want[id] = j
	}
	if want[ids[1]].Output != reverseString(big) || !strings.HasPrefix(want[ids[3]].Output, "len=6 ") {
		t.Fatalf("unexpected outputs: big %d bytes, secret %q", len(want[ids[1]].Output), want[ids[3]].Output)
	}
	// Two jobs still running while the snapshot is taken.
	sleepers := []string{submitVia(t, n2, "--wasm", sleep, "--input", "4s"), submitVia(t, n3, "--wasm", sleep, "--input", "4s")}

	// Busy: jobs keep coming through n2 and n3 while the snapshot is saved
	// (through n2, which does not hold the CA: the CLI is sent to n1).
	cred, err := identity.LoadCredential(node.Layout{Dir: n1.dataDir}.OperatorDir())
	if err != nil {
		t.Fatal(err)
	}
	module := want[ids[2]].moduleSHA(t, n1)
	busy := &busySubmitter{}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, m := range []*member{n2, n3} {
		cl, err := client.New(m.addr, cred)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		wg.Add(1)
		go func(m *member) { defer wg.Done(); busy.run(ctx, cl, module, m.name) }(m)
	}
	time.Sleep(time.Second)
	file := filepath.Join(work, "cluster.snap")
	saveStart := time.Now()
	save := n2.cli("snapshot", "save", file, "--json")
	saveEnd := time.Now()
	time.Sleep(time.Second)
	stop()
	wg.Wait()
	var saved struct {
		RaftIndex uint64   `json:"raft_index"`
		Jobs      uint64   `json:"jobs"`
		Blobs     int      `json:"blobs"`
		Missing   []string `json:"missing_blobs"`
		SHA256    string   `json:"sha256"`
	}
	mustJSON(t, "snapshot save", save, &saved)
	// n2 is a voter, so it holds the CA key and saves the snapshot itself
	// (a non-voter redirects the CLI to a voter: node/snapshot_test.go).
	if saved.RaftIndex == 0 || len(saved.Missing) != 0 || saved.Blobs < 4 {
		t.Fatalf("snapshot save: %+v", save)
	}
	var before, during, after []string
	for _, a := range busy.accepted {
		switch {
		case a.done.Before(saveStart):
			before = append(before, a.id)
		case a.sent.After(saveEnd):
			after = append(after, a.id)
		default:
			during = append(during, a.id)
		}
	}
	t.Logf("snapshot at raft index %d: %d jobs, %d blobs; busy submissions: %d before, %d during, %d after the save (%d refused)",
		saved.RaftIndex, saved.Jobs, saved.Blobs, len(before), len(during), len(after), busy.errs)
	if len(before) == 0 || len(during) == 0 || len(after) == 0 {
		t.Fatalf("the cluster was not busy around the save: %d before, %d during, %d after", len(before), len(during), len(after))
	}

	var inspected struct {
		Jobs      uint64 `json:"jobs"`
		RaftIndex uint64 `json:"raft_index"`
		SHA256    string `json:"sha256"`
	}
	mustJSON(t, "snapshot inspect", palyra(t, work, "snapshot", "inspect", file, "--json"), &inspected)
	if inspected.Jobs != saved.Jobs || inspected.RaftIndex != saved.RaftIndex || inspected.SHA256 != saved.SHA256 {
		t.Fatalf("inspect %+v, save %+v", inspected, saved)
	}
	// A truncated copy is refused and restores nothing.
	data, _ := os.ReadFile(file)
	short := filepath.Join(work, "short.snap")
	os.WriteFile(short, data[:len(data)*2/3], 0o600)
	bad := filepath.Join(work, "never")
	if r := palyra(t, work, "--data-dir", bad, "snapshot", "restore", short, "--listen", "127.0.0.1:7"); r.code == 0 ||
		!strings.Contains(r.stderr, "truncated") || !strings.Contains(r.stderr, "hint:") {
		t.Fatalf("restore of a truncated file: %+v", r)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("a refused restore left %s behind", bad)
	}

	// The cluster is lost: every process killed, every data dir deleted
	// (the old operator's credential is kept, as an operator would have it
	// on their own machine).
	oldOp := t.TempDir()
	copyDir(t, node.Layout{Dir: n1.dataDir}.OperatorDir(), node.Layout{Dir: oldOp}.OperatorDir())
	oldIDs := []string{n1.id, n2.id, n3.id}
	for _, m := range c.members {
		m.kill()
		os.RemoveAll(m.dataDir)
	}

	// Restore into three new nodes: one from the file, two by pairing.
	rc := newLoopbackCluster(t, 3)
	r1, r2, r3 := rc.members[0], rc.members[1], rc.members[2]
	var restored struct {
		NodeID  string   `json:"node_id"`
		Revoked []string `json:"revoked_nodes"`
		Jobs    uint64   `json:"jobs"`
	}
	mustJSON(t, "snapshot restore", palyra(t, work, "--data-dir", r1.dataDir, "snapshot", "restore", file, "--listen", r1.addr, "--json"), &restored)
	slices.Sort(restored.Revoked)
	slices.Sort(oldIDs)
	if !slices.Equal(restored.Revoked, oldIDs) || restored.Jobs != saved.Jobs {
		t.Fatalf("restore: %+v; old nodes %v", restored, oldIDs)
	}
	if r := palyra(t, work, "--data-dir", r1.dataDir, "snapshot", "restore", file, "--listen", r1.addr); r.code == 0 || !strings.Contains(r.stderr, "--force") {
		t.Fatalf("restore over a restored data dir: %+v", r)
	}
	r1.startNode()
	r1.waitUp(90 * time.Second)
	for _, m := range []*member{r2, r3} {
		m.joinNode(rc.pairCode(r1), r1.addr)
		m.waitUp(90 * time.Second)
	}
	rc.waitViews("the restored cluster: 3 alive voters and one leader", 90*time.Second, rc.members, agree(3, 3))

	// Every job: the count is the snapshot's; accepted before the save →
	// there; submitted after it → not; the rest, if there, intact.
	all := listAll(t, r1)
	if uint64(len(all)) != saved.Jobs {
		t.Fatalf("restored cluster lists %d jobs, the snapshot held %d", len(all), saved.Jobs)
	}
	have := map[string]bool{}
	for _, id := range all {
		have[id] = true
	}
	for id, w := range want {
		got := waitEnded(t, r2, id, 2*time.Minute)
		if got.Phase != w.Phase || got.Output != w.Output || got.NodeID != w.NodeID || got.Attempt != w.Attempt {
			t.Fatalf("job %s after restore: %+v, want %+v", id, got, w)
		}
	}
	for _, id := range sleepers {
		if j := waitEnded(t, r3, id, 2*time.Minute); j.Phase != "completed" || j.Output != "slept 4s" {
			t.Fatalf("job running at the save, after restore: %+v", j)
		}
	}
	for _, id := range before {
		if !have[id] {
			t.Fatalf("job %s, accepted before the save began, is not in the restored cluster", id)
		}
	}
	for _, id := range after {
		if have[id] {
			t.Fatalf("job %s, submitted after the save ended, is in the restored cluster", id)
		}
	}
	for _, id := range slices.Concat(before[max(0, len(before)-3):], during) {
		if !have[id] {
			continue
		}
		if j := waitEnded(t, r3, id, 2*time.Minute); j.Phase != "completed" || !strings.HasSuffix(j.Output, "-2n") && !strings.HasSuffix(j.Output, "-3n") {
			t.Fatalf("busy job %s after restore: %+v", id, j)
		}
	}

	// Secrets open (the data key came back), the policy is the one set,
	// members are back: the device and the old operator work with their
	// old credentials; the old nodes are gone.
	sj := submitVia(t, r3, "--wasm", secretWasm, "--secret", "tok", "--input", "tok")
	if j := waitEnded(t, r2, sj, 2*time.Minute); j.Output != want[ids[3]].Output {
		t.Fatalf("secret job after restore: %+v, want output %q", j, want[ids[3]].Output)
	}
	var gp struct {
		Source string `json:"source"`
	}
	mustJSON(t, "policy get", r2.cli("policy", "get", "--json"), &gp)
	if !strings.Contains(gp.Source, "// kept by the snapshot") {
		t.Fatalf("policy after restore: %q", gp.Source)
	}
	var devs struct {
		Devices []struct {
			ID string `json:"id"`
		} `json:"devices"`
	}
	mustJSON(t, "device list", r1.cli("device", "list", "--json"), &devs)
	var devIDs []string
	for _, d := range devs.Devices {
		devIDs = append(devIDs, "device:"+d.ID)
	}
	opCred, _ := identity.LoadCredential(node.Layout{Dir: oldOp}.OperatorDir())
	if !slices.Contains(devIDs, devStatus.Caller) || !slices.Contains(devIDs, opCred.Principal.String()) {
		t.Fatalf("devices after restore %v; want %s and %s", devIDs, devStatus.Caller, opCred.Principal)
	}
	if r := palyra(t, work, "--config-dir", devDir, "--addr", r2.addr, "job", "get", devJob, "--json"); r.code != 0 || !strings.Contains(r.stdout, reverseString("from the device")) {
		t.Fatalf("the device, with its old credential, reading its job on the restored cluster: %+v", r)
	}
	// The old nodes' local operator credentials went with the old nodes
	// (their keys are on the machines the operator is told to wipe); a
	// paired device's (above) keeps working.
	if r := palyra(t, work, "--data-dir", oldOp, "--addr", r3.addr, "job", "get", ids[2], "--json"); r.code == 0 || !strings.Contains(r.stderr, "refused this credential") {
		t.Fatalf("the old first node's local operator credential on the restored cluster: %+v", r)
	}
	v, _ := r1.nodes()
	for _, n := range v.Nodes {
		if slices.Contains(oldIDs, n.ID) {
			t.Fatalf("old node %s listed by the restored cluster: %s", n.ID, v)
		}
	}
	if j, r := r2.runJob(reverse, "after the restore", time.Minute); j.Phase != "completed" || j.Output != reverseString("after the restore") {
		t.Fatalf("new job on the restored cluster: %+v %+v", j, r)
	}
}

// moduleSHA reads a job's module hash through m.
func (j job) moduleSHA(t *testing.T, m *member) string {
	t.Helper()
	var full struct {
		Module string `json:"module_sha256"`
	}
	mustJSON(t, "job get", m.cli("job", "get", j.ID, "--json"), &full)
	if full.Module == "" {
		t.Fatalf("job %s has no module hash", j.ID)
	}
	return full.Module
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
