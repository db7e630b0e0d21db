package policy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A job named by a policy is told apart from another job with the same
// attributes, whichever of them was decided (and remembered) first.
func TestMemoTellsANamedJobApart(t *testing.T) {
	src := string(DefaultPolicy()) + `
@id("keep-j-1")
forbid(principal, action == Palyra::Action::"job.cancel", resource == Palyra::Job::"j-1");
`
	e := NewEngine(mustParse(t, src))
	if e.Current().idBlind[TypeJob] {
		t.Fatal("a set naming Palyra::Job::\"j-1\" counts as blind to job IDs")
	}
	other := Request{Principal: plainDevice, Action: ActionJobCancel, Resource: JobResource("j-2", plainDevice.String(), "wasm")}
	named := other
	named.Resource = JobResource("j-1", plainDevice.String(), "wasm")
	for i := 0; i < 2; i++ { // the second round is answered from the memo
		if d := e.Authorize(other); !d.Allow {
			t.Fatalf("round %d: cancel of j-2 denied: %s", i, Explain(d))
		}
		if d := e.Authorize(named); d.Allow || !slices.Equal(d.Reasons, []string{"keep-j-1"}) {
			t.Fatalf("round %d: cancel of j-1: %s, want denied by keep-j-1", i, Explain(d))
		}
	}
}

// Every way a policy can name an entity takes its type off the blind
// list; `is` does not.
func TestIDBlindTypes(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		blindJob  bool
	}{
		{"default policy", string(DefaultPolicy()), true},
		{"is only", `permit(principal, action, resource is Palyra::Job) when { resource is Palyra::Job };`, true},
		{"scope ==", `permit(principal, action, resource == Palyra::Job::"j-1");`, false},
		{"scope in", `permit(principal, action, resource is Palyra::Job in Palyra::Job::"j-1");`, false},
		{"condition", `permit(principal, action == Palyra::Action::"job.cancel", resource) when { [Palyra::Job :: "x"].contains(resource) };`, false},
		{"comment in the way", `permit(principal, action == Palyra::Action::"job.cancel", resource) when { resource == Palyra::Job // j
			::"x" };`, false},
		{"in a string only", `permit(principal, action, resource) when { principal.name == "Palyra::Job::\"x\"" };`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := mustParse(t, tc.src)
			if got := s.idBlind[TypeJob]; got != tc.blindJob {
				t.Fatalf("blind to job IDs = %v, want %v", got, tc.blindJob)
			}
		})
	}
}

// The memo never changes an answer: random requests against two sets
// (one naming jobs and grants, one not) are decided as a set with an
// empty memo decides each of them.
func TestMemoAnswersAsEvaluation(t *testing.T) {
	naming := string(DefaultPolicy()) + `
@id("no-j-3")
forbid(principal, action, resource == Palyra::Job::"j-3");
@id("eu-nodes")
permit(principal is Palyra::Node, action == Palyra::Action::"job.read", resource) when { principal.hasTag("zone") && principal.getTag("zone") == "eu" };
@id("big")
forbid(principal, action == Palyra::Action::"job.submit", resource) when { context has job_kind && context.job_kind == "browser" };
`
	for _, src := range []string{string(DefaultPolicy()), naming} {
		e := NewEngine(mustParse(t, src))
		rng := rand.New(rand.NewPCG(1, 2))
		principals := []Principal{opDevice, plainDevice, otherDevice, node,
			{Kind: KindNode, ID: "n-1a2b3c4d", Labels: map[string]string{"zone": "us"}}}
		actions := []string{ActionJobSubmit, ActionJobRead, ActionJobCancel, ActionWorkerReport, ActionNodeStatus}
		for i := 0; i < 2000; i++ {
			p := principals[rng.IntN(len(principals))]
			a := actions[rng.IntN(len(actions))]
			var res Resource
			var ctx map[string]any
			switch rs := schemaModel.appliesTo[a].resources; rs[0] {
			case TypeJob:
				owner := principals[rng.IntN(len(principals))]
				res = JobResource(fmt.Sprintf("j-%d", rng.IntN(5)), owner.String(), []string{"wasm", "browser"}[rng.IntN(2)])
			default:
				res = ClusterResource()
			}
			if a == ActionJobSubmit {
				ctx = map[string]any{"job_kind": []string{"wasm", "browser"}[rng.IntN(2)]}
			}
			r := Request{Principal: p, Action: a, Resource: res, Context: ctx}
			got := e.Authorize(r)
			want := NewEngine(mustParse(t, src)).Authorize(r)
			if got.Allow != want.Allow || !slices.Equal(got.Reasons, want.Reasons) || Explain(got) != Explain(want) {
				t.Fatalf("request %d %+v: memo says %q, evaluation %q", i, r, Explain(got), Explain(want))
			}
		}
		if n := len(e.Current().memo.m); n == 0 {
			t.Fatal("nothing was remembered")
		}
	}
}

