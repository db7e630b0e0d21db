package api

import (
	"context"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/palyra-mesh/palyra/identity"
	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

func TestPlausibleJobID(t *testing.T) {
	for id, want := range map[string]bool{
		"j-0123456789abcdef":      true,
		"j-0123456789abcdef.0":    true,
		"j-0123456789abcdef.9999": true,
		newJobID():                true,
		newJobID() + ".12":        true,
		"j-5ed":                   false,
		"j-doesnotexist":          false,
		"j-0123456789ABCDEF":      false, // ids are lowercase
		"0123456789abcdef":        false,
		"j-0123456789abcdef.":     false,
		"j-0123456789abcdef.x":    false,
		"j-0123456789abcdef0":     false,
		"j-0123456789abcdef.-1":   false,
		"h-0123456789abcdef":      false,
		"":                        false,
	} {
		if got := plausibleJobID(id); got != want {
			t.Errorf("plausibleJobID(%q) = %v, want %v", id, got, want)
		}
	}
}

// A task index past an array's end says how many tasks the array has,
// for get and cancel alike, not that the task may have been pruned.
func TestTaskPastArrayEnd(t *testing.T) {
	js, _, _, _, ctx := newSubmitServer(t)
	arr, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("past-end"), Inputs: [][]byte{[]byte("a"), []byte("b"), []byte("c")}}))
	if err != nil {
		t.Fatal(err)
	}
	id := arr.Msg.Array.Id
	if _, err := js.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id + ".2"})); err != nil {
		t.Fatalf("get the last task: %v", err)
	}
	for what, call := range map[string]func(string) error{
		"get": func(id string) error {
			_, err := js.GetJob(ctx, connect.NewRequest(&palyrav1.GetJobRequest{Id: id}))
			return err
		},
		"cancel": func(id string) error {
			_, err := js.CancelJob(ctx, connect.NewRequest(&palyrav1.CancelJobRequest{Id: id}))
			return err
		},
	} {
		for _, task := range []string{id + ".3", id + ".99", id + ".9999999999"} {
			err := call(task)
			pe := apiCode(t, err)
			if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(pe.Message, "job array "+id+" has 3 tasks (indexes 0 to 2)") ||
				strings.Contains(pe.Message, "pruned") || !strings.Contains(pe.Hint, "palyra job list --array "+id) {
				t.Errorf("%s %s: %v (message %q, hint %q); want not_found saying the array has 3 tasks, 0 to 2", what, task, err, pe.Message, pe.Hint)
			}
		}
		// A leading zero names a task that exists without it (it was
		// called perhaps pruned).
		err := call(id + ".02")
		if pe := apiCode(t, err); connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(pe.Message, "no leading zeros") || pe.Hint != "use "+id+".2" {
			t.Errorf("%s %s.02: %v (message %q, hint %q)", what, id, err, pe.Message, pe.Hint)
		}
	}
}

// What not-found says of an array (its size) is said only to a caller who
// may read the array: another device gets the refusal a read gives it.
func TestTaskPastArrayEndTellsOnlyReaders(t *testing.T) {
	js, _, _, _, ctx := newSubmitServer(t)
	arr, err := js.SubmitJob(ctx, connect.NewRequest(&palyrav1.SubmitJobRequest{WasmModule: tinyModule("past-end-other"), Inputs: [][]byte{[]byte("a"), []byte("b")}}))
	if err != nil {
		t.Fatal(err)
	}
	id := arr.Msg.Array.Id
	other := context.WithValue(context.Background(), principalKey{}, identity.Principal{Kind: identity.KindDevice, ID: "d-someoneelse"})
	if _, err := js.GetJob(other, connect.NewRequest(&palyrav1.GetJobRequest{Id: id})); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Fatalf("set-up: another device reads the array: %v; want permission denied by the default policy", err)
	}
	for _, task := range []string{id + ".5", id} {
		_, err := js.CancelJob(other, connect.NewRequest(&palyrav1.CancelJobRequest{Id: task}))
		if connect.CodeOf(err) != connect.CodePermissionDenied || strings.Contains(err.Error(), "2 tasks") {
			t.Errorf("cancel %s by another device: %v; want permission denied, not the array's size", task, err)
		}
	}
}
