package browser

import (
	"errors"
	"strings"
	"testing"
)

func TestParseScriptAccepts(t *testing.T) {
	s, err := ParseScript([]byte(`{"timeout_ms": 5000, "steps": [
	  {"action":"navigate","url":"https://example.com/login"},
	  {"action":"type","selector":"#user","text":"bob"},
	  {"action":"click","selector":"#login","timeout_ms":2000},
	  {"action":"press","key":"Enter"},
	  {"action":"press","key":"x"},
	  {"action":"wait_for","selector":"#done"},
	  {"action":"wait_for","text":"Welcome"},
	  {"action":"extract","selector":"#name","name":"user"},
	  {"action":"extract","selector":"a","attribute":"href","name":"link"},
	  {"action":"evaluate","expression":"1+2","name":"sum"},
	  {"action":"screenshot"},
	  {"action":"screenshot","name":"el.png","selector":"#name"},
	  {"action":"screenshot","name":"full.png","full_page":true},
	  {"action":"pdf"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Steps) != 14 || s.TimeoutMS != 5000 || s.Steps[2].TimeoutMS != 2000 {
		t.Fatalf("parsed %+v", s)
	}
	if s.Steps[10].Name != "step10.png" || s.Steps[13].Name != "step13.pdf" {
		t.Errorf("default artifact names %q %q, want step10.png and step13.pdf", s.Steps[10].Name, s.Steps[13].Name)
	}
}

func TestParseScriptRejects(t *testing.T) {
	step := func(s string) string { return `{"steps":[{"action":"navigate","url":"https://a.example/"},` + s + `]}` }
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []struct {
		name, script string
		step         int      // -1: not about one step
		want         []string // fragments of the message
	}{
		{"empty", ``, -1, []string{"empty"}},
		{"not JSON", `{"steps":`, -1, []string{"bad JSON"}},
		{"not an object", `[1,2]`, -1, []string{"bad JSON"}},
		{"unknown top field", `{"steps":[{"action":"navigate","url":"https://a/"}],"retries":3}`, -1, []string{"unknown field", "retries"}},
		{"trailing data", `{"steps":[{"action":"navigate","url":"https://a/"}]} {}`, -1, []string{"after the object"}},
		{"no steps", `{"steps":[]}`, -1, []string{"missing or empty"}},
		{"too many steps", `{"steps":[` + strings.Repeat(`{"action":"press","key":"a"},`, MaxSteps) + `{"action":"press","key":"a"}]}`, -1, []string{"257 steps", "256"}},
		{"bad script timeout", `{"timeout_ms":0,"steps":[{"action":"press","key":"a"}]}`, -1, []string{"timeout_ms", "out of range"}},
		{"step not object", step(`"click"`), 1, []string{"JSON object"}},
		{"no action", step(`{"selector":"#a"}`), 1, []string{`"action" is missing`}},
		{"unknown action", step(`{"action":"hover","selector":"#a"}`), 1, []string{`unknown action "hover"`, "navigate"}},
		{"field of another action", step(`{"action":"click","selector":"#a","text":"x"}`), 1, []string{`click does not take field "text"`, "remove it"}},
		{"unknown field", step(`{"action":"click","selector":"#a","force":true}`), 1, []string{`"force"`}},
		{"wrong type", step(`{"action":"click","selector":5}`), 1, []string{"click", "bad JSON"}},
		{"missing url", `{"steps":[{"action":"navigate"}]}`, 0, []string{`needs "url"`}},
		{"file url", `{"steps":[{"action":"navigate","url":"file:///etc/passwd"}]}`, 0, []string{"http:// or https://"}},
		{"javascript url", `{"steps":[{"action":"navigate","url":"javascript:alert(1)"}]}`, 0, []string{"http:// or https://"}},
		{"no host", `{"steps":[{"action":"navigate","url":"http:///x"}]}`, 0, []string{"no host"}},
		{"long url", `{"steps":[{"action":"navigate","url":"https://a/` + long(MaxURLBytes) + `"}]}`, 0, []string{"limit"}},
		{"missing selector", step(`{"action":"click"}`), 1, []string{`needs "selector"`}},
		{"long selector", step(`{"action":"click","selector":"` + long(MaxSelectorBytes+1) + `"}`), 1, []string{"selector is", "limit"}},
		{"long text", step(`{"action":"type","selector":"#a","text":"` + long(MaxTypeTextBytes+1) + `"}`), 1, []string{"text is 4097 bytes", "4096"}},
		{"type without text", step(`{"action":"type","selector":"#a"}`), 1, []string{`needs "text"`}},
		{"NUL in text", step(`{"action":"type","selector":"#a","text":"a\u0000b"}`), 1, []string{"NUL"}},
		{"bad key", step(`{"action":"press","key":"Hyper"}`), 1, []string{"Hyper", "Enter"}},
		{"wait both", step(`{"action":"wait_for","selector":"#a","text":"b"}`), 1, []string{"exactly one"}},
		{"wait neither", step(`{"action":"wait_for"}`), 1, []string{"exactly one"}},
		{"extract no name", step(`{"action":"extract","selector":"#a"}`), 1, []string{`needs "name"`}},
		{"bad name", step(`{"action":"extract","selector":"#a","name":"../x"}`), 1, []string{"name", "letters"}},
		{"bad attribute", step(`{"action":"extract","selector":"#a","attribute":"on click","name":"x"}`), 1, []string{"not a valid attribute"}},
		{"duplicate value", step(`{"action":"evaluate","expression":"1","name":"x"},{"action":"evaluate","expression":"2","name":"x"}`), 2, []string{"already used by steps[1]"}},
		{"duplicate artifact", step(`{"action":"pdf","name":"a.pdf"},{"action":"pdf","name":"a.pdf"}`), 2, []string{"already used by steps[1]"}},
		{"long expression", step(`{"action":"evaluate","expression":"` + long(MaxExpressionBytes+1) + `","name":"x"}`), 1, []string{"expression is", "limit"}},
		{"png name", step(`{"action":"screenshot","name":"shot.jpg"}`), 1, []string{"must end in .png"}},
		{"full page and selector", step(`{"action":"screenshot","selector":"#a","full_page":true}`), 1, []string{"exclude each other"}},
		{"bad step timeout", step(`{"action":"click","selector":"#a","timeout_ms":-1}`), 1, []string{"timeout_ms", "out of range"}},
		{"huge", `{"steps":[],"x":"` + long(MaxScriptBytes) + `"}`, -1, []string{"limit"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseScript([]byte(c.script))
			if err == nil {
				t.Fatalf("accepted, want an error containing %q", c.want)
			}
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v is not a *ScriptError", err, err)
			}
			if se.Step != c.step {
				t.Errorf("error names step %d, want %d: %v", se.Step, c.step, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}