// A request refused by the schema check is refused even when a valid one
// that differs only in what the memo leaves out was remembered.
func TestMemoKeepsTheRequestCheck(t *testing.T) {
	e := defaultEngine(t)
	ok := Request{Principal: opDevice, Action: ActionJobCancel, Resource: JobResource("j-1", opDevice.String(), "wasm")}
	if d := e.Authorize(ok); !d.Allow {
		t.Fatalf("operator cancel denied: %s", Explain(d))
	}
	bad := ok
	bad.Resource = JobResource("", opDevice.String(), "wasm")
	if d := e.Authorize(bad); d.Allow || len(d.Errors) == 0 {
		t.Fatalf("a job without an ID: %s, want a bad request", Explain(d))
	}
}

// Values the key cannot spell exactly (floats, lists, Cedar values) are
// not remembered, and no two requests share a key.
func TestMemoSkipsValuesItCannotKey(t *testing.T) {
	s := mustParse(t, string(DefaultPolicy()))
	r := Request{Principal: plainDevice, Action: ActionJobSubmit, Resource: ClusterResource()}
	for _, v := range []any{1.0, []string{"a"}, map[string]any{"a": "b"}} {
		r.Context = map[string]any{"job_kind": v}
		if _, ok := s.memoKey(nil, r); ok {
			t.Errorf("a %T context value was keyed", v)
		}
	}
	// Numbers end where the next field begins only by their terminator:
	// without it these two spelled the same key.
	r.Context = map[string]any{"a": 1, "xyzs20:pppppppppppppppp": "q"}
	ka, _ := s.memoKey(nil, r)
	r.Context = map[string]any{"a": 12, "xyz": "pppppppppppppppps1:q"}
	kb, _ := s.memoKey(nil, r)
	if string(ka) == string(kb) {
		t.Fatalf("two contexts share the key %q", ka)
	}
	r.Context = map[string]any{"job_kind": "wasm"}
	k1, ok1 := s.memoKey(nil, r)
	r.Context = map[string]any{"job_kind": "wasm2"}
	k2, ok2 := s.memoKey(nil, r)
	if !ok1 || !ok2 || string(k1) == string(k2) {
		t.Fatalf("keys %q (%v) and %q (%v): want two different keys", k1, ok1, k2, ok2)
	}
}

func BenchmarkAuthorizeSubmit(b *testing.B) {
	e := defaultEngine(b)
	r := Request{Principal: plainDevice, Action: ActionJobSubmit, Resource: ClusterResource(), Context: map[string]any{"job_kind": "wasm"}}
	for b.Loop() {
		if !e.Authorize(r).Allow {
			b.Fatal("denied")
		}
	}
}

func BenchmarkAuthorizeJobWork(b *testing.B) {
	e := defaultEngine(b)
	for i := 0; b.Loop(); i++ {
		r := Request{Principal: node, Action: ActionWorkerReport, Resource: JobResource("j-"+fmt.Sprint(i), plainDevice.String(), "wasm")}
		if !e.Authorize(r).Allow {
			b.Fatal("denied")
		}
	}
}
