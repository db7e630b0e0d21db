package policy

import (
	"testing"
)

var (
	opDevice    = Principal{Kind: KindDevice, ID: "d-0e0e0e0e", Operator: true, Name: "alice-laptop"}
	plainDevice = Principal{Kind: KindDevice, ID: "d-1a2b3c4d"}
	otherDevice = Principal{Kind: KindDevice, ID: "d-99999999"}
	node        = Principal{Kind: KindNode, ID: "n-1a2b3c4d", Labels: map[string]string{"zone": "eu"}}
)

// mustParse parses src or fails the test.
func mustParse(t testing.TB, src string) *Set {
	t.Helper()
	s, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return s
}

// defaultEngine serves the shipped default policy.
func defaultEngine(t testing.TB) *Engine {
	t.Helper()
	return NewEngine(mustParse(t, string(DefaultPolicy())))
}

// resourceFor returns a resource of the type action takes; jobs are owned by
// owner.
func resourceFor(t testing.TB, action string, owner Principal) Resource {
	t.Helper()
	switch rs := schemaModel.appliesTo[action].resources; rs[0] {
	case TypeJob:
		return JobResource("j-1", owner.String(), "wasm")
	case TypeGrant:
		return GrantResource(GrantHTTP, "api.example.com")
	case TypeCluster:
		return ClusterResource()
	default:
		t.Fatalf("action %s takes unknown resource types %v", action, rs)
		return Resource{}
	}
}
