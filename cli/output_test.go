package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/palyra-mesh/palyra/proto/palyrav1"
)

// A job in a list carries no payloads: no "output"/"stderr" keys (an
// empty one read as an empty result), but its sizes; a single job keeps
// its output key even when the output is empty.
func TestListJobJSONHasNoPayloadKeys(t *testing.T) {
	j := &palyrav1.Job{Id: "j-1", Phase: palyrav1.JobPhase_JOB_PHASE_COMPLETED, StdoutSize: 8, StderrSize: 3}
	b, err := json.Marshal(listJobJSON{jobJSON: toJobJSON(j)})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, `"output"`) || strings.Contains(s, `"stderr"`) || !strings.Contains(s, `"output_size":8`) || !strings.Contains(s, `"stderr_size":3`) {
		t.Fatalf("list entry: %s", s)
	}
	b, _ = json.Marshal(toJobJSON(j))
	if !strings.Contains(string(b), `"output":""`) {
		t.Fatalf("single job: %s", b)
	}
}
