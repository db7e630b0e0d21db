package browser

import (
	"encoding/json"
	"errors"
	"testing"
)

// FuzzParseScript: ParseScript never panics, refuses only with a
// *ScriptError, and what it accepts is within every limit and survives a
// round trip through JSON unchanged.
func FuzzParseScript(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"steps":null}`, `{"steps":[{}]}`,
		`{"steps":[{"action":"navigate","url":"https://example.com/"}]}`,
		`{"timeout_ms":1000,"steps":[{"action":"type","selector":"#u","text":"bob"},{"action":"press","key":"Enter"}]}`,
		`{"steps":[{"action":"wait_for","text":"hi"},{"action":"extract","selector":"a","attribute":"href","name":"l"}]}`,
		`{"steps":[{"action":"evaluate","expression":"1+2","name":"sum"},{"action":"screenshot","full_page":true},{"action":"pdf","name":"p.pdf"}]}`,
		`{"steps":[{"action":"click","selector":"#a","timeout_ms":1e3}]}`,
		`{"steps":[{"action":"click","selector":"#a","selector":"#b"}]}`,
		"{\"steps\":[{\"action\":\"press\",\"key\":\"\xff\"}]}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseScript(data)
		if err != nil {
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error %T is not a *ScriptError: %v", err, err)
			}
			return
		}
		if len(s.Steps) == 0 || len(s.Steps) > MaxSteps {
			t.Fatalf("accepted %d steps", len(s.Steps))
		}
		for i, st := range s.Steps {
			if len(st.Selector) > MaxSelectorBytes || len(st.Text) > MaxTypeTextBytes ||
				len(st.Expression) > MaxExpressionBytes || len(st.URL) > MaxURLBytes || len(st.Name) > MaxNameBytes {
				t.Fatalf("steps[%d] exceeds a limit: %+v", i, st)
			}
			if _, ok := actionFields[st.Action]; !ok {
				t.Fatalf("steps[%d] has unknown action %q", i, st.Action)
			}
		}
		again, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := ParseScript(again)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", again, err)
		}
		if b, _ := json.Marshal(s2); string(b) != string(again) {
			t.Fatalf("round trip changed the script:\n%s\n%s", again, b)
		}
	})
}
