// Command gate is an example hook tool (examples/skills/guard). Bound to
// before_run, it reads the job's description and decides: a job with more
// than 100 bytes of input is blocked, one that asks for HTTP egress waits
// for a person's approval, anything else goes ahead with an annotation.
// Bound to after_run or a system event, it reports what it saw.
//
// Build: GOOS=wasip1 GOARCH=wasm go build -trimpath -o gate.wasm ./examples/gate
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type event struct {
	Event   string `json:"event"`
	Hook    string `json:"hook"`
	Subject string `json:"subject"`
	Job     struct {
		ID         string   `json:"id"`
		Phase      string   `json:"phase"`
		InputSize  int      `json:"input_size"`
		AllowHosts []string `json:"allow_hosts"`
	} `json:"job"`
}

func main() {
	var ev event
	if err := json.NewDecoder(os.Stdin).Decode(&ev); err != nil {
		fmt.Fprintln(os.Stderr, "gate: want a hook event on stdin:", err)
		os.Exit(1)
	}
	out := map[string]any{"decision": "continue"}
	switch ev.Event {
	case "before_run":
		switch {
		case ev.Job.InputSize > 100:
			out = map[string]any{"decision": "block", "reason": fmt.Sprintf("input of %d bytes is over gate's 100", ev.Job.InputSize)}
		case len(ev.Job.AllowHosts) > 0:
			out = map[string]any{"decision": "request_approval", "reason": "HTTP egress needs a person's approval"}
		default:
			out = map[string]any{"decision": "annotate", "annotation": "checked by gate"}
		}
	case "after_run":
		out["seen"], out["phase"] = ev.Job.ID, ev.Job.Phase
	default:
		out["seen"] = ev.Subject
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
